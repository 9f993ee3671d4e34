// One chat turn in either protocol: the request body it sends, and what each SSE event means.
// Every event becomes a plain update {text, usage, finish, error, done}, so the playground
// handles both protocols alike. Usage is {prompt, cached, completion}, each when known.

function numberOrUndefined(value) {
  return value === "" || value === null || value === undefined ? undefined : Number(value);
}

/** Drop the settings left empty, so the gateway applies its own defaults. */
function defined(entries) {
  return Object.fromEntries(Object.entries(entries).filter(([, v]) => v !== undefined));
}

export const PROTOCOLS = {
  openai: {
    path: "v1/chat/completions",
    note: "Usage from stream_options.include_usage: prompt_tokens_details.cached_tokens.",
    body({ model, system, messages, settings }) {
      const turns = system ? [{ role: "system", content: system }, ...messages] : messages;
      return defined({
        model: model || undefined,
        messages: turns,
        stream: true,
        stream_options: { include_usage: true },
        temperature: numberOrUndefined(settings.temperature),
        top_p: numberOrUndefined(settings.topP),
        max_tokens: numberOrUndefined(settings.maxTokens),
        seed: numberOrUndefined(settings.seed),
        stop: settings.stop.length ? settings.stop : undefined,
        ignore_eos: settings.ignoreEos || undefined,
      });
    },
    update({ data }) {
      if (data === "[DONE]") return { done: true };
      const chunk = JSON.parse(data);
      if (chunk.error) return { error: chunk.error.message || "error" };
      const update = {};
      const choice = chunk.choices && chunk.choices[0];
      if (choice && choice.delta && choice.delta.content) update.text = choice.delta.content;
      if (choice && choice.finish_reason) update.finish = choice.finish_reason;
      if (chunk.usage) {
        const details = chunk.usage.prompt_tokens_details || {};
        update.usage = {
          prompt: chunk.usage.prompt_tokens,
          cached: details.cached_tokens || 0,
          completion: chunk.usage.completion_tokens,
        };
      }
      return update;
    },
  },

  anthropic: {
    path: "v1/messages",
    note: "Usage from message_start and message_delta (cache_read_input_tokens). No seed or ignore_eos.",
    body({ model, system, messages, settings }) {
      return defined({
        model,
        system: system || undefined,
        messages,
        stream: true,
        temperature: numberOrUndefined(settings.temperature),
        top_p: numberOrUndefined(settings.topP),
        max_tokens: numberOrUndefined(settings.maxTokens) ?? 1024,
        stop_sequences: settings.stop.length ? settings.stop : undefined,
      });
    },
    update({ event, data }) {
      const payload = JSON.parse(data);
      switch (event) {
        case "message_start":
          // The whole prompt; its cached share comes with message_delta.
          return { usage: { prompt: payload.message.usage.input_tokens } };
        case "content_block_delta":
          return payload.delta.type === "text_delta" ? { text: payload.delta.text } : {};
        case "message_delta": {
          const usage = payload.usage || {};
          const cached = usage.cache_read_input_tokens || 0;
          return {
            finish: payload.delta.stop_reason,
            usage: {
              prompt: (usage.input_tokens || 0) + cached,
              cached,
              completion: usage.output_tokens,
            },
          };
        }
        case "message_stop":
          return { done: true };
        case "error":
          return { error: (payload.error && payload.error.message) || "error" };
        default:
          return {};
      }
    },
  },
};

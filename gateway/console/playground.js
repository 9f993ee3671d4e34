// The playground: a chat streamed over the real API in either protocol, a stop button that
// aborts the request (the gateway sees the disconnect and the worker frees its pages), and
// per reply its time to first token, tokens/s, prompt tokens and their prefix-cache share.

import { AuthError, getJSON, postJSON, sseEvents } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import { PROTOCOLS } from "./protocols.js";

const $ = (id) => document.getElementById(id);
// A streamed reply is repainted at most this often. A timer rather than an animation frame:
// a browser that produces no frames for a while (a busy machine, an occluded window) still
// keeps the reply's text current, and a burst of events is one repaint either way.
const PAINT_INTERVAL_MS = 30;

/** What one reply measured, shown under it and kept in data attributes for tests. */
class ReplyStats {
  constructor() {
    this.startedAt = performance.now();
    this.firstTokenAt = null;
    this.endedAt = null;
    this.chunks = 0;
    this.usage = {};
    this.finish = null;
  }

  onText() {
    this.chunks += 1;
    if (this.firstTokenAt === null) this.firstTokenAt = performance.now();
  }

  /** Tokens after the first over the time they took: the decode rate. */
  tokensPerSecond() {
    const tokens = this.usage.completion ?? this.chunks;
    const seconds = ((this.endedAt ?? performance.now()) - this.firstTokenAt) / 1000;
    return this.firstTokenAt === null || tokens < 2 || seconds <= 0 ? null : (tokens - 1) / seconds;
  }

  render(node, state) {
    const parts = [];
    const ttftMs = this.firstTokenAt === null ? null : this.firstTokenAt - this.startedAt;
    const rate = this.tokensPerSecond();
    const exact = this.usage.completion !== undefined;
    if (ttftMs !== null) parts.push(`TTFT ${Math.round(ttftMs)} ms`);
    if (rate !== null) parts.push(`${rate.toFixed(1)} tok/s`);
    if (this.usage.prompt !== undefined) {
      const cached = this.usage.cached;
      parts.push(`${this.usage.prompt} prompt tokens` + (cached !== undefined ? ` (${cached} cached)` : ""));
    }
    parts.push(`${exact ? "" : "≈"}${this.usage.completion ?? this.chunks} tokens`);
    if (this.finish) parts.push(`finish: ${this.finish}`);
    if (state !== "done") parts.push(state);
    node.textContent = parts.join(" · ");
    node.dataset.state = state;
    if (ttftMs !== null) node.dataset.ttftMs = String(Math.round(ttftMs));
    if (rate !== null) node.dataset.tokensPerSecond = rate.toFixed(2);
    if (this.usage.prompt !== undefined) node.dataset.promptTokens = String(this.usage.prompt);
    if (this.usage.cached !== undefined) node.dataset.cachedTokens = String(this.usage.cached);
  }
}

export class Playground {
  constructor({ onAuthRequired }) {
    this.onAuthRequired = onAuthRequired;
    this.history = []; // {role, content} turns sent with the next request
    this.controller = null;
    $("composer").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    $("prompt").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    $("stop-button").addEventListener("click", () => this.stop());
    $("clear").addEventListener("click", () => this.clear());
    $("protocol").addEventListener("change", () => this.showProtocolNote());
    this.showProtocolNote();
  }

  showProtocolNote() {
    $("protocol-note").textContent = PROTOCOLS[$("protocol").value].note;
  }

  /** Fill the model list from /v1/models (which needs the key when one is set); under
   * `astrai serve` each shows whether it runs (a model not loaded loads on its first turn). */
  async loadModels() {
    const select = $("model");
    try {
      const { data } = await getJSON("v1/models");
      const chosen = select.value;
      select.replaceChildren(
        ...data.map((model) => {
          const option = document.createElement("option");
          option.value = model.id;
          const state = model.status?.value;
          option.textContent = state && state !== "loaded" ? `${model.id} (${state})` : model.id;
          return option;
        }),
      );
      if (data.some((model) => model.id === chosen)) select.value = chosen;
    } catch (error) {
      if (error instanceof AuthError) this.onAuthRequired(error.message);
    }
  }

  settings() {
    return {
      temperature: $("temperature").value,
      topP: $("top-p").value,
      maxTokens: $("max-tokens").value,
      seed: $("seed").value,
      stop: $("stop").value.split("\n").filter((line) => line !== ""),
      ignoreEos: $("ignore-eos").checked,
    };
  }

  addMessage(role) {
    const node = document.createElement("div");
    node.className = `message ${role}`;
    const body = document.createElement("div");
    body.className = "body";
    node.append(body);
    $("messages").append(node);
    return node;
  }

  scrollToEnd() {
    const list = $("messages");
    list.scrollTop = list.scrollHeight;
  }

  async send() {
    const text = $("prompt").value;
    if (!text.trim() || this.controller) return;
    $("prompt").value = "";
    const userNode = this.addMessage("user");
    userNode.querySelector(".body").textContent = text;
    this.history.push({ role: "user", content: text });
    const replyNode = this.addMessage("assistant");
    const replyBody = replyNode.querySelector(".body");
    const statsNode = document.createElement("div");
    statsNode.className = "reply-stats";
    replyNode.append(statsNode);
    this.scrollToEnd();

    const protocol = PROTOCOLS[$("protocol").value];
    const body = protocol.body({
      model: $("model").value,
      system: $("system").value.trim(),
      messages: this.history,
      settings: this.settings(),
    });
    this.controller = new AbortController();
    this.setBusy(true);
    const stats = new ReplyStats();
    let reply = "";
    let state = "streaming";
    let pending = false;
    const paint = () => {
      pending = false;
      replyBody.replaceChildren(renderMarkdown(reply));
      stats.render(statsNode, state);
      this.scrollToEnd();
    };
    try {
      const response = await postJSON(protocol.path, body, $("protocol").value, this.controller.signal);
      for await (const event of sseEvents(response)) {
        const update = protocol.update(event);
        if (update.error) throw new Error(update.error);
        if (update.text) {
          stats.onText();
          reply += update.text;
        }
        if (update.usage) stats.usage = { ...stats.usage, ...definedOnly(update.usage) };
        if (update.finish) stats.finish = update.finish;
        if (update.done) break;
        if (!pending) {
          pending = true;
          setTimeout(paint, PAINT_INTERVAL_MS);
        }
      }
      state = "done";
    } catch (error) {
      if (error.name === "AbortError") {
        state = "stopped";
      } else {
        state = "failed";
        replyNode.classList.add("error");
        const note = document.createElement("div");
        note.className = "error-text";
        note.textContent = error.message;
        replyNode.insertBefore(note, statsNode);
        if (error instanceof AuthError) this.onAuthRequired(error.message);
      }
    } finally {
      stats.endedAt = performance.now();
      this.controller = null;
      this.setBusy(false);
    }
    if (reply) {
      this.history.push({ role: "assistant", content: reply }); // a stopped reply as far as it got
    } else {
      this.history.pop(); // no answer: the next message takes this turn's place
    }
    paint();
  }

  stop() {
    if (this.controller) this.controller.abort();
  }

  clear() {
    this.stop();
    this.history = [];
    $("messages").replaceChildren();
  }

  setBusy(busy) {
    $("send").disabled = busy;
    $("stop-button").disabled = !busy;
  }
}

function definedOnly(object) {
  return Object.fromEntries(Object.entries(object).filter(([, v]) => v !== undefined));
}

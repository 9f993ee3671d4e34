// The gateway's HTTP API as the console uses it: the API key, JSON and text GETs, SSE events.
// Paths are relative, so the console also works behind a proxy that mounts it under a prefix.

const KEY_ITEM = "astrai.apiKey";

/** A 401: the gateway runs with --api-key and the key is missing or wrong. */
export class AuthError extends Error {}

/** Any other refusal, with the message of the protocol's error body when there is one. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

/** The key in each protocol's own header: Bearer for OpenAI, x-api-key for Anthropic. */
export function authHeaders(protocol) {
  const key = apiKey();
  if (!key) return {};
  return protocol === "anthropic" ? { "x-api-key": key } : { Authorization: `Bearer ${key}` };
}

/** Throw AuthError or ApiError for a response that is not 2xx. */
export async function checkResponse(response) {
  if (response.ok) return response;
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch {
    // not JSON: keep the status line
  }
  if (response.status === 401) throw new AuthError(message);
  throw new ApiError(response.status, message);
}

export async function getJSON(path, protocol = "openai") {
  const response = await fetch(path, { headers: authHeaders(protocol), cache: "no-store" });
  return (await checkResponse(response)).json();
}

export async function getText(path) {
  const response = await fetch(path, { cache: "no-store" });
  return (await checkResponse(response)).text();
}

/** POST a JSON body; the response is checked, its body left to read (a stream). */
export async function postJSON(path, body, protocol, signal) {
  const headers = { "content-type": "application/json", ...authHeaders(protocol) };
  if (protocol === "anthropic") headers["anthropic-version"] = "2023-06-01";
  const response = await fetch(path, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    signal,
  });
  return checkResponse(response);
}

/** Each server-sent event of a streamed response as {event, data}, data the joined lines. */
export async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = parseEvent(block);
        if (event) yield event;
      }
    }
  } finally {
    // Closes the connection when the reader stops early; a no-op on an ended stream.
    await reader.cancel().catch(() => {});
  }
}

function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    const text = line.endsWith("\r") ? line.slice(0, -1) : line;
    if (text.startsWith("event:")) event = text.slice(6).trim();
    else if (text.startsWith("data:")) data.push(text.slice(5).replace(/^ /, ""));
  }
  return data.length ? { event, data: data.join("\n") } : null;
}

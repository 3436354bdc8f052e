// The API client: the token, JSON requests, and turns streamed as
// server-sent events over fetch (the browser's event-source API cannot
// send a header).
//
// The token lives in sessionStorage (this tab, until it closes) and goes
// only into the Authorization header: never a URL, never persistent
// storage, never the console log.

const KEY = "agentry.token";

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

// ApiError is an {"error":{code,message}} answer, or a failure to reach
// the host.
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(extra) {
  const h = new Headers(extra);
  const t = token.get();
  if (t) h.set("Authorization", "Bearer " + t);
  return h;
}

async function failure(res) {
  let code = "http_" + res.status, message = res.statusText || "the host answered " + res.status;
  try {
    const body = await res.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(res.status, code, message);
}

async function send(method, path, body, accept) {
  const init = { method, headers: headers({ Accept: accept }), cache: "no-store", credentials: "omit", redirect: "error" };
  if (body !== undefined) {
    init.headers.set("Content-Type", "application/json");
    init.body = JSON.stringify(body);
  }
  try {
    return await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, "unreachable", "the host cannot be reached: " + e.message);
  }
}

// api sends one JSON request and returns the parsed answer (null for 204).
export async function api(method, path, body) {
  const res = await send(method, path, body, "application/json");
  if (!res.ok) throw await failure(res);
  if (res.status === 204) return null;
  return res.json();
}

// SSEParser reads a text/event-stream incrementally: feed it text as it
// arrives, and it calls onEvent({id, event, data}) for each complete event.
// Comments (keep-alives) are skipped.
export class SSEParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buf = "";
    this.reset();
  }
  reset() {
    this.id = "";
    this.event = "";
    this.data = [];
  }
  feed(text) {
    this.buf += text;
    let nl;
    while ((nl = this.buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buf.slice(0, nl);
      const skip = this.buf.startsWith("\r\n", nl) ? 2 : 1;
      this.buf = this.buf.slice(nl + skip);
      this.line(line);
    }
  }
  line(line) {
    if (line === "") {
      if (this.data.length || this.event) {
        this.onEvent({ id: this.id, event: this.event || "message", data: this.data.join("\n") });
      }
      this.reset();
      return;
    }
    if (line.startsWith(":")) return;
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? "" : line.slice(i + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id") this.id = value;
  }
}

// stream posts body to path asking for an event stream, calls onEvent with
// each agentry event as it arrives, and returns the turn's result (the
// JSON the plain request would have answered). An error before the stream
// began, or a result carrying one, is thrown as an ApiError.
export async function stream(path, body, onEvent) {
  const res = await send("POST", path, body, "text/event-stream");
  if (!res.ok) throw await failure(res);
  const type = res.headers.get("Content-Type") || "";
  if (!type.startsWith("text/event-stream")) {
    // A host that answered in JSON after all: that is the result.
    return res.json();
  }
  let result = null;
  const parser = new SSEParser((ev) => {
    let data;
    try {
      data = JSON.parse(ev.data);
    } catch {
      return;
    }
    if (ev.event === "result") result = data;
    else onEvent(ev.event, data);
  });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parser.feed(value);
  }
  parser.feed("\n\n");
  if (!result) throw new ApiError(0, "stream_ended", "the stream ended before the turn's result; reload the conversation to see where it stands");
  if (result.error) throw new ApiError(0, result.error.code, result.error.message);
  return result;
}

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

// ---- signing in at an OpenID provider ----
//
// The authorization code flow with PKCE, as a public client: no secret
// in the page. The verifier and state live in sessionStorage only while
// the person is away at the provider; the code comes back in the address
// and is taken out of it at once; the access token is fetched from the
// provider's token endpoint (the only other place the page's policy lets
// it connect to) and kept like a pasted token.

const FLOW = "agentry.signin";

// signInConfig is how this host's console signs people in at an OpenID
// provider, or null when it takes pasted tokens only.
export async function signInConfig() {
  try {
    const res = await fetch("/console/sign-in.json", { cache: "no-store", credentials: "omit", redirect: "error" });
    if (!res.ok) return null;
    const body = await res.json();
    return body && body.oidc ? body.oidc : null;
  } catch {
    return null;
  }
}

function b64url(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

// redirectURI is where the provider sends the person back: the console.
export const redirectURI = () => location.origin + "/";

// beginSignIn sends the person to the provider; keep (the conversation
// shown, an unsent message) is handed back by finishSignIn.
export async function beginSignIn(cfg, keep) {
  if (!window.isSecureContext || !crypto.subtle) {
    throw new ApiError(0, "insecure_context", "Signing in needs https (or a loopback address): without it the browser offers no SHA-256 for PKCE.");
  }
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  sessionStorage.setItem(FLOW, JSON.stringify({ verifier, state, keep: keep || {} }));
  const u = new URL(cfg.authorizationEndpoint);
  const q = u.searchParams;
  q.set("response_type", "code");
  q.set("client_id", cfg.clientId);
  q.set("redirect_uri", redirectURI());
  q.set("scope", (cfg.scopes || ["openid"]).join(" "));
  q.set("audience", cfg.audience);
  q.set("state", state);
  q.set("code_challenge", b64url(new Uint8Array(digest)));
  q.set("code_challenge_method", "S256");
  location.assign(u.toString());
}

// finishSignIn completes a sign-in the provider sent the person back
// from: null when the address holds no answer of the provider's; else
// {token, keep}. The answer leaves the address before anything else.
export async function finishSignIn(cfg) {
  const q = new URLSearchParams(location.search);
  if (!q.has("code") && !q.has("error")) return null;
  history.replaceState(null, "", location.pathname);
  const flow = JSON.parse(sessionStorage.getItem(FLOW) || "null");
  sessionStorage.removeItem(FLOW);
  if (!flow || !cfg || q.get("state") !== flow.state) {
    throw new ApiError(0, "sign_in_state", "This sign-in was not started here (or was started twice); sign in again.");
  }
  if (q.has("error")) {
    throw new ApiError(0, q.get("error"), "The identity provider did not sign you in: " + (q.get("error_description") || q.get("error")));
  }
  if (q.has("iss") && q.get("iss") !== cfg.issuer) {
    throw new ApiError(0, "sign_in_issuer", "The answer came from another identity provider than this host trusts; sign in again.");
  }
  const body = new URLSearchParams({
    grant_type: "authorization_code", code: q.get("code"), redirect_uri: redirectURI(),
    client_id: cfg.clientId, code_verifier: flow.verifier,
  });
  let res;
  try {
    res = await fetch(cfg.tokenEndpoint, { method: "POST", body, cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer" });
  } catch (e) {
    throw new ApiError(0, "unreachable", "The identity provider's token endpoint cannot be reached: " + e.message);
  }
  let out = {};
  try {
    out = await res.json();
  } catch {
    // not JSON: said below
  }
  if (!res.ok || typeof out.access_token !== "string") {
    throw new ApiError(res.status, out.error || "sign_in_failed", "The identity provider did not give a token: " + (out.error_description || out.error || res.status));
  }
  return { token: out.access_token, keep: flow.keep };
}

// ---- the person's feed ----

// follow keeps GET /v1/events open: it calls onEvent(name, data) for each
// event, and onState(state, detail) as the connection changes: "live"
// (the stream is open), "retrying" (it ended; a new one is tried after
// detail ms), "unreachable" (the host did not answer; retried likewise),
// "refused" (an ApiError in detail: the token is refused, or the bound
// of streams is reached; not retried before retry() is called). A
// reconnect sends Last-Event-ID, so the host sends what was missed (or a
// reset when it no longer can). It returns {stop, retry}: stop ends it
// for good; retry reconnects now.
export function follow(onEvent, onState) {
  let last = "";
  let stopped = false;
  let ctl = null;
  let wait = 0;
  let timer = null;
  let wake = null;
  const pause = (ms) => new Promise((resolve) => {
    wake = resolve;
    timer = setTimeout(resolve, ms);
  });
  const loop = async () => {
    while (!stopped) {
      ctl = new AbortController();
      let res;
      try {
        const h = headers({ Accept: "text/event-stream" });
        if (last) h.set("Last-Event-ID", last);
        res = await fetch("/v1/events", { headers: h, cache: "no-store", credentials: "omit", redirect: "error", signal: ctl.signal });
      } catch (e) {
        if (stopped) return;
        wait = Math.min(wait ? wait * 2 : 1000, 15000);
        onState("unreachable", wait);
        await pause(wait);
        continue;
      }
      if (!res.ok) {
        const err = await failure(res);
        if (res.status === 429 || res.status === 401 || res.status === 400) {
          if (res.status === 400) last = ""; // an id the host does not take: start afresh
          onState("refused", err);
          await pause(res.status === 429 ? 15000 : 2 ** 31 - 1);
        } else {
          wait = Math.min(wait ? wait * 2 : 1000, 15000);
          onState("unreachable", wait);
          await pause(wait);
        }
        continue;
      }
      const parser = new SSEParser((ev) => {
        if (ev.id) last = ev.id;
        let data = null;
        try {
          data = JSON.parse(ev.data);
        } catch {
          return;
        }
        if (ev.event === "ready" || ev.event === "reset") {
          wait = 0;
          onState("live");
        }
        onEvent(ev.event, data);
      });
      try {
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          parser.feed(value);
        }
      } catch {
        // the connection broke: reconnect below
      }
      if (stopped) return;
      wait = Math.min(wait ? wait * 2 : 500, 15000);
      onState("retrying", wait);
      await pause(wait);
    }
  };
  loop();
  return {
    stop() {
      stopped = true;
      if (ctl) ctl.abort();
      clearTimeout(timer);
      if (wake) wake();
    },
    retry() {
      wait = 0;
      clearTimeout(timer);
      if (wake) wake();
    },
  };
}

// ---- workspaces: tar streams in and out ----

// raw sends one request with the token and returns the Response as it
// came (ok or not; a failure is thrown as an ApiError).
export async function raw(method, path, body, type) {
  const init = { method, headers: headers({}), cache: "no-store", credentials: "omit", redirect: "error" };
  if (body !== undefined) {
    init.headers.set("Content-Type", type);
    init.body = body;
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, "unreachable", "the host cannot be reached: " + e.message);
  }
  if (!res.ok) throw await failure(res);
  return res;
}

const enc = new TextEncoder();

function field(h, off, len, text) {
  const b = enc.encode(text);
  h.set(b.subarray(0, len), off);
}

// tarOf packs files ([{name, bytes}]) as a ustar archive. A name past the
// format's 100 bytes is refused (say so: the person can zip it instead).
export function tarOf(files) {
  const parts = [];
  for (const f of files) {
    const name = enc.encode(f.name);
    if (name.length > 100) throw new ApiError(0, "name_too_long", "The name " + f.name + " is longer than 100 bytes; upload it from a shorter name.");
    const h = new Uint8Array(512);
    h.set(name, 0);
    field(h, 100, 8, "0000644\0");
    field(h, 108, 8, "0000000\0");
    field(h, 116, 8, "0000000\0");
    field(h, 124, 12, f.bytes.length.toString(8).padStart(11, "0") + "\0");
    field(h, 136, 12, Math.floor(Date.now() / 1000).toString(8).padStart(11, "0") + "\0");
    field(h, 148, 8, "        ");
    field(h, 156, 1, "0");
    field(h, 257, 8, "ustar\x0000");
    let sum = 0;
    for (const b of h) sum += b;
    field(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
    parts.push(h, f.bytes, new Uint8Array((512 - (f.bytes.length % 512)) % 512));
  }
  parts.push(new Uint8Array(1024));
  return new Blob(parts, { type: "application/x-tar" });
}

const dec = new TextDecoder();
const cstr = (b) => dec.decode(b.subarray(0, b.indexOf(0) < 0 ? b.length : b.indexOf(0)));

// listTar reads a tar stream's headers as they arrive, skipping the
// files' bytes, and returns up to max entries [{name, size, type}] and
// whether there were more. PAX and GNU long names are read.
export async function listTar(res, max) {
  const reader = res.body.getReader();
  let buf = new Uint8Array(0);
  let skip = 0;
  let longName = null;
  const out = [];
  let want = 512, meta = null; // meta: a PAX or long-name body being read
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    let chunk = value;
    if (skip) {
      const n = Math.min(skip, chunk.length);
      skip -= n;
      chunk = chunk.subarray(n);
    }
    const joined = new Uint8Array(buf.length + chunk.length);
    joined.set(buf);
    joined.set(chunk, buf.length);
    buf = joined;
    while (buf.length >= want && !skip) {
      const block = buf.subarray(0, want);
      buf = buf.subarray(want);
      if (meta) {
        const body = block.subarray(0, meta.size);
        if (meta.type === "L") longName = cstr(body);
        else {
          const m = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(dec.decode(body));
          if (m) longName = m[1];
        }
        meta = null;
        want = 512;
        continue;
      }
      if (block.every((b) => b === 0)) {
        reader.cancel();
        return { entries: out, more: false };
      }
      const size = parseInt(cstr(block.subarray(124, 136)).trim() || "0", 8);
      const type = String.fromCharCode(block[156] || 48);
      const padded = Math.ceil(size / 512) * 512;
      if ((type === "x" || type === "L") && size <= 65536) {
        meta = { type, size };
        want = padded;
        continue;
      }
      const prefix = cstr(block.subarray(345, 500));
      const name = longName ?? (prefix ? prefix + "/" : "") + cstr(block.subarray(0, 100));
      longName = null;
      if (type !== "g" && type !== "x" && type !== "L") {
        if (out.length >= max) {
          reader.cancel();
          return { entries: out, more: true };
        }
        out.push({ name, size, type: type === "5" ? "dir" : type === "2" ? "link" : "file" });
      }
      const n = Math.min(padded, buf.length);
      buf = buf.subarray(n);
      skip = padded - n;
    }
  }
  return { entries: out, more: false };
}

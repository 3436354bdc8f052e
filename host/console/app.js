// The agentry console: sign in, the caller's conversations, one
// conversation's transcript, its current turn streaming, approvals, tool
// sessions, the turn log and a run's timeline. Everything shown comes from
// the /v1 API with the caller's token; the page is built with textContent
// only (the policy refuses HTML from strings).

import { api, stream, token, ApiError, signInConfig, beginSignIn, finishSignIn } from "./api.js";

const $ = (id) => document.getElementById(id);

// el builds an element: el("li", {class: "x", "aria-label": "y"}, "text", child).
function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") n.className = v;
    else if (k === "text") n.textContent = v;
    else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    n.append(c instanceof Node ? c : String(c));
  }
  return n;
}

// focusAfter moves focus to n when an action the person started ends,
// unless they have put it somewhere since: focus the page took away
// (a control disabled or hidden while the action ran, or nothing) is given
// back, focus the person moved stays where they moved it. (A late focus
// call used to pull the caret out of a field being typed in.)
let focusFrom = null; // what had focus when the running action began
function focusAfter(n) {
  const a = document.activeElement;
  if (!a || a === document.body || a === focusFrom || a.disabled || a.closest("[hidden]")) n.focus();
}

const short = (id) => (id ? id.replace(/^(ses_|run-?)/, "").slice(0, 8) : "");
const clock = (t) => new Date(t).toLocaleString([], { dateStyle: "short", timeStyle: "medium" });

function ms(v) {
  if (v === undefined || v === null || isNaN(v)) return "";
  if (v === 0) return "0 ms";
  if (v < 1) return v.toFixed(2) + " ms";
  if (v < 1000) return Math.round(v) + " ms";
  const s = v / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  const m = s / 60;
  if (m < 60) return Math.floor(m) + " min " + Math.round(s % 60) + " s";
  return Math.floor(m / 60) + " h " + Math.round(m % 60) + " min";
}

const state = {
  me: null,
  convs: [],
  current: null, // the open conversation's id
  session: null, // its GET /v1/sessions/{id}
  busy: false, // a turn or decision in flight
  interaction: null, // the session interaction shown, if any
  signIn: null, // how to sign in at the OpenID provider, when the host offers it
};

// ---- sign in ----

// showSignedOut shows the sign-in card. The conversation in the address
// and an unsent message stay, for after the next sign-in.
function showSignedOut(message) {
  token.clear();
  state.me = null;
  state.current = null;
  $("app").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("token").value = "";
  (state.signIn ? $("oidc-signin") : $("token")).focus();
}

async function signIn(t) {
  token.set(t);
  try {
    state.me = await api("GET", "/v1/me");
  } catch (e) {
    showSignedOut(e.status === 401 ? "The host did not accept this token: " + e.message : e.message);
    return;
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  $("who").textContent = "Signed in as " + state.me.principal + " (tenant " + state.me.tenant + (state.me.role === "admin" ? ", admin" : "") + ")";
  await loadConvs();
  const id = location.hash.slice(1);
  if (/^ses_[0-9a-f]{32}$/.test(id)) await openConv(id);
}

// signInAtProvider sends the person to the identity provider, keeping the
// conversation shown and an unsent message for their return.
async function signInAtProvider() {
  try {
    await beginSignIn(state.signIn, { hash: location.hash, draft: $("message").value });
  } catch (e) {
    $("signin-error").textContent = e.message;
  }
}

// fail shows an error where the person is looking; a refused token signs
// out (an expired one says so: nothing shown is lost by signing in again).
function fail(e, where) {
  if (e instanceof ApiError && e.status === 401) {
    showSignedOut(e.code === "token_expired"
      ? "Your sign-in has expired. Sign in again: this conversation and any message you had not sent are kept."
      : "The host no longer accepts this token; sign in again.");
    return;
  }
  (where || $("conv-error")).textContent = e.message;
}

// ---- conversations ----

async function loadConvs() {
  try {
    const res = await api("GET", "/v1/sessions");
    state.convs = res.sessions || [];
  } catch (e) {
    fail(e);
    return;
  }
  renderConvs();
}

function renderConvs() {
  const list = $("conv-list");
  list.replaceChildren();
  $("convs-empty").hidden = state.convs.length > 0;
  for (const c of state.convs) {
    const current = c.sessionId === state.current;
    list.append(el("li", {},
      el("button", {
        type: "button", class: "conv-item", "data-id": c.sessionId,
        "aria-current": current ? "true" : undefined,
        "aria-label": "Conversation " + short(c.sessionId) + ", " + c.state + ", " + c.turns + " turns, updated " + clock(c.updatedAt),
        onclick: () => openConv(c.sessionId),
      },
      el("span", { class: "conv-id" }, short(c.sessionId)),
      el("span", { class: "badge " + c.state }, c.state),
      el("span", { class: "conv-meta" }, c.turns + (c.turns === 1 ? " turn · " : " turns · ") + clock(c.updatedAt)))));
  }
}

async function newConv() {
  try {
    const c = await api("POST", "/v1/sessions", {});
    await loadConvs();
    await openConv(c.sessionId);
    $("message").focus();
  } catch (e) {
    fail(e, $("conv-error"));
  }
}

async function openConv(id) {
  state.current = id;
  if (location.hash !== "#" + id) history.replaceState(null, "", "#" + id);
  $("conv-none").hidden = true;
  $("conv-body").hidden = false;
  $("conv-error").textContent = "";
  $("live").hidden = true;
  $("conv-h").textContent = "Conversation " + short(id);
  $("waterfall").replaceChildren();
  $("marks").replaceChildren();
  $("timeline-title").textContent = "Choose a run in the turn log.";
  renderConvs();
  await refreshConv();
  $("conv-h").focus();
}

// refreshConv reloads everything the conversation view shows.
async function refreshConv() {
  const id = state.current;
  if (!id) return;
  let s, msgs, turns, tools;
  try {
    [s, msgs, turns, tools] = await Promise.all([
      api("GET", "/v1/sessions/" + id),
      api("GET", "/v1/sessions/" + id + "/messages"),
      api("GET", "/v1/sessions/" + id + "/turns"),
      api("GET", "/v1/sessions/" + id + "/tool-sessions"),
    ]);
  } catch (e) {
    if (e.status === 404) {
      state.current = null;
      history.replaceState(null, "", location.pathname);
      $("conv-body").hidden = true;
      $("conv-none").hidden = false;
      $("conv-none").textContent = "No such conversation.";
      return;
    }
    fail(e);
    return;
  }
  if (id !== state.current) return; // another was opened meanwhile
  state.session = s;
  renderSession(s);
  renderTranscript(msgs.messages || []);
  renderTurns(turns.turns || []);
  renderTools(tools);
}

function renderSession(s) {
  const badge = $("conv-state");
  badge.textContent = s.state;
  badge.className = "badge " + s.state;
  const closed = s.state === "closed";
  $("close-conv").hidden = closed;
  $("composer").hidden = closed;
  const paused = s.state === "paused";
  $("message").disabled = paused || state.busy;
  $("send").disabled = paused || state.busy;
  // Stop cancels the turn that runs (this tab's) or waits for a decision.
  $("stop").hidden = !(state.busy || paused);
  $("stop").disabled = false;
  renderApproval(s);
  const c = state.convs.find((x) => x.sessionId === s.sessionId);
  if (c && (c.state !== s.state || c.turns !== s.turns)) {
    Object.assign(c, { state: s.state, turns: s.turns, updatedAt: s.updatedAt });
    renderConvs();
  }
}

// renderApproval shows a pending check-in (Approve / Decline with a
// note, answered by resuming the turn), or else a session interaction the
// agent raised outside a turn's requests (a question: answered with one
// of its options, or with the note as the answer; Decline declines it).
// Both go to the decision endpoint.
function renderApproval(s) {
  const box = $("approval");
  const detail = $("interaction-detail");
  detail.replaceChildren();
  const it = !s.pending && s.interaction && typeof s.interaction === "object" ? s.interaction : null;
  state.interaction = it;
  if (!s.pending && !it) {
    box.hidden = true;
    return;
  }
  const wasHidden = box.hidden;
  box.hidden = false;
  if (s.pending) {
    $("approval-h").textContent = "Waiting for your decision";
    $("approval-q").textContent = (s.pending.question || "May this call go ahead?") + (s.pending.tool ? " (tool " + s.pending.tool + ")" : "");
    $("approval-note-label").textContent = "Note for the agent (optional)";
    $("approve").textContent = "Approve";
    detail.hidden = true;
  } else {
    $("approval-h").textContent = "The agent asks";
    $("approval-q").textContent = String(it.message || "The agent is waiting for you.");
    $("approval-note-label").textContent = "Your answer";
    $("approve").textContent = "Answer";
    const opts = Array.isArray(it.options) ? it.options : [];
    detail.hidden = opts.length === 0;
    if (opts.length) {
      const row = el("div", { class: "row", role: "group", "aria-label": "Answers the agent offers" });
      for (const o of opts) {
        const b = el("button", { type: "button", class: "option" }, String(o));
        b.addEventListener("click", () => answerInteraction(String(o)));
        row.append(b);
      }
      detail.append(row);
    }
  }
  $("approve").disabled = state.busy;
  $("decline").disabled = state.busy && !it;
  if (wasHidden) focusAfter($("approval-h"));
}

// answerInteraction answers the interaction shown (null declines it).
async function answerInteraction(answer) {
  const it = state.interaction;
  if (!it) return;
  const body = answer === null ? { interaction: it.id, approve: false } : { interaction: it.id, answer };
  try {
    await api("POST", "/v1/sessions/" + state.current + "/decision", body);
  } catch (e) {
    fail(e);
    return;
  }
  $("approval-note").value = "";
  await refreshConv();
}

// ---- transcript ----

function renderTranscript(msgs) {
  const ol = $("transcript");
  ol.replaceChildren();
  // Group: a person's message, then what the agent did until the next one.
  let group = null;
  const flush = () => {
    if (!group) return;
    const calls = group.steps;
    const answer = group.answer;
    const item = el("li", { class: "msg assistant", "aria-label": "Answer" },
      el("p", { class: "role" }, "agent"),
      answer !== null ? el("pre", { class: "answer" }, answer) : el("p", { class: "help" }, "No answer yet."));
    if (calls.length) {
      const d = el("details", { class: "calls" },
        el("summary", {}, calls.length + (calls.length === 1 ? " step" : " steps")));
      for (const c of calls) {
        if (c.activity) {
          d.append(el("div", { class: "call activity" }, el("p", { class: "call-head" }, c.call.name)));
          continue;
        }
        d.append(el("div", { class: "call" + (c.result && c.result.isError ? " is-error" : "") },
          el("p", { class: "call-head" }, c.call.name + " ", el("code", {}, c.call.id)),
          el("pre", { class: "args" }, argsText(c.call)),
          c.result ? el("pre", { class: "result" }, c.result.content || "(no output)") : el("p", { class: "help" }, "No result recorded.")));
      }
      item.append(d);
    }
    ol.append(item);
    group = null;
  };
  for (const m of msgs) {
    if (m.role === "user") {
      flush();
      ol.append(el("li", { class: "msg user", "aria-label": "Your message" }, el("p", { class: "role" }, "you"), el("pre", {}, m.content || "")));
      group = { steps: [], answer: null };
      continue;
    }
    if (!group) group = { steps: [], answer: null };
    if (m.role === "activity") {
      // What the agent did, as any provider says it ("calling run_code").
      group.steps.push({ call: { id: "", name: m.content || "activity" }, result: null, activity: true });
      continue;
    }
    if (m.role === "assistant") {
      for (const c of m.toolCalls || []) group.steps.push({ call: c, result: null });
      if (m.content) group.answer = m.content;
    } else if (m.role === "tool") {
      const step = group.steps.find((s) => s.call.id === m.toolCallId && !s.result);
      if (step) step.result = m;
      else group.steps.push({ call: { id: m.toolCallId || "", name: m.toolName || "tool" }, result: m });
    }
  }
  flush();
}

function argsText(call) {
  const a = call.args;
  if (a === undefined || a === null) return "";
  if (a && typeof a === "object" && typeof a.code === "string" && Object.keys(a).length === 1) return a.code;
  return JSON.stringify(a, null, 2);
}

// ---- the current turn ----

function liveEvent(type, e) {
  const p = e.payload || {};
  const short = type.replace(/^agentry\./, "");
  let text = null;
  switch (type) {
    case "agentry.agent.turn_start": text = p.resumed ? "the turn resumes" : "the turn starts"; break;
    case "agentry.agent.turn_end": text = "the turn ends: " + p.outcome + " (" + ms(p.durationMs) + ")"; break;
    case "agentry.llm.start": text = "model call " + (p.iteration ?? "") + " starts"; break;
    case "agentry.llm.end": text = "model call " + (p.iteration ?? "") + " ends: " + (p.error ? "error" : p.stopReason || "done") + " (" + ms(p.durationMs) + ")"; break;
    case "agentry.llm.delta": $("live-text").textContent += p.text || ""; return;
    case "agentry.llm.message": $("live-text").textContent = p.content || ""; return;
    case "agentry.tool.start": text = "tool " + p.tool + " runs"; break;
    case "agentry.tool.end": text = "tool " + p.tool + (p.isError ? " failed: " + (p.errorClass || "error") : " done") + " (" + ms(p.durationMs) + ")"; break;
    case "agentry.tools.session_started": text = "tool session " + p.keyHash + " opened on " + (p.runnerId || p.tool); break;
    case "agentry.tools.session_reused": text = "tool session " + p.keyHash + " reused (call " + p.calls + ")"; break;
    case "agentry.tools.session_closed": text = "tool session " + p.keyHash + " closed (" + p.reason + ")"; break;
    case "agentry.tools.code_run": text = "code ran on " + p.runnerId + ": " + (p.ok ? "ok" : "failed") + " (" + ms(p.durationMs) + ")"; break;
    case "agentry.pause.request": text = "waiting for a person's decision on " + p.tool; break;
    case "agentry.pause.resume": text = "a person " + (p.approved ? "approved" : "declined") + " " + p.tool; break;
    default: text = short;
  }
  $("live-events").append(el("li", { "data-type": type }, text));
}

async function runTurn(path, body) {
  if (state.busy) return;
  state.busy = true;
  focusFrom = document.activeElement;
  const id = state.current;
  $("conv-error").textContent = "";
  $("live").hidden = false;
  $("live-text").textContent = "";
  $("live-message").textContent = body.message !== undefined ? "You: " + body.message :
    "Your decision: " + (body.approve ? "approve" : "decline") + (body.note ? " — " + body.note : "");
  $("live-events").replaceChildren();
  $("live").setAttribute("aria-busy", "true");
  for (const b of ["send", "approve", "decline", "close-conv"]) $(b).disabled = true;
  $("message").disabled = true;
  $("stop").hidden = false;
  $("stop").disabled = false;
  try {
    const res = await stream("/v1/sessions/" + id + path, body, liveEvent);
    if (res.awaiting) {
      $("live-text").textContent = "Waiting for your decision: " + res.awaiting.question;
    } else if (typeof res.output === "string") {
      $("live-text").textContent = res.output;
    }
  } catch (e) {
    // A message refused before it ran goes back where it was typed.
    if (e instanceof ApiError && e.status === 401 && body.message !== undefined && !$("message").value) $("message").value = body.message;
    if (e.code === "turn_cancelled") $("live-text").textContent = "Stopped: the turn was cancelled before it answered.";
    else fail(e);
  } finally {
    state.busy = false;
    $("live").removeAttribute("aria-busy");
    $("close-conv").disabled = false;
    $("approve").disabled = false;
    $("decline").disabled = false;
    $("send").disabled = false;
    $("message").disabled = false;
    if (state.me) {
      if (id === state.current) await refreshConv();
      await loadConvs();
    }
  }
}

async function sendMessage() {
  const text = $("message").value;
  if (!text.trim() || state.busy) return;
  $("message").value = "";
  await runTurn("/turns", { message: text });
  focusAfter(!$("approval").hidden ? $("approval-h") : $("message"));
  focusFrom = null;
}

async function decide(approve) {
  const note = $("approval-note").value.trim();
  if (state.interaction) {
    await answerInteraction(approve ? note : null);
    return;
  }
  const body = { approve };
  if (note) body.note = note;
  $("approval-note").value = "";
  await runTurn("/decision", body);
  if ($("approval").hidden) focusAfter($("message"));
  focusFrom = null;
}

// stopTurn cancels the conversation's turn. A running turn's stream then
// ends, cancelled (runTurn shows it); a paused one is given up at once.
async function stopTurn() {
  const id = state.current;
  $("stop").disabled = true;
  let res;
  try {
    res = await api("POST", "/v1/sessions/" + id + "/cancel");
  } catch (e) {
    $("stop").disabled = false;
    if (e.code === "no_turn") await refreshConv(); // it ended meanwhile
    else fail(e);
    return;
  }
  if (res && res.waiting && id === state.current) {
    $("live").hidden = false;
    $("live-message").textContent = "";
    $("live-text").textContent = "Stopped: the turn waiting for your decision was cancelled.";
    $("live-events").replaceChildren();
    await refreshConv();
    $("message").focus();
  }
}

async function closeConv() {
  const id = state.current;
  try {
    await api("DELETE", "/v1/sessions/" + id);
  } catch (e) {
    fail(e);
    return;
  }
  $("live").hidden = true;
  await refreshConv();
  await loadConvs();
}

// ---- tool sessions and the turn log ----

function renderTools(res) {
  const body = $("tool-sessions").tBodies[0];
  body.replaceChildren();
  const rows = [...(res.live || []), ...(res.closed || []).slice().reverse()];
  $("tools-empty").hidden = rows.length > 0;
  $("tool-sessions").hidden = rows.length === 0;
  for (const t of rows) {
    const st = t.live ? "live" : (t.failed ? "close failed" : "closed") + (t.reason ? " (" + t.reason + ")" : "");
    body.append(el("tr", { class: t.live ? "live" : "closed" },
      el("td", {}, el("span", { class: "tool-name" }, t.tool + (t.label ? " · " + t.label : "")), el("span", { class: "sub" }, t.runnerId || "")),
      el("td", {}, el("code", {}, t.keyHash)),
      el("td", {}, ms(t.heldMs)),
      el("td", {}, String(t.calls)),
      el("td", {}, el("span", { class: "badge " + (t.live ? "open" : "closed") }, st))));
  }
}

function renderTurns(turns) {
  const body = $("turns").tBodies[0];
  body.replaceChildren();
  for (const t of turns.slice().reverse()) {
    const took = new Date(t.ended) - new Date(t.started);
    const runCell = el("td", {});
    if (t.runId) {
      runCell.append(el("button", {
        type: "button", class: "quiet", "aria-label": "Show the timeline of run " + t.runId,
        onclick: () => showTimeline(t.runId),
      }, short(t.runId)));
    }
    body.append(el("tr", { title: t.error || "" },
      el("td", {}, String(t.seq)),
      el("td", {}, t.kind),
      el("td", {}, el("span", { class: "badge " + t.outcome }, t.outcome), t.error ? el("span", { class: "turn-error" }, " " + t.error) : null),
      el("td", {}, ms(took)),
      runCell));
  }
}

// ---- a run's timeline ----

async function showTimeline(runId) {
  let res;
  try {
    res = await api("GET", "/v1/sessions/" + state.current + "/timeline?run=" + encodeURIComponent(runId));
  } catch (e) {
    fail(e);
    return;
  }
  const wf = $("waterfall");
  const marks = $("marks");
  wf.replaceChildren();
  marks.replaceChildren();
  const tl = (res.runs || [])[0];
  if (!tl) {
    $("timeline-title").textContent = "Run " + short(runId) + ": no events recorded since the host started.";
    return;
  }
  $("timeline-title").textContent = "Run " + runId + (tl.outcome ? " · " + tl.outcome : "") + " · " + ms(tl.durationMs) +
    (tl.dropped ? " · " + tl.dropped + " events not kept" : "");
  const total = Math.max(tl.durationMs, 0.001);
  for (const s of tl.spans) {
    const bar = el("span", { class: "bar " + s.kind + (s.open ? " open" : "") });
    // CSSOM, not a style attribute: the policy allows no inline styles.
    bar.style.setProperty("--start", (100 * s.startMs / total).toFixed(3) + "%");
    bar.style.setProperty("--width", Math.max(0.4, 100 * s.durationMs / total).toFixed(3) + "%");
    const label = s.kind + " " + s.name + ": " + ms(s.durationMs) + (s.open ? " so far" : "") + ", from " + ms(s.startMs) + (s.status ? ", " + s.status : "");
    wf.append(el("li", { class: "span", "aria-label": label },
      el("span", { class: "span-name" }, el("span", { class: "kind" }, s.kind), " " + s.name),
      el("span", { class: "track", "aria-hidden": "true" }, bar),
      el("span", { class: "span-dur" }, ms(s.durationMs) + (s.status ? " · " + s.status : ""))));
  }
  for (const m of tl.marks) {
    marks.append(el("li", {}, ms(m.atMs) + " — " + m.kind.replace(/_/g, " ") + ": " + m.name));
  }
}

// ---- wiring ----

function wire() {
  $("signin-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    $("token").value = "";
    if (!t) {
      $("signin-error").textContent = "Paste a token first.";
      return;
    }
    signIn(t);
  });
  $("signout").addEventListener("click", () => {
    history.replaceState(null, "", location.pathname);
    $("message").value = "";
    showSignedOut("Signed out.");
  });
  $("oidc-signin").addEventListener("click", signInAtProvider);
  $("refresh").addEventListener("click", async () => {
    await loadConvs();
    await refreshConv();
  });
  $("new-conv").addEventListener("click", newConv);
  $("close-conv").addEventListener("click", closeConv);
  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sendMessage();
  });
  $("message").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      sendMessage();
    }
  });
  $("stop").addEventListener("click", stopTurn);
  $("approve").addEventListener("click", () => decide(true));
  $("decline").addEventListener("click", () => decide(false));
  window.addEventListener("hashchange", () => {
    const id = location.hash.slice(1);
    if (state.me && /^ses_[0-9a-f]{32}$/.test(id) && id !== state.current) openConv(id);
  });
}

// start offers the provider's sign-in when the host has one, completes a
// sign-in the provider sent the person back from, or signs in again with
// the token this tab holds.
async function start() {
  wire();
  state.signIn = await signInConfig();
  if (state.signIn) {
    $("oidc-box").hidden = false;
    $("oidc-signin").textContent = "Sign in with " + new URL(state.signIn.issuer).host;
  }
  let done;
  try {
    done = await finishSignIn(state.signIn);
  } catch (e) {
    showSignedOut(e.message);
    return;
  }
  if (done) {
    if (done.keep.hash) history.replaceState(null, "", location.pathname + done.keep.hash);
    if (done.keep.draft) $("message").value = done.keep.draft;
    await signIn(done.token);
    return;
  }
  const saved = token.get();
  if (saved) signIn(saved);
  else showSignedOut("");
}

start();

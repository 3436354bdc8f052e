// The agentry console: sign in, the caller's conversations, one
// conversation's transcript, its current turn streaming, approvals, tool
// sessions, the turn log and a run's timeline. Everything shown comes from
// the /v1 API with the caller's token; the page is built with textContent
// only (the policy refuses HTML from strings).

import { api, stream, follow, token, ApiError, signInConfig, beginSignIn, finishSignIn, raw, tarOf, listTar } from "./api.js";

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
  feed: null, // the open GET /v1/events (follow's handle)
  running: new Set(), // conversations the feed says run a turn now
};

// ---- sign in ----

// showSignedOut shows the sign-in card. The conversation in the address
// and an unsent message stay, for after the next sign-in.
function showSignedOut(message, keepField) {
  token.clear();
  if (state.feed) state.feed.stop();
  state.feed = null;
  $("banner").hidden = true;
  state.me = null;
  state.current = null;
  $("app").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("signin-progress").textContent = "";
  $("signin-button").disabled = false;
  if (!keepField) $("token").value = "";
  (state.signIn ? $("oidc-signin") : $("token")).focus();
}

async function signIn(t) {
  token.set(t);
  $("signin-progress").textContent = "Signing in…";
  $("signin-button").disabled = true;
  try {
    state.me = await api("GET", "/v1/me");
  } catch (e) {
    // The field keeps what was typed, to correct it.
    showSignedOut(e.status === 401 ? "The host did not accept this token: " + e.message : e.message, true);
    return;
  }
  $("token").value = "";
  $("signin-progress").textContent = "";
  $("signin-button").disabled = false;
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  $("who").textContent = "Signed in as " + state.me.principal + " (tenant " + state.me.tenant + (state.me.role === "admin" ? ", admin" : "") + ")";
  // The feed opens first; its first event (ready) loads the list, so
  // nothing that changes between the two is missed.
  await new Promise((resolve) => startFeed(resolve));
  await Promise.all([loadAgents(), loadRules()]);
  const id = location.hash.slice(1);
  if (/^ses_[0-9a-f]{32}$/.test(id)) await openConv(id);
}

// ---- the feed: what changes in any of the person's conversations ----

function startFeed(onFirst) {
  let first = onFirst;
  state.feed = follow(async (name, data) => {
    if (name === "ready" || name === "reset") {
      // A fresh start, or changes that could not be replayed: reload.
      if (name === "ready" && data.resumed && !first) return;
      await loadConvs();
      if (!first && state.current && !state.busy) await refreshConv();
      if (first) {
        first();
        first = null;
      }
      return;
    }
    if (name === "conversation") feedConversation(data);
    else if (name === "interactions") feedInteractions(data);
  }, feedState);
}

// feedState shows how the feed stands: an unreachable host is a banner
// with a retry, until the feed is back.
function feedState(st, detail) {
  const banner = $("banner");
  if (st === "live") {
    banner.hidden = true;
    $("feed-state").textContent = "Live: changes appear as they happen.";
    return;
  }
  if (st === "refused" && detail && detail.status === 401) {
    fail(detail);
    return;
  }
  const secs = typeof detail === "number" ? Math.round(detail / 1000) : 0;
  $("feed-state").textContent = "Not live: reconnecting.";
  if (st === "retrying") return; // the stream ended; it reconnects at once
  $("banner-text").textContent = st === "refused"
    ? "Live updates are off: " + detail.message
    : "The host cannot be reached. Trying again" + (secs ? " in " + secs + " s" : "") + "; what you see may be out of date.";
  banner.hidden = false;
}

function feedConversation(v) {
  if (v.running) state.running.add(v.sessionId);
  else state.running.delete(v.sessionId);
  const i = state.convs.findIndex((c) => c.sessionId === v.sessionId);
  if (i >= 0) state.convs[i] = v;
  else state.convs.unshift(v);
  renderConvs();
  if (v.sessionId === state.current && !state.busy) refreshConv();
}

function feedInteractions(d) {
  const c = state.convs.find((x) => x.sessionId === d.sessionId);
  if (c) {
    c.interactions = d.interactions;
    c.interaction = d.interactions[0];
    renderConvs();
  }
  if (d.sessionId === state.current && !state.busy) refreshConv();
}

// renderInbox lists everything waiting on the person, oldest first: each
// paused turn's approval and each question, with its conversation.
function renderInbox() {
  const items = [];
  for (const c of state.convs) {
    if (c.state === "paused" && c.pending) {
      items.push({ id: c.sessionId, since: c.updatedAt, what: c.pending.tool ? "Approve " + c.pending.tool + "?" : "A decision", detail: c.pending.question });
    }
    for (const q of c.interactions || []) items.push({ id: c.sessionId, since: q.since, what: "A question", detail: q.message });
  }
  items.sort((a, b) => new Date(a.since) - new Date(b.since));
  const list = $("inbox-list");
  list.replaceChildren();
  $("inbox-empty").hidden = items.length > 0;
  $("inbox-count").textContent = items.length ? "(" + items.length + ")" : "";
  for (const it of items) {
    list.append(el("li", {},
      el("button", {
        type: "button", class: "inbox-item", "data-id": it.id,
        onclick: () => openConv(it.id),
      },
      el("span", { class: "inbox-what" }, it.what),
      el("span", { class: "inbox-detail" }, it.detail || ""),
      el("span", { class: "conv-meta" }, "conversation " + short(it.id) + " · since " + clock(it.since)))));
  }
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
  if (e instanceof ApiError && e.code === "unreachable") feedState("unreachable");
  if (e instanceof ApiError && e.status === 401) {
    showSignedOut(e.code === "token_expired"
      ? "Your sign-in has expired. Sign in again: this conversation and any message you had not sent are kept."
      : "The host no longer accepts this token; sign in again.");
    return;
  }
  showError(where || "conv", e.message);
}

// showError puts a message in the error box of where ("conv", "composer"
// or "approval"); it stays until dismissed or the next attempt there.
function showError(where, message) {
  $(where + "-error").textContent = message;
  $(where + "-error-box").hidden = false;
}

function clearError(where) {
  $(where + "-error").textContent = "";
  $(where + "-error-box").hidden = true;
}

// ---- conversations ----

async function loadConvs() {
  loadUsageTotal();
  try {
    const res = await api("GET", "/v1/sessions");
    state.convs = res.sessions || [];
    $("banner").hidden = true;
  } catch (e) {
    fail(e);
    return;
  }
  renderConvs();
}

function renderConvs() {
  // The lists are rebuilt: focus on one of their buttons moves to the
  // same button rebuilt, so a keyboard user keeps their place.
  const a = document.activeElement;
  const had = a && a.dataset && a.dataset.id && a.closest("#conv-list, #inbox-list") ? [a.closest("ol, ul").id, a.dataset.id] : null;
  renderInbox();
  const list = $("conv-list");
  list.replaceChildren();
  $("convs-empty").hidden = state.convs.length > 0;
  for (const c of state.convs) {
    const current = c.sessionId === state.current;
    const st = state.running.has(c.sessionId) ? "running" : c.state;
    list.append(el("li", {},
      el("button", {
        type: "button", class: "conv-item", "data-id": c.sessionId, id: "conv-" + c.sessionId,
        "aria-current": current ? "true" : undefined,
        onclick: () => openConv(c.sessionId),
      },
      el("span", { class: "conv-id" }, short(c.sessionId)),
      el("span", { class: "badge " + st }, st),
      el("span", { class: "conv-meta" }, c.turns + (c.turns === 1 ? " turn · " : " turns · ") + clock(c.updatedAt)))));
  }
  if (had) {
    const again = $(had[0]).querySelector('[data-id="' + had[1] + '"]');
    if (again) again.focus();
  }
}

async function newConv() {
  const body = {};
  if (!$("agent-choice").hidden) {
    if ($("agent-pick").value) body.agent = $("agent-pick").value;
    if ($("model-pick").value) body.model = $("model-pick").value;
  }
  try {
    const c = await api("POST", "/v1/sessions", body);
    await loadConvs();
    await openConv(c.sessionId);
    $("message").focus();
  } catch (e) {
    fail(e, "conv");
  }
}

// loadAgents offers the agents and models a person may open a
// conversation with (GET /v1/agents); one agent with one model needs no
// choice, and the picker stays hidden.
async function loadAgents() {
  let res;
  try {
    res = await api("GET", "/v1/agents");
  } catch (e) {
    $("agent-choice").hidden = true;
    return;
  }
  state.agents = Array.isArray(res.agents) ? res.agents : [];
  const pick = $("agent-pick");
  pick.replaceChildren(...state.agents.map((a) => el("option", { value: a.name }, a.name + (a.name === res.default ? " (default)" : ""))));
  pick.value = res.default || (state.agents[0] ? state.agents[0].name : "");
  fillModels();
  const one = state.agents.length === 1 ? state.agents[0] : null;
  $("agent-choice").hidden = state.agents.length === 0 || (one && (!Array.isArray(one.models) || one.models.length < 2));
}

// fillModels lists the models of the agent picked, its default first.
function fillModels() {
  const a = (state.agents || []).find((x) => x.name === $("agent-pick").value);
  const models = a && Array.isArray(a.models) ? a.models : [];
  $("model-pick").replaceChildren(el("option", { value: "" }, a && a.model ? "its default (" + a.model + ")" : "its default"),
    ...models.filter((m) => !a || m !== a.model).map((m) => el("option", { value: m }, m)));
  $("model-pick").disabled = models.length === 0;
}

// loadRules lists the person's standing rules (GET /v1/rules), each with
// a Revoke button: the host answers what a rule allows without asking.
async function loadRules() {
  let res;
  try {
    res = await api("GET", "/v1/rules");
  } catch (e) {
    fail(e, "rules");
    return;
  }
  clearError("rules");
  const rules = Array.isArray(res.rules) ? res.rules : [];
  $("rules-empty").hidden = rules.length > 0;
  $("rules-list").replaceChildren(...rules.map(ruleItem));
}

function ruleItem(r) {
  const where = r.sessionId ? "in conversation " + short(r.sessionId) : "in all your conversations";
  const what = r.match === "command" ? "the command " + r.pattern
    : r.match === "exact" ? "with exactly " + JSON.stringify(r.args) : "any call";
  const b = el("button", { type: "button", class: "quiet", "aria-label": "Revoke the rule for " + r.tool + ", " + what + ", " + where }, "Revoke");
  b.addEventListener("click", () => revokeRule(r.id));
  return el("li", { class: "rule", "data-id": r.id }, el("span", { class: "rule-what" }, "Allow " + r.tool + ", " + what + ", " + where + " (since " + clock(r.createdAt) + ")"), b);
}

async function revokeRule(id) {
  try {
    await api("DELETE", "/v1/rules/" + encodeURIComponent(id));
  } catch (e) {
    fail(e, "rules");
    return;
  }
  await loadRules();
  focusAfter($("rules-h"));
}

async function openConv(id) {
  state.current = id;
  if (location.hash !== "#" + id) history.replaceState(null, "", "#" + id);
  $("conv-none").hidden = true;
  $("conv-body").hidden = false;
  for (const w of ["conv", "composer", "approval"]) clearError(w);
  $("close-confirm").hidden = true;
  $("live").hidden = true;
  $("conv-h").textContent = "Conversation " + short(id);
  $("waterfall").replaceChildren();
  $("marks").replaceChildren();
  $("timeline-title").textContent = "Choose a run in the turn log.";
  // The workspace is read when the person asks: reading it may start the
  // agent's sandbox, and holds the conversation while it runs.
  $("ws-list").replaceChildren();
  $("ws-controls").hidden = false;
  $("ws-state").textContent = "List files reads the workspace (it starts the agent's sandbox if none runs).";
  clearError("ws");
  renderConvs();
  await refreshConv();
  $("conv-h").focus();
}

// refreshConv reloads everything the conversation view shows.
async function refreshConv() {
  const id = state.current;
  if (!id) return;
  let s, msgs, turns, tools, usage;
  try {
    [s, msgs, turns, tools, usage] = await Promise.all([
      api("GET", "/v1/sessions/" + id),
      api("GET", "/v1/sessions/" + id + "/messages"),
      api("GET", "/v1/sessions/" + id + "/turns"),
      api("GET", "/v1/sessions/" + id + "/tool-sessions"),
      api("GET", "/v1/sessions/" + id + "/usage"),
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
  renderTurns(turns.turns || [], usage);
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
  const elsewhere = state.running.has(s.sessionId) && !state.busy; // a turn another tab or client runs
  $("message").disabled = paused || state.busy || elsewhere;
  $("send").disabled = paused || state.busy || elsewhere;
  $("message-state").textContent = paused ? "The agent waits for your decision above; the message box opens once you answer (or Stop)."
    : state.busy || elsewhere ? "A turn is running; the message box opens when it ends (or Stop it)." : "";
  // Stop cancels the turn that runs or waits for a decision.
  $("stop").hidden = !(state.busy || paused || elsewhere);
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
    $("remember-box").hidden = false;
    detail.hidden = true;
    showArgs($("approval-args"), s.pending.tool, s.pending.args, s.pending.argsCut);
  } else {
    $("approval-args").hidden = true;
    $("approval-h").textContent = "The agent asks";
    $("approval-q").textContent = String(it.message || "The agent is waiting for you.");
    $("approval-note-label").textContent = "Your answer";
    $("approve").textContent = "Answer";
    $("remember-box").hidden = true;
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
    clearError("approval");
    await api("POST", "/v1/sessions/" + state.current + "/decision", body);
  } catch (e) {
    fail(e, "approval");
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
          d.append(el("div", { class: "call activity" }, el("p", { class: "call-head" }, activityWords(c.call.name))));
          continue;
        }
        d.append(callView(c));
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
      // What the agent did, as any provider says it ("calling run_code"),
      // with the call it is about when the provider said: one step per
      // call, its input from the start, its output from the end.
      const c = m.call && typeof m.call === "object" && m.call.id ? m.call : null;
      if (!c) {
        group.steps.push({ call: { id: "", name: m.content || "activity" }, result: null, activity: true });
        continue;
      }
      let step = group.steps.find((x) => !x.activity && x.call.id === c.id);
      if (!step) {
        step = { call: { id: c.id, name: c.tool || "a tool" }, result: null, said: m.content || "" };
        group.steps.push(step);
      }
      if (step.call.args === undefined && c.input !== undefined) step.call.args = c.input;
      if (c.inputCut) step.call.argsCut = c.inputCut;
      if (typeof c.output === "string") step.result = { content: c.output, isError: !!c.isError, cut: c.outputCut };
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

// callWords says a tool call the way a person reads it: "the agent asked
// to write hello.txt", "the agent ran code", "the agent called search".
function callWords(call, result) {
  const a = call.args && typeof call.args === "object" && !Array.isArray(call.args) ? call.args : {};
  const path = [a.path, a.file_path, a.filePath, a.file].find((v) => typeof v === "string");
  let what;
  if (path !== undefined && (typeof a.newText === "string" || typeof a.new_string === "string" || typeof a.content === "string")) {
    const fresh = a.oldText === undefined && a.old_string === undefined;
    what = "the agent asked to " + (fresh ? "write " : "edit ") + path;
  } else if (typeof a.code === "string") {
    what = "the agent ran code with " + call.name;
  } else if (typeof a.command === "string" || Array.isArray(a.command)) {
    what = "the agent ran a command with " + call.name;
  } else {
    what = "the agent called " + call.name;
  }
  if (!result) return what + " (no result recorded)";
  return what + (result.isError ? ": it failed" : ": done");
}

// callView is one tool call under its answer: what it was, its input (by
// kind, as text) and its output (cut with a note past a size).
function callView(c) {
  const input = c.call.argsCut
    ? el("p", { class: "help cut" }, "The input (" + c.call.argsCut + " bytes) was too large to keep.")
    : argsView(c.call.name, c.call.args) || el("p", { class: "help" }, "No input recorded.");
  let output = el("p", { class: "help" }, "No output recorded.");
  if (c.result) {
    const [text, note] = cut(c.result.content || "(no output)");
    output = el("div", {}, el("pre", { class: "result", "aria-label": "Output of " + c.call.name }, text), note,
      c.result.cut ? el("p", { class: "help cut" }, "Cut: the whole output was " + c.result.cut + " bytes.") : null);
  }
  return el("div", { class: "call" + (c.result && c.result.isError ? " is-error" : "") },
    el("p", { class: "call-head" }, callWords(c.call, c.result)),
    el("p", { class: "io-h" }, "Input"), input,
    el("p", { class: "io-h" }, "Output"), output);
}

// ---- arguments, by kind, always as text ----

const SHOW_MAX = 20000; // characters shown of one value before it is cut with a note

function cut(text) {
  const s = String(text);
  if (s.length <= SHOW_MAX) return [s, null];
  return [s.slice(0, SHOW_MAX), el("p", { class: "help cut" }, "Cut: " + (s.length - SHOW_MAX) + " more characters not shown.")];
}

// codeView shows code as numbered lines (monospace; the numbers are the
// list's, not part of the text).
function codeView(code, label) {
  const [text, note] = cut(code);
  const ol = el("ol", { class: "code-lines", "aria-label": label || "Code" });
  for (const line of text.split("\n")) ol.append(el("li", {}, el("code", {}, line)));
  return el("div", { class: "code-view" }, ol, note);
}

// lineDiff is the lines of old and new as a unified diff body: a longest
// common subsequence over lines (bounded: past 4000 × 4000 it shows all
// of old removed and all of new added, and says so).
function lineDiff(oldText, newText) {
  const a = oldText === "" ? [] : oldText.split("\n");
  const b = newText === "" ? [] : newText.split("\n");
  if (a.length * b.length > 16e6) {
    return { lines: [...a.map((l) => ["-", l]), ...b.map((l) => ["+", l])], rough: true };
  }
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const lines = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { lines.push([" ", a[i]]); i++; j++; }
    else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) { lines.push(["+", b[j]]); j++; }
    else { lines.push(["-", a[i]]); i++; }
  }
  return { lines, rough: false };
}

// diffView shows a file write or edit as a unified diff from what the
// agent sent (old text absent: a new file).
function diffView(path, oldText, newText) {
  const d = lineDiff(oldText || "", newText || "");
  const pre = el("pre", { class: "diff", "aria-label": "Changes to " + path });
  pre.append(el("span", { class: "diff-head" }, "--- " + (oldText === undefined || oldText === null ? "/dev/null" : "a/" + path) + "\n+++ b/" + path + "\n"));
  let shown = 0;
  for (const [mark, line] of d.lines) {
    if (shown > SHOW_MAX) break;
    shown += line.length + 1;
    pre.append(el("span", { class: mark === "+" ? "add" : mark === "-" ? "del" : "ctx" }, mark + line + "\n"));
  }
  return el("div", { class: "diff-view" }, pre,
    shown > SHOW_MAX ? el("p", { class: "help cut" }, "Cut: the rest of the diff is not shown.") : null,
    d.rough ? el("p", { class: "help" }, "Too large to align: shown as all old lines removed and all new lines added.") : null);
}

// argsView renders a tool call's arguments by kind: code as code, a file
// write or edit as a diff, a command as its command line, else formatted
// JSON. Everything is text (textContent): nothing is parsed as markup.
function argsView(tool, a) {
  if (a === undefined || a === null) return null;
  if (typeof a !== "object" || Array.isArray(a)) return el("pre", { class: "json" }, cut(JSON.stringify(a, null, 2))[0]);
  const str = (k) => (typeof a[k] === "string" ? a[k] : undefined);
  const path = str("path") || str("file_path") || str("filePath") || str("file");
  if (typeof a.code === "string") return codeView(a.code, "Code for " + (tool || "the tool"));
  if (path !== undefined && (str("newText") !== undefined || str("new_string") !== undefined)) {
    return diffView(path, str("oldText") ?? str("old_string") ?? null, str("newText") ?? str("new_string"));
  }
  if (path !== undefined && str("content") !== undefined) return diffView(path, null, str("content"));
  const cmd = a.command ?? a.cmd;
  if (typeof cmd === "string" || Array.isArray(cmd)) {
    const argv = [].concat(cmd, Array.isArray(a.args) ? a.args : []).map(String);
    const line = argv.map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : "'" + w.replace(/'/g, "'\\''") + "'")).join(" ");
    return el("pre", { class: "command", "aria-label": "Command line" }, "$ " + cut(line)[0]);
  }
  const [text, note] = cut(JSON.stringify(a, null, 2));
  return el("div", {}, el("pre", { class: "json" }, text), note);
}

// showArgs fills box with what an approval is about.
function showArgs(box, tool, args, argsCut) {
  box.replaceChildren();
  if (argsCut) {
    box.append(el("p", { class: "help" }, "The arguments (" + argsCut + " bytes) are too large to show here."));
  } else {
    const v = argsView(tool, args);
    if (v) box.append(v);
  }
  box.hidden = box.childElementCount === 0;
}

// activityWords says an activity the way a person reads it: "calling
// write_file" becomes "the agent called write_file".
function activityWords(text) {
  const t = String(text || "");
  let m;
  if ((m = /^calling (\S+)$/.exec(t))) return "the agent called " + m[1];
  if ((m = /^(\S+) returned$/.exec(t))) return m[1] + " answered";
  if ((m = /^(\S+) returned an error(.*)$/.exec(t))) return m[1] + " failed" + m[2];
  if ((m = /^(\S+) was declined$/.exec(t))) return "you declined " + m[1];
  // An ACP agent's: "tool call ID: Title (kind, status)", "tool call ID completed".
  if ((m = /^tool call \S+: (.*?)(?: \(([^()]*)\))?$/.exec(t))) return "the agent: " + m[1] + (m[2] ? " (" + m[2].replace(/_/g, " ") + ")" : "");
  if ((m = /^tool call \S+ (\S+)$/.exec(t))) return "a tool call " + m[1].replace(/_/g, " ");
  if ((m = /^answered (\S+): (.*)$/.exec(t))) return "the agent was answered: " + m[2];
  return t;
}

// ---- the current turn ----

function liveEvent(type, e) {
  const p = e.payload || e || {};
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
    case "output":
      if (p.kind === "activity") text = activityWords(p.text);
      else if (p.kind === "request") text = "the agent asks: " + ((p.request && p.request.prompt) || "a decision");
      else return; // text arrives as the answer; start and end are the turn's own lines
      break;
    case "interaction": text = "the agent asks: " + (p.message || ""); break;
    case "agentry.pause.resume": text = "a person " + (p.approved ? "approved" : "declined") + " " + p.tool; break;
    default: text = short.replace(/[._]/g, " ");
  }
  $("live-events").append(el("li", { "data-type": type }, text));
}

async function runTurn(path, body) {
  if (state.busy) return;
  state.busy = true;
  focusFrom = document.activeElement;
  const id = state.current;
  const where = body.message !== undefined ? "composer" : "approval";
  for (const w of ["conv", "composer", "approval"]) clearError(w);
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
    else fail(e, where);
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
  const remember = $("approval-remember").value;
  if (approve && remember) body.rule = { scope: remember };
  $("approval-note").value = "";
  $("approval-remember").value = "";
  await runTurn("/decision", body);
  if (body.rule) await loadRules();
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
    else fail(e, "composer");
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

// askClose asks before closing: closing ends the conversation's tool
// sessions and cannot be undone.
function askClose() {
  $("close-confirm").hidden = false;
  $("close-yes").focus();
}

function keepOpen() {
  $("close-confirm").hidden = true;
  $("close-conv").focus();
}

async function closeConv() {
  const id = state.current;
  $("close-confirm").hidden = true;
  clearError("conv");
  try {
    await api("DELETE", "/v1/sessions/" + id);
  } catch (e) {
    fail(e, "conv");
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

// usageWords says a usage row as a person reads it: "1,234 tokens ·
// 3 model calls · $0.0123" (a cost the price table cannot tell is said so,
// never shown as zero).
function usageWords(r) {
  if (!r) return "";
  const n = (v) => Number(v || 0).toLocaleString("en");
  const tokens = (r.inputTokens || 0) + (r.outputTokens || 0);
  const parts = [n(tokens) + " tokens (" + n(r.inputTokens) + " in, " + n(r.outputTokens) + " out)"];
  if (r.modelCalls) parts.push(n(r.modelCalls) + (r.modelCalls === 1 ? " model call" : " model calls"));
  if (r.toolCalls) parts.push(n(r.toolCalls) + (r.toolCalls === 1 ? " tool call" : " tool calls"));
  if (r.costUsd || !r.unknownCostTurns) parts.push("$" + Number(r.costUsd || 0).toFixed(4));
  if (r.unknownCostTurns) parts.push("cost unknown for " + r.unknownCostTurns + (r.unknownCostTurns === 1 ? " turn" : " turns"));
  return parts.join(" · ");
}

// loadUsageTotal shows the person's usage this month (UTC).
async function loadUsageTotal() {
  const now = new Date();
  const since = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)).toISOString().slice(0, 10);
  try {
    const u = await api("GET", "/v1/usage?by=day&since=" + since);
    $("usage-total").textContent = "You this month: " + u.total.turns + (u.total.turns === 1 ? " turn · " : " turns · ") + usageWords(u.total);
  } catch (e) {
    $("usage-total").textContent = "Your usage cannot be read now: " + e.message;
  }
}

function renderTurns(turns, usage) {
  const body = $("turns").tBodies[0];
  body.replaceChildren();
  const used = new Map(((usage && usage.turns) || []).map((r) => [r.key, r]));
  $("conv-usage").textContent = usage ? "This conversation: " + usage.total.turns + (usage.total.turns === 1 ? " turn · " : " turns · ") + usageWords(usage.total) : "";
  for (const t of turns.slice().reverse()) {
    const took = new Date(t.ended) - new Date(t.started);
    const runCell = el("td", {});
    if (t.runId) {
      runCell.append(el("button", {
        type: "button", class: "quiet", "aria-label": "Show the timeline of run " + short(t.runId),
        onclick: () => showTimeline(t.runId),
      }, short(t.runId)));
    }
    body.append(el("tr", { title: t.error || "" },
      el("td", {}, String(t.seq)),
      el("td", {}, t.kind),
      el("td", {}, el("span", { class: "badge " + t.outcome }, t.outcome), t.error ? el("span", { class: "turn-error" }, " " + t.error) : null),
      el("td", {}, ms(took)),
      el("td", { class: "used" }, usageWords(used.get(String(t.seq)))),
      runCell));
  }
}

// ---- the workspace: upload, list, download ----

const WS_LIST_MAX = 500; // entries listed; past it the list says so

function bytes(n) {
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

// listWorkspace reads the workspace's tar stream and lists its entries.
async function listWorkspace() {
  const id = state.current;
  clearError("ws");
  $("ws-state").textContent = "Reading the workspace…";
  let res;
  try {
    res = await listTar(await raw("GET", "/v1/sessions/" + id + "/workspace"), WS_LIST_MAX);
  } catch (e) {
    if (id !== state.current) return;
    if (e.code === "workspace_unsupported") {
      $("ws-controls").hidden = true;
      $("ws-list").replaceChildren();
      $("ws-state").textContent = "This agent keeps no files the host can reach: no workspace to show.";
      return;
    }
    $("ws-state").textContent = "";
    if (e.status === 401) fail(e);
    else showError("ws", e.message);
    return;
  }
  if (id !== state.current) return;
  $("ws-controls").hidden = false;
  const list = $("ws-list");
  list.replaceChildren();
  const files = res.entries.filter((f) => f.type !== "dir" && f.name !== "." && f.name !== "./");
  for (const f of files) {
    const name = f.name.replace(/^\.\//, "");
    list.append(el("li", {},
      el("span", { class: "ws-name" }, name),
      el("span", { class: "sub" }, f.type === "link" ? "link" : bytes(f.size)),
      el("button", { type: "button", class: "quiet", "aria-label": "Download " + name, onclick: () => downloadWorkspace(name) }, "Download")));
  }
  $("ws-state").textContent = files.length === 0 ? "The workspace is empty."
    : files.length + (files.length === 1 ? " file" : " files") + (res.more ? "; only the first " + WS_LIST_MAX + " entries are listed" : "") + ".";
}

// downloadWorkspace saves the workspace (or one path of it) as a tar file.
async function downloadWorkspace(path) {
  clearError("ws");
  const q = path ? "?path=" + encodeURIComponent(path) : "";
  let blob;
  try {
    blob = await (await raw("GET", "/v1/sessions/" + state.current + "/workspace" + q)).blob();
  } catch (e) {
    if (e.status === 401) fail(e);
    else showError("ws", e.message);
    return;
  }
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: (path ? path.replace(/[\/]/g, "_") : "workspace-" + short(state.current)) + ".tar", hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
  $("ws-state").textContent = "Downloaded " + (path || "the workspace") + " (" + bytes(blob.size) + ", a tar file).";
}

// uploadWorkspace puts the chosen files into the workspace's top level.
async function uploadWorkspace() {
  clearError("ws");
  const chosen = [...$("ws-files").files];
  if (chosen.length === 0) {
    showError("ws", "Choose one or more files first.");
    $("ws-files").focus();
    return;
  }
  $("ws-upload").disabled = true;
  $("ws-state").textContent = "Uploading " + chosen.length + (chosen.length === 1 ? " file…" : " files…");
  try {
    const files = await Promise.all(chosen.map(async (f) => ({ name: f.name, bytes: new Uint8Array(await f.arrayBuffer()) })));
    const res = await raw("PUT", "/v1/sessions/" + state.current + "/workspace", tarOf(files), "application/x-tar");
    await res.body?.cancel();
    $("ws-files").value = "";
    await listWorkspace();
  } catch (e) {
    $("ws-state").textContent = "";
    if (e.status === 401) fail(e);
    else showError("ws", e.message);
  } finally {
    $("ws-upload").disabled = false;
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
  $("agent-pick").addEventListener("change", fillModels);
  $("close-conv").addEventListener("click", askClose);
  $("close-yes").addEventListener("click", closeConv);
  $("close-no").addEventListener("click", keepOpen);
  $("retry").addEventListener("click", async () => {
    if (state.feed) state.feed.retry();
    await loadConvs();
    if (state.current) await refreshConv();
  });
  for (const b of document.querySelectorAll(".error-box .dismiss")) {
    b.addEventListener("click", () => {
      const box = b.closest(".error-box");
      box.hidden = true;
      box.querySelector(".error").textContent = "";
    });
  }
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
  $("ws-upload").addEventListener("click", uploadWorkspace);
  $("ws-list-button").addEventListener("click", listWorkspace);
  $("ws-download").addEventListener("click", () => downloadWorkspace(""));
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

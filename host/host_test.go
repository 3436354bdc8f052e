package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/tool"
)

// The whole life of a session, over httptest and over a real listener, on
// every store.
func TestSessionLifecycle(t *testing.T) {
	for _, sk := range stores(t) {
		for _, real := range []bool{false, true} {
			name := sk.name + "/httptest"
			if real {
				name = sk.name + "/listener"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, config{dsn: sk.dsn(t), real: real})
				lifecycle(t, f)
			})
		}
	}
}

func lifecycle(t *testing.T, f *fixture) {
	id := f.open("alice")
	r := f.do("GET", "/v1/sessions/"+id, "alice", nil)
	want(t, r, 200, "")
	if m := r.json(t); m["state"] != "open" || m["turns"] != 0.0 {
		t.Fatalf("a new session: %s", r.body)
	}

	r = f.say("alice", id, "hello")
	want(t, r, 200, "")
	m := r.json(t)
	if m["output"] != "you said: hello" || !strings.HasPrefix(m["runId"].(string), "run-") {
		t.Fatalf("turn 1: %s", r.body)
	}

	r = f.say("alice", id, `call files {"op":"write","name":"a.txt","text":"kept"}`)
	want(t, r, 200, "")
	if m := r.json(t); m["output"] != "tool said: wrote a.txt" {
		t.Fatalf("turn 2: %s", r.body)
	}
	r = f.say("alice", id, `call files {"op":"read","name":"a.txt"}`)
	if m := r.json(t); m["output"] != "tool said: kept" {
		t.Fatalf("the session's workspace did not live across turns: %s", r.body)
	}
	if open, _, _ := f.ws.stats(); open != 1 {
		t.Fatalf("%d workspaces open, want the session's one", open)
	}

	// A check-in: 202 with the question; the session is paused.
	r = f.say("alice", id, `call deploy {"target":"prod"}`)
	want(t, r, http.StatusAccepted, "")
	aw, _ := r.json(t)["awaiting"].(map[string]any)
	if aw == nil || aw["tool"] != "deploy" || !strings.Contains(aw["question"].(string), "prod") {
		t.Fatalf("check-in: %s", r.body)
	}
	r = f.do("GET", "/v1/sessions/"+id, "alice", nil)
	if m := r.json(t); m["state"] != "paused" || m["pending"] == nil {
		t.Fatalf("paused session: %s", r.body)
	}
	// A message now is refused, naming the question.
	r = f.say("alice", id, "hello?")
	want(t, r, http.StatusConflict, "awaiting_decision")
	if !strings.Contains(string(r.body), "deploy") {
		t.Fatalf("the refusal does not name the pending question: %s", r.body)
	}
	r = f.decide("alice", id, true)
	want(t, r, 200, "")
	if m := r.json(t); m["output"] != "tool said: deployed prod" {
		t.Fatalf("decision: %s", r.body)
	}
	// A decision with nothing pending.
	want(t, f.decide("alice", id, true), http.StatusConflict, "no_pending_question")

	r = f.do("GET", "/v1/sessions/"+id, "alice", nil)
	if m := r.json(t); m["state"] != "open" || m["turns"] != 4.0 {
		t.Fatalf("after four turns: %s", r.body)
	}

	// Close: the session's tool sessions fire, the transcript stays.
	r = f.do("DELETE", "/v1/sessions/"+id, "alice", nil)
	want(t, r, http.StatusNoContent, "")
	if open, opened, closed := f.ws.stats(); open != 0 || opened != closed {
		t.Fatalf("after close: %d open, %d opened, %d closed", open, opened, closed)
	}
	r = f.do("GET", "/v1/sessions/"+id, "alice", nil)
	if m := r.json(t); m["state"] != "closed" {
		t.Fatalf("closed session: %s", r.body)
	}
	r = f.do("GET", "/v1/sessions/"+id+"/messages", "alice", nil)
	want(t, r, 200, "")
	var tr struct {
		Messages []struct {
			Role, Content string
		}
	}
	if err := json.Unmarshal(r.body, &tr); err != nil || len(tr.Messages) < 8 || tr.Messages[0].Content != "hello" {
		t.Fatalf("transcript after close: %v %s", err, r.body)
	}
	want(t, f.say("alice", id, "more"), http.StatusConflict, "session_closed")
	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), http.StatusNoContent, "")

	r = f.do("GET", "/v1/sessions/"+id+"/turns", "alice", nil)
	var log struct{ Turns []host.Turn }
	if err := json.Unmarshal(r.body, &log); err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, tu := range log.Turns {
		outcomes = append(outcomes, tu.Kind+":"+tu.Outcome)
	}
	got := strings.Join(outcomes, " ")
	if got != "message:answered message:answered message:answered message:paused decision:answered close:closed" {
		t.Fatalf("turn log: %s", got)
	}

	r = f.do("GET", "/v1/sessions", "alice", nil)
	if !strings.Contains(string(r.body), id) {
		t.Fatalf("the owner's list lacks the session: %s", r.body)
	}
	if n := len(f.rec.ofType(host.TypeConversationOpened)); n != 1 {
		t.Fatalf("%d session_opened events", n)
	}
	closedEv := f.rec.ofType(host.TypeConversationClosed)
	if len(closedEv) != 1 || closedEv[0].Meta.SessionID != id || closedEv[0].Meta.Principal != "alice" ||
		closedEv[0].Payload.(*host.ConversationEvent).ToolSessionsClosed != 1 {
		t.Fatalf("session_closed events: %+v", closedEv)
	}
}

// Two principals — and one principal name in two tenants — cannot see or
// touch each other's sessions or sandboxes, and trying changes nothing.
func TestPrincipalsAreIsolated(t *testing.T) {
	f := newFixture(t, config{})
	a := f.open("alice")
	want(t, f.say("alice", a, `call files {"op":"write","name":"secret.txt","text":"alice's secret"}`), 200, "")
	want(t, f.say("alice", a, `call deploy {"target":"prod"}`), http.StatusAccepted, "")

	for _, who := range []string{"bob", "carol"} {
		for _, probe := range []struct{ method, path string }{
			{"GET", ""}, {"GET", "/messages"}, {"GET", "/turns"}, {"DELETE", ""},
		} {
			r := f.do(probe.method, "/v1/sessions/"+a+probe.path, who, nil)
			want(t, r, http.StatusNotFound, "not_found")
		}
		want(t, f.say(who, a, "hi"), http.StatusNotFound, "not_found")
		want(t, f.decide(who, a, true), http.StatusNotFound, "not_found")
		r := f.do("GET", "/v1/sessions", who, nil)
		if strings.Contains(string(r.body), a) {
			t.Fatalf("%s's list shows alice's session: %s", who, r.body)
		}
		// Their own session with a file of the same name sees nothing of alice's.
		b := f.open(who)
		r = f.say(who, b, `call files {"op":"read","name":"secret.txt"}`)
		if m := r.json(t); m["output"] != "tool said: no such file" {
			t.Fatalf("%s read alice's sandbox: %s", who, r.body)
		}
	}
	// No body field or header names an owner.
	b := f.open("bob")
	r := f.do("POST", "/v1/sessions/"+a+"/turns", "bob", `{"message":"hi","tenant":"acme","principal":"alice"}`)
	want(t, r, http.StatusBadRequest, "unknown_field")
	r = f.do("GET", "/v1/sessions/"+a, "bob", nil, "X-Tenant", "acme", "X-Principal", "alice", "X-Agentry-Principal", "alice")
	want(t, r, http.StatusNotFound, "not_found")
	_ = b

	// Alice's session is untouched: still paused, her file still there.
	r = f.do("GET", "/v1/sessions/"+a, "alice", nil)
	if m := r.json(t); m["state"] != "paused" {
		t.Fatalf("alice's session changed: %s", r.body)
	}
	want(t, f.decide("alice", a, true), 200, "")
	r = f.say("alice", a, `call files {"op":"read","name":"secret.txt"}`)
	if m := r.json(t); m["output"] != "tool said: alice's secret" {
		t.Fatalf("alice lost her file: %s", r.body)
	}
}

// A streamed turn: the events in the order the engine emitted them, all of
// this session, ending with the result.
func TestStreamedTurn(t *testing.T) {
	for _, real := range []bool{false, true} {
		f := newFixture(t, config{real: real})
		id := f.open("alice")
		evs := f.stream("alice", "/v1/sessions/"+id+"/turns", `{"message":"call files {\"op\":\"write\",\"name\":\"x\",\"text\":\"y\"}"}`)
		checkStream(t, evs, id)
		last := evs[len(evs)-1]
		var res struct{ Output, RunID string }
		if err := json.Unmarshal(last.data, &res); err != nil || res.Output != "tool said: wrote x" || res.RunID == "" {
			t.Fatalf("result: %v %s", err, last.data)
		}
		var types, outputs []string
		for _, e := range evs[:len(evs)-1] {
			if e.name == host.OutputEvent {
				var o struct{ Kind, Text string }
				_ = json.Unmarshal(e.data, &o)
				outputs = append(outputs, o.Kind)
				continue
			}
			if strings.HasPrefix(e.name, "agentry.provider.") {
				continue // the contract's own events, around the agent's
			}
			types = append(types, e.name)
		}
		if got := strings.Join(outputs, " "); got != "turn.started activity activity text turn.completed" {
			t.Fatalf("the provider's outputs: %s", got)
		}
		joined := strings.Join(types, " ")
		for _, w := range []string{"agentry.agent.turn_start", "agentry.tool.start", "agentry.tools.session_started", "agentry.tool.end", "agentry.agent.turn_end"} {
			if !strings.Contains(joined, w) {
				t.Fatalf("the stream lacks %s: %s", w, joined)
			}
		}
		if types[0] != "agentry.agent.turn_start" || types[len(types)-1] != "agentry.agent.turn_end" {
			t.Fatalf("the stream does not run turn_start … turn_end: %s", joined)
		}

		// A paused turn streams its pause and ends with the question; the
		// decision streams too.
		evs = f.stream("alice", "/v1/sessions/"+id+"/turns", `{"message":"call deploy {\"target\":\"eu\"}"}`)
		checkStream(t, evs, id)
		if !strings.Contains(string(evs[len(evs)-1].data), `"awaiting"`) {
			t.Fatalf("paused stream result: %s", evs[len(evs)-1].data)
		}
		evs = f.stream("alice", "/v1/sessions/"+id+"/decision", `{"approve":false,"note":"not today"}`)
		checkStream(t, evs, id)
		if !strings.Contains(string(evs[len(evs)-1].data), "declined") {
			t.Fatalf("declined stream result: %s", evs[len(evs)-1].data)
		}
		// An error after streaming began ends with an error result.
		evs = f.stream("alice", "/v1/sessions/"+id+"/turns", `{"message":"fail"}`)
		if last := evs[len(evs)-1]; last.name != host.ResultEvent || !strings.Contains(string(last.data), `"turn_failed"`) {
			t.Fatalf("failed stream result: %s %s", last.name, last.data)
		}
		f.shutdown()
	}
}

func (f *fixture) stream(who, path, body string) []sseEvent {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+f.tokens[who])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		f.t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	return readSSE(f.t, res.Body)
}

func checkStream(t *testing.T, evs []sseEvent, id string) {
	t.Helper()
	if len(evs) < 3 {
		t.Fatalf("%d events", len(evs))
	}
	var prev uint64
	for i, e := range evs {
		if i == len(evs)-1 {
			if e.name != host.ResultEvent {
				t.Fatalf("the stream ends with %q, not the result", e.name)
			}
			break
		}
		if e.name == host.ResultEvent {
			t.Fatalf("a result before the end, at %d", i)
		}
		if e.name == host.OutputEvent {
			var o struct{ Kind, Text string }
			if err := json.Unmarshal(e.data, &o); err != nil || o.Kind == "" {
				t.Fatalf("output %d: %v %s", i, err, e.data)
			}
			continue
		}
		var ev struct {
			Type string
			Meta event.Meta
		}
		if err := json.Unmarshal(e.data, &ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Type != e.name || ev.Meta.SessionID != id {
			t.Fatalf("event %d: type %q named %q, session %q", i, ev.Type, e.name, ev.Meta.SessionID)
		}
		if ev.Meta.Seq <= prev {
			t.Fatalf("event %d (seq %d) after seq %d: out of order", i, ev.Meta.Seq, prev)
		}
		prev = ev.Meta.Seq
	}
}

// Bad input gets its documented status and code, and changes nothing —
// whatever the provider.
func TestBadInput(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) { badInput(t, newFixture(t, config{kind: kind})) })
}

func badInput(t *testing.T, f *fixture) {
	id := f.open("alice")
	want(t, f.say("alice", id, "hello"), 200, "")
	before := f.do("GET", "/v1/sessions/"+id+"/messages", "alice", nil).body

	huge := `{"message":"` + strings.Repeat("x", host.DefaultMaxBodyBytes) + `"}`
	turns := "/v1/sessions/" + id + "/turns"
	cases := []struct {
		name, method, path, who, body string
		hdr                           []string
		status                        int
		code, field                   string
	}{
		{"not json", "POST", turns, "alice", `{"message":`, nil, 400, "invalid_json", ""},
		{"not an object", "POST", turns, "alice", `["hello"]`, nil, 400, "invalid_json", ""},
		{"wrong type", "POST", turns, "alice", `{"message":5}`, nil, 400, "invalid_json", "message"},
		{"missing field", "POST", turns, "alice", `{}`, nil, 400, "missing_field", "message"},
		{"empty message", "POST", turns, "alice", `{"message":"  "}`, nil, 400, "invalid_field", "message"},
		{"unknown field", "POST", turns, "alice", `{"message":"hi","mesage":"x"}`, nil, 400, "unknown_field", "mesage"},
		{"two objects", "POST", turns, "alice", `{"message":"hi"}{"message":"again"}`, nil, 400, "invalid_json", ""},
		{"duplicate key", "POST", turns, "alice", `{"message":"hi","message":"rm -rf /"}`, nil, 400, "invalid_json", "message"},
		{"key in another case", "POST", turns, "alice", `{"Message":"hi"}`, nil, 400, "unknown_field", "Message"},
		{"decision key in another case", "POST", "/v1/sessions/" + id + "/decision", "alice", `{"APPROVE":true}`, nil, 400, "unknown_field", "APPROVE"},
		{"empty body", "POST", turns, "alice", ``, nil, 400, "invalid_json", ""},
		{"decision type", "POST", "/v1/sessions/" + id + "/decision", "alice", `{"approve":"yes"}`, nil, 400, "invalid_json", "approve"},
		{"huge body", "POST", turns, "alice", huge, nil, 413, "body_too_large", ""},
		{"media type", "POST", turns, "alice", `message=hi`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", ""},
		{"wrong method", "PUT", "/v1/sessions/" + id, "alice", ``, nil, 405, "method_not_allowed", ""},
		{"wrong method decision", "GET", "/v1/sessions/" + id + "/decision", "alice", ``, nil, 405, "method_not_allowed", ""},
		{"wrong method health", "POST", "/healthz", "", ``, nil, 405, "method_not_allowed", ""},
		{"unknown session", "POST", "/v1/sessions/ses_00000000000000000000000000000000/turns", "alice", `{"message":"hi"}`, nil, 404, "not_found", ""},
		{"malformed session id", "GET", "/v1/sessions/..%2F..%2Fetc", "alice", ``, nil, 404, "not_found", ""},
		{"unknown path", "GET", "/v1/nothing", "alice", ``, nil, 404, "not_found", ""},
		{"unclean path", "GET", "/v1//sessions", "alice", ``, nil, 404, "not_found", ""},
		{"dot-dot path", "GET", "/v1/sessions/x/../" + id, "alice", ``, nil, 404, "not_found", ""},
		{"no token", "POST", turns, "", `{"message":"hi"}`, nil, 401, "unauthenticated", ""},
		{"forged token", "POST", turns, host.TokenPrefix + "forged", `{"message":"hi"}`, nil, 401, "invalid_token", ""},
		{"basic auth", "GET", "/v1/sessions", "", ``, []string{"Authorization", "Basic YWxpY2U6c2VjcmV0"}, 401, "invalid_token", ""},
		{"token of another header", "GET", "/v1/sessions", "", ``, []string{"X-Api-Key", f.tokens["alice"]}, 401, "unauthenticated", ""},
		{"no token wrong method", "PUT", "/v1/sessions/" + id, "", ``, nil, 401, "unauthenticated", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = c.body
			}
			r := f.do(c.method, c.path, c.who, body, c.hdr...)
			want(t, r, c.status, c.code)
			e := r.json(t)["error"].(map[string]any)
			if c.field != "" && e["field"] != c.field {
				t.Fatalf("field %v, want %q: %s", e["field"], c.field, r.body)
			}
			msg, _ := e["message"].(string)
			if msg == "" || strings.Contains(msg, "goroutine") || strings.Contains(msg, ".go:") {
				t.Fatalf("the message is empty or a stack trace: %q", msg)
			}
			if c.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Fatal("a 401 without WWW-Authenticate")
			}
			if c.status == 405 && r.header.Get("Allow") == "" {
				t.Fatal("a 405 without Allow")
			}
			if strings.Contains(string(r.body), f.tokens["alice"]) {
				t.Fatal("an error echoes the token")
			}
		})
	}
	after := f.do("GET", "/v1/sessions/"+id+"/messages", "alice", nil).body
	if string(before) != string(after) {
		t.Fatalf("bad input changed the transcript:\n%s\n%s", before, after)
	}
	r := f.do("GET", "/v1/sessions/"+id, "alice", nil)
	if m := r.json(t); m["turns"] != 1.0 || m["state"] != "open" {
		t.Fatalf("bad input changed the session: %s", r.body)
	}
	want(t, f.say("alice", id, "still here"), 200, "")
}

// One turn at a time per session: a second is 409 — whatever the
// provider. (A close cancels the running turn: TestCloseCancelsABusyTurn.)
func TestOneTurnAtATime(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		f := newFixture(t, config{kind: kind, real: true})
		id := f.open("alice")
		held := f.hold("alice", id)
		want(t, f.say("alice", id, "hello"), http.StatusConflict, "session_busy")
		want(t, f.decide("alice", id, true), http.StatusConflict, "session_busy")
		// Another session of the same principal is not held up.
		other := f.open("alice")
		r := f.say("alice", other, "hello")
		want(t, r, 200, "")
		if m := r.json(t); m["output"] != f.answer("hello") {
			t.Fatalf("the other session's answer: %s", r.body)
		}
		if kind == onFake {
			held.cut(t) // the fake holds until interrupted: the drain bound does it
			return
		}
		held.release()
		want(t, held.wait(), 200, "")
		want(t, f.say("alice", id, "hello"), 200, "")
	})
}

// heldTurn is a turn the fixture's provider holds until the test lets go:
// the native agent's gate tool, or the fake's "hold" prompt.
type heldTurn struct {
	f    *fixture
	done chan resp
}

func (f *fixture) hold(who, id string) *heldTurn {
	f.t.Helper()
	h := &heldTurn{f: f, done: make(chan resp, 1)}
	msg := "call gate"
	if f.kind == onFake {
		msg = conformance.FakeHold
	}
	go func() { h.done <- f.say(who, id, msg) }()
	if f.kind == onFake {
		f.rec.waitFor(f.t, provider.TypeTurnStart, func(e event.Event) bool { return e.Meta.SessionID == id }, 10*time.Second)
	} else {
		<-f.gate.entered
	}
	return h
}

func (h *heldTurn) release()   { close(h.f.gate.release) }
func (h *heldTurn) wait() resp { return <-h.done }

// cut ends a held turn with the drain bound (Interrupt through the
// contract): it answers 503 turn_cut, and the host is shut down.
func (h *heldTurn) cut(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.f.h.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "cut") {
		t.Fatalf("shutdown: %v", err)
	}
	want(t, h.wait(), http.StatusServiceUnavailable, "turn_cut")
	h.f.closed = true
	h.f.stop()
	_ = h.f.reg.Dispose(context.Background())
}

// Admission bounds answer 429 with Retry-After, and emit an event —
// whatever the provider.
func TestAdmissionBounds(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		f := newFixture(t, config{kind: kind, real: true, opt: host.Options{MaxTurnsPerPrincipal: 1, MaxConversationsPerPrincipal: 2}})
		a1, a2 := f.open("alice"), f.open("alice")
		r := f.do("POST", "/v1/sessions", "alice", nil)
		want(t, r, http.StatusTooManyRequests, "too_many_sessions")
		if r.header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
		f.open("bob") // bob has his own bound

		held := f.hold("alice", a1)
		r = f.say("alice", a2, "hello")
		want(t, r, http.StatusTooManyRequests, "too_many_turns")
		if r.header.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
		b := f.open("bob")
		want(t, f.say("bob", b, "hello"), 200, "") // bob's turns are his own
		refused := f.rec.ofType(host.TypeAdmissionRefused)
		if len(refused) != 2 || refused[0].Meta.Principal != "alice" {
			t.Fatalf("admission events: %+v", refused)
		}
		if kind == onFake {
			held.cut(t)
			return
		}
		held.release()
		want(t, held.wait(), 200, "")
		want(t, f.say("alice", a2, "hello"), 200, "")
		want(t, f.do("DELETE", "/v1/sessions/"+a1, "alice", nil), 204, "")
		f.open("alice") // closing one makes room
	})
}

// A global bound on turns holds across principals, whatever the provider.
func TestAdmissionGlobalBound(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		f := newFixture(t, config{kind: kind, real: true, opt: host.Options{MaxTurns: 1}})
		a, b := f.open("alice"), f.open("bob")
		held := f.hold("alice", a)
		want(t, f.say("bob", b, "hello"), http.StatusTooManyRequests, "too_many_turns")
		if kind == onFake {
			held.cut(t)
			return
		}
		held.release()
		want(t, held.wait(), 200, "")
	})
}

// Idle conversations leave memory: their tool sessions close with reason
// evicted, the transcript stays and the conversation goes on; a pending
// pause is resumed from the binding when it is answered.
func TestIdleEviction(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	f := newFixture(t, config{opt: host.Options{IdleEvict: time.Minute, Now: clock.Now}})
	a := f.open("alice")
	want(t, f.say("alice", a, `call files {"op":"write","name":"n","text":"v"}`), 200, "")
	p := f.open("alice")
	want(t, f.say("alice", p, `call migrate {}`), http.StatusAccepted, "")
	if open, _, _ := f.ws.stats(); open != 2 {
		t.Fatalf("%d workspaces open before eviction", open)
	}
	clock.Advance(30 * time.Second)
	if n := f.h.EvictIdle(context.Background()); n != 0 {
		t.Fatalf("evicted %d before the bound", n)
	}
	clock.Advance(31 * time.Second)
	if n := f.h.EvictIdle(context.Background()); n != 2 {
		t.Fatalf("evicted %d, want 2", n)
	}
	if open, opened, closed := f.ws.stats(); open != 0 || opened != closed {
		t.Fatalf("after eviction: %d open, %d opened, %d closed", open, opened, closed)
	}
	var reasons []string
	for _, e := range f.rec.ofType(tool.TypeSessionClosed) {
		reasons = append(reasons, e.Payload.(*tool.SessionClosed).Reason)
	}
	if !strings.Contains(strings.Join(reasons, " "), "evicted") {
		t.Fatalf("close reasons %v lack evicted", reasons)
	}
	if ev := f.rec.ofType(host.TypeConversationEvicted); len(ev) != 2 {
		t.Fatalf("%d session_evicted events", len(ev))
	}

	// The conversation goes on from the store; the sandbox is new.
	r := f.say("alice", a, `call files {"op":"read","name":"n"}`)
	if m := r.json(t); m["output"] != "tool said: no such file" {
		t.Fatalf("after eviction: %s", r.body)
	}
	r = f.do("GET", "/v1/sessions/"+a+"/messages", "alice", nil)
	if !strings.Contains(string(r.body), `"tool said: wrote n"`) {
		t.Fatalf("the transcript was lost: %s", r.body)
	}
	// The pause outlives the eviction: the session is re-opened from its
	// binding, waiting on the same request, and the decision reaches it.
	r = f.do("GET", "/v1/sessions/"+p, "alice", nil)
	if m := r.json(t); m["state"] != "paused" {
		t.Fatalf("an evicted pause: %s", r.body)
	}
	r = f.decide("alice", p, true)
	want(t, r, 200, "")
	if m := r.json(t); m["output"] != "tool said: migrated" {
		t.Fatalf("the decision after eviction: %s", r.body)
	}
	want(t, f.say("alice", p, "hello"), 200, "")
}

// The background sweep evicts without being called.
func TestEvictionSweepRuns(t *testing.T) {
	f := newFixture(t, config{opt: host.Options{IdleEvict: time.Nanosecond, EvictEvery: time.Millisecond}})
	a := f.open("alice")
	want(t, f.say("alice", a, `call files {"op":"write","name":"n","text":"v"}`), 200, "")
	f.rec.waitFor(t, tool.TypeSessionClosed, func(e event.Event) bool {
		return e.Payload.(*tool.SessionClosed).Reason == "evicted"
	}, 10*time.Second)
	if open, _, _ := f.ws.stats(); open != 0 {
		t.Fatalf("%d workspaces open after the sweep", open)
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A long turn's stream is not silent: while the turn waits inside a tool,
// the stream sends keep-alive comments, and it still ends with the result.
func TestSSEKeepAliveDuringALongTurn(t *testing.T) {
	f := newFixture(t, config{opt: host.Options{KeepAlive: 10 * time.Millisecond}})
	id := f.open("alice")
	req, _ := http.NewRequest("POST", f.url+"/v1/sessions/"+id+"/turns", strings.NewReader(`{"message":"call gate"}`))
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-f.gate.entered
	br := bufio.NewReader(res.Body)
	for comments := 0; comments < 2; { // the turn is held: only keep-alives can come
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended while the turn was held: %v", err)
		}
		if line == ": keep-alive\n" {
			comments++
		}
	}
	close(f.gate.release)
	evs := readSSE(t, br)
	if len(evs) == 0 || evs[len(evs)-1].name != host.ResultEvent {
		t.Fatalf("the stream did not end with the result: %+v", evs)
	}
}

// When every live tool session has work in flight and none comes free in
// time, a turn that needs one more is refused 429 capacity (Retry-After),
// nothing is evicted mid-call, and the held turn still answers.
func TestCapacityIs429(t *testing.T) {
	f := newFixture(t, config{agentOpt: func(o *agent.Options) {
		o.MaxLiveSessions = 1
		o.SessionWait = 50 * time.Millisecond
	}})
	a, b := f.open("alice"), f.open("bob")
	var wg sync.WaitGroup
	var held resp
	wg.Go(func() { held = f.say("alice", a, "call held") })
	<-f.gate.entered
	r := f.say("bob", b, "call held")
	want(t, r, http.StatusTooManyRequests, "capacity")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 capacity without Retry-After")
	}
	close(f.gate.release)
	wg.Wait()
	want(t, held, 200, "")
	if m := held.json(t); m["output"] != "tool said: released" {
		t.Fatalf("the held turn: %v", m)
	}
	// Room again: bob's next turn runs (the gate is open now).
	want(t, f.say("bob", b, "call held"), 200, "")
	r = f.do("GET", "/v1/sessions/"+b+"/turns", "bob", nil)
	if !strings.Contains(string(r.body), `"outcome":"failed"`) {
		t.Fatalf("the refused turn is not in the log: %s", r.body)
	}
}

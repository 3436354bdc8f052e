package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/tool"
)

// The host's life of a conversation on the conformance kit's fake: the
// host needs nothing but the contract.
func TestFakeProviderLifecycle(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			f := newFixture(t, config{kind: onFake, dsn: sk.dsn(t)})
			id := f.open("alice")
			r := f.say("alice", id, "hello")
			want(t, r, 200, "")
			if m := r.json(t); m["output"] != "echo: hello" || !strings.HasPrefix(m["runId"].(string), "run-") {
				t.Fatalf("turn: %s", r.body)
			}
			r = f.say("alice", id, conformance.FakeAsk)
			want(t, r, http.StatusAccepted, "")
			aw, _ := r.json(t)["awaiting"].(map[string]any)
			if aw == nil || aw["question"] != "may the fake go on?" || aw["kind"] != "approval" || aw["requestId"] == "" {
				t.Fatalf("request: %s", r.body)
			}
			want(t, f.say("alice", id, "hi"), http.StatusConflict, "awaiting_decision")
			r = f.decide("alice", id, true)
			want(t, r, 200, "")
			if m := r.json(t); m["output"] != "approved" {
				t.Fatalf("resolve: %s", r.body)
			}
			r = f.do("GET", "/v1/sessions/"+id, "alice", nil)
			if m := r.json(t); m["state"] != "open" || m["turns"] != 2.0 || m["provider"] != conformance.FakeKey {
				t.Fatalf("after two turns: %s", r.body)
			}
			want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), 204, "")
			r = f.do("GET", "/v1/sessions/"+id+"/messages", "alice", nil)
			var tr struct{ Messages []host.Message }
			if err := json.Unmarshal(r.body, &tr); err != nil || len(tr.Messages) != 4 || tr.Messages[1].Content != "echo: hello" || tr.Messages[3].Content != "approved" {
				t.Fatalf("transcript: %v %s", err, r.body)
			}
			r = f.do("GET", "/v1/sessions/"+id+"/turns", "alice", nil)
			if !strings.Contains(string(r.body), `"kind":"close","outcome":"closed"`) {
				t.Fatalf("turn log: %s", r.body)
			}
			// Another principal sees nothing of it.
			want(t, f.do("GET", "/v1/sessions/"+id, "bob", nil), 404, "not_found")
		})
	}
}

// A streamed turn on the fake: its outputs, and the result.
func TestFakeProviderStream(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	id := f.open("alice")
	evs := f.stream("alice", "/v1/sessions/"+id+"/turns", `{"message":"hello"}`)
	var kinds []string
	for _, e := range evs {
		if e.name == host.OutputEvent {
			var o struct{ Kind, Text string }
			_ = json.Unmarshal(e.data, &o)
			kinds = append(kinds, o.Kind+":"+o.Text)
		}
	}
	if got := strings.Join(kinds, " "); got != "turn.started: text:echo: hello turn.completed:" {
		t.Fatalf("outputs: %s", got)
	}
	if last := evs[len(evs)-1]; last.name != host.ResultEvent || !strings.Contains(string(last.data), `"output":"echo: hello"`) {
		t.Fatalf("result: %s %s", last.name, last.data)
	}
}

// The drain bound interrupts a turn through the contract (Interrupt): it
// ends at a boundary, is recorded as cut, and the session stays usable to
// the provider until it is closed.
func TestFakeProviderCutInterrupts(t *testing.T) {
	f := newFixture(t, config{kind: onFake, real: true})
	id := f.open("alice")
	done := make(chan resp, 1)
	go func() { done <- f.say("alice", id, conformance.FakeHold) }()
	f.rec.waitFor(t, provider.TypeTurnStart, func(e event.Event) bool { return e.Meta.SessionID == id }, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.h.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "cut") {
		t.Fatalf("shutdown: %v", err)
	}
	want(t, <-done, http.StatusServiceUnavailable, "turn_cut")
	st := openStore(t, f.dsn)
	defer st.Close()
	ts, err := st.Turns(context.Background(), owners["alice"], id)
	if err != nil || len(ts) != 1 || ts[0].Outcome != host.TurnCut {
		t.Fatalf("turn log: %+v %v", ts, err)
	}
	f.closed = true
	f.stop()
	_ = f.reg.Dispose(context.Background())
}

// A restarted host re-opens a conversation with Resume, from the binding
// in the store (the fake's conversations live in its instance, so the
// instance outlives the first host).
func TestFakeProviderRestartResumes(t *testing.T) {
	dsn := t.TempDir() + "/agentry.db"
	f1 := newFixture(t, config{kind: onFake, dsn: dsn, keepReg: true})
	id := f1.open("alice")
	want(t, f1.say("alice", id, "one"), 200, "")
	c, err := f1.store.Info(context.Background(), owners["alice"], id)
	if err != nil || c.Binding == "" || c.Provider != conformance.FakeKey {
		t.Fatalf("stored: %+v %v", c, err)
	}
	reg := f1.reg
	f1.shutdown()
	f2 := newFixture(t, config{kind: onFake, dsn: dsn, tokens: f1.tokens, reg: reg})
	want(t, f2.say("alice", id, "two"), 200, "")
	c2, _ := f2.store.Info(context.Background(), owners["alice"], id)
	if c2.Binding != c.Binding {
		t.Fatalf("the binding changed across the restart: %q → %q", c.Binding, c2.Binding)
	}
}

// flakyDriver is the fake behind a wrapper whose sessions fail their
// first close, block their second until the test lets go, and close on
// it.
type flakyDriver struct {
	*conformance.FakeDriver
	closes  atomic.Int32
	letGo   chan struct{}
	waiting chan struct{}
}

func (d *flakyDriver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	m, err := d.FakeDriver.Materialize(ctx, def)
	if err != nil {
		return m, err
	}
	caps := conformance.FakeCapabilities()
	caps.Sessions.Branch = provider.BranchUnsupported
	caps.Turns = provider.TurnCapabilities{}
	caps.Sessions.ResumePending = false
	caps.Interactions = provider.InteractionSupport{}
	m.Capabilities = caps
	m.Adapter = flakyAdapter{d: d, inner: m.Adapter}
	return m, nil
}

type flakyAdapter struct {
	d     *flakyDriver
	inner provider.Adapter
}

func (a flakyAdapter) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	s, err := a.inner.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	return flakySession{d: a.d, inner: s}, nil
}

func (a flakyAdapter) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	s, err := a.inner.(provider.Resumer).Resume(ctx, req)
	if err != nil {
		return nil, err
	}
	return flakySession{d: a.d, inner: s}, nil
}

type flakySession struct {
	d     *flakyDriver
	inner provider.Session
}

func (s flakySession) Binding() provider.Binding { return s.inner.Binding() }
func (s flakySession) RunTurn(ctx context.Context, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
	return s.inner.RunTurn(ctx, req)
}
func (s flakySession) Resolve(ctx context.Context, res provider.Resolution) iter.Seq2[provider.Output, error] {
	return s.inner.Resolve(ctx, res)
}
func (s flakySession) Close(ctx context.Context, r provider.CloseReason) error {
	switch s.d.closes.Add(1) {
	case 1:
		return errors.New("the sandbox would not let go")
	case 2:
		close(s.d.waiting)
		select {
		case <-s.d.letGo:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.inner.Close(ctx, r)
}

// A close that fails is recorded (turn log, event, metric) and retried
// through its CleanupError until it succeeds; nothing names a key.
func TestCleanupFailureIsRetried(t *testing.T) {
	d := &flakyDriver{FakeDriver: conformance.NewFakeDriver(), letGo: make(chan struct{}), waiting: make(chan struct{})}
	f := newFixture(t, config{provider: d, opt: host.Options{CleanupRetry: time.Millisecond}})
	id := f.open("alice")
	want(t, f.say("alice", id, "hello"), 200, "")
	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), 204, "")
	<-d.waiting // the retry is under way
	if m := f.metrics(); !strings.Contains(m, "agentry_host_cleanups_pending 1") {
		t.Fatalf("metrics while the retry runs lack the pending cleanup")
	}
	failed := f.rec.ofType(host.TypeCleanupFailed)
	if len(failed) != 1 || failed[0].Meta.SessionID != id {
		t.Fatalf("cleanup_failed events: %+v", failed)
	}
	p := failed[0].Payload.(*host.CleanupEvent)
	if p.Provider != conformance.FakeKey || p.Closing != "close" || p.Attempt != 1 || !p.Retrying || !strings.Contains(p.Error, "would not let go") {
		t.Fatalf("cleanup_failed payload: %+v", p)
	}
	close(d.letGo)
	f.rec.waitFor(t, host.TypeCleanupDone, func(e event.Event) bool { return e.Meta.SessionID == id }, 10*time.Second)
	if n := d.closes.Load(); n != 2 {
		t.Fatalf("%d closes: want one failure and one retry", n)
	}
	if m := f.metrics(); !strings.Contains(m, "agentry_host_cleanups_pending 0") {
		t.Fatal("metrics still count a pending cleanup after it succeeded")
	}
	r := f.do("GET", "/v1/sessions/"+id+"/turns", "alice", nil)
	for _, w := range []string{`"outcome":"cleanup_failed"`, `"outcome":"cleaned_up"`, `"kind":"close","outcome":"closed"`} {
		if !strings.Contains(string(r.body), w) {
			t.Fatalf("the turn log lacks %s: %s", w, r.body)
		}
	}
}

// A cleanup still failing at shutdown gets one more try there, and
// Shutdown says what is left.
func TestCleanupRetriedAtShutdown(t *testing.T) {
	d := &flakyDriver{FakeDriver: conformance.NewFakeDriver(), letGo: make(chan struct{}), waiting: make(chan struct{})}
	close(d.letGo)
	f := newFixture(t, config{provider: d, opt: host.Options{CleanupRetry: time.Hour}})
	id := f.open("alice")
	want(t, f.say("alice", id, "hello"), 200, "")
	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), 204, "")
	if err := f.h.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if n := d.closes.Load(); n != 2 {
		t.Fatalf("%d closes: the shutdown did not retry", n)
	}
	if ev := f.rec.ofType(host.TypeCleanupDone); len(ev) != 1 {
		t.Fatalf("cleanup_done events: %d", len(ev))
	}
}

// Host tools are lent to every session: the provider calls one through
// its binding, the call carries the conversation's identity and the call
// scope only, and another session's binding is its own.
func TestHostToolsAreLent(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) {
		var mu sync.Mutex
		var seen []tool.Identity
		echo := tool.Func("conformance_echo", "says what it is told", func(ctx context.Context, c *tool.Call, in struct {
			Text string `json:"text"`
		}) (string, error) {
			mu.Lock()
			seen = append(seen, *c.Identity)
			mu.Unlock()
			if len(c.Scopes) != 1 || c.Scopes[0] != "call" {
				return "", errors.New("a lent call must honour the call scope only")
			}
			return "echo " + in.Text, nil
		})
		f := newFixture(t, config{kind: kind, opt: host.Options{HostTools: []tool.Tool{echo}}})
		a := f.open("alice")
		msg := `call conformance_echo {"text":"hi"}`
		if kind == onFake {
			msg = conformance.FakeCall + " conformance_echo " + `{"text":"hi"}`
		}
		r := f.say("alice", a, msg)
		want(t, r, 200, "")
		out, _ := r.json(t)["output"].(string)
		if !strings.Contains(out, "echo hi") {
			t.Fatalf("the lent tool's answer: %s", r.body)
		}
		b := f.open("bob")
		want(t, f.say("bob", b, msg), 200, "")
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2 || seen[0] != (tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: a}) ||
			seen[1] != (tool.Identity{Tenant: "acme", Principal: "bob", ConversationID: b}) {
			t.Fatalf("identities the lent tool saw: %+v", seen)
		}
	})
}

// A session interaction outside a turn waits in the conversation: GET
// shows it, the decision endpoint answers it (checked against its
// options), another principal cannot see or answer it, and closing the
// conversation declines what is left.
func TestSessionInteractions(t *testing.T) {
	d := conformance.NewFakeDriver()
	f := newFixture(t, config{provider: d})
	id := f.open("alice")
	// Not live on the host yet: the store tells the owner's (nothing
	// waits) from another's or a missing one (404).
	want(t, f.do("POST", "/v1/sessions/"+id+"/decision", "alice", `{"interaction":"int-0","answer":"x"}`), 409, "no_pending_interaction")
	want(t, f.do("POST", "/v1/sessions/"+id+"/decision", "bob", `{"interaction":"int-0","answer":"x"}`), 404, "not_found")
	want(t, f.do("POST", "/v1/sessions/not-a-session-id/decision", "alice", `{"interaction":"int-0","answer":"x"}`), 404, "not_found")
	want(t, f.say("alice", id, "hello"), 200, "") // the session is open now

	ask := func(iid string) chan provider.InteractionReply {
		got := make(chan provider.InteractionReply, 1)
		go func() {
			r, err := d.Interact(context.Background(), id, provider.Interaction{ID: iid, Kind: provider.InteractionQuestion,
				Message: "Which database?", Options: []string{"staging", "prod"}})
			if err != nil {
				r.Answer = "error: " + err.Error()
			}
			got <- r
		}()
		f.rec.waitFor(t, provider.TypeInteraction, func(e event.Event) bool {
			p, _ := e.Payload.(*provider.InteractionEvent)
			return p != nil && p.InteractionID == iid
		}, 10*time.Second)
		return got
	}
	// The provider's event comes just before the host holds the question:
	// read the session until it shows it (bounded).
	shown := func(iid string) map[string]any {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			m := f.do("GET", "/v1/sessions/"+id, "alice", nil).json(t)
			if it, ok := m["interaction"].(map[string]any); ok && it["id"] == iid {
				return it
			}
		}
		t.Fatalf("the session never showed interaction %s", iid)
		return nil
	}
	got := ask("int-1")
	view := shown("int-1")
	if view["id"] != "int-1" || view["kind"] != "question" || view["message"] != "Which database?" {
		t.Fatalf("the interaction as GET shows it: %v", view)
	}
	if m := f.do("GET", "/v1/sessions/"+id, "bob", nil); m.status != 404 {
		t.Fatalf("bob sees alice's session: %d", m.status)
	}
	decide := func(who, body string) resp {
		return f.do("POST", "/v1/sessions/"+id+"/decision", who, body)
	}
	want(t, decide("bob", `{"interaction":"int-1","answer":"prod"}`), 404, "not_found")
	want(t, decide("alice", `{"interaction":"int-1","answer":"dev"}`), 400, "invalid_field")
	want(t, decide("alice", `{"interaction":"int-9","answer":"prod"}`), 409, "no_pending_interaction")
	want(t, decide("alice", `{"interaction":"int-1"}`), 400, "missing_field")
	r := decide("alice", `{"interaction":"int-1","answer":"staging"}`)
	want(t, r, 200, "")
	if rep := <-got; rep.Answer != "staging" || rep.Declined {
		t.Fatalf("the provider heard: %+v", rep)
	}
	want(t, decide("alice", `{"interaction":"int-1","answer":"staging"}`), 409, "no_pending_interaction")

	// Declined by the person, then one left open when the conversation closes.
	got = ask("int-2")
	shown("int-2")
	want(t, decide("alice", `{"interaction":"int-2","approve":false}`), 200, "")
	if rep := <-got; !rep.Declined || rep.Answer != "" {
		t.Fatalf("a decline reached the provider as %+v", rep)
	}
	got = ask("int-3")
	shown("int-3")
	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), 204, "")
	if rep := <-got; !rep.Declined && !strings.HasPrefix(rep.Answer, "error:") {
		t.Fatalf("an interaction left at close reached the provider as %+v", rep)
	}
	want(t, decide("alice", `{"interaction":"int-3","answer":"prod"}`), 409, "no_pending_interaction")
	want(t, decide("bob", `{"interaction":"int-3","answer":"prod"}`), 404, "not_found")
}

// An interaction raised inside a turn is sent on the turn's stream, and
// answered through the decision endpoint while the turn waits.
func TestSessionInteractionOnTheStream(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	id := f.open("alice")
	req, _ := http.NewRequest("POST", f.url+"/v1/sessions/"+id+"/turns", strings.NewReader(`{"message":"`+conformance.FakeInteract+`"}`))
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	var iid string
	for iid == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before the interaction: %v", err)
		}
		if line == "event: "+host.InteractionEvent+"\n" {
			data, _ := br.ReadString('\n')
			var v struct{ ID, Message string }
			if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &v); err != nil || v.Message != conformance.FakeQuestion {
				t.Fatalf("the interaction event: %v %s", err, data)
			}
			iid = v.ID
		}
	}
	want(t, f.do("POST", "/v1/sessions/"+id+"/decision", "alice", `{"interaction":"`+iid+`","answer":"`+conformance.FakeYes+`"}`), 200, "")
	evs := readSSE(t, br)
	last := evs[len(evs)-1]
	if last.name != host.ResultEvent || !strings.Contains(string(last.data), conformance.FakeYes) {
		t.Fatalf("the turn's result: %s %s", last.name, last.data)
	}
}

// Two principals — and one principal name in two tenants — cannot see or
// touch each other's sessions on the fake either, and trying changes
// nothing.
func TestFakeProviderPrincipalsAreIsolated(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	a := f.open("alice")
	want(t, f.say("alice", a, conformance.FakeAsk), http.StatusAccepted, "")
	for _, who := range []string{"bob", "carol"} {
		for _, probe := range []struct{ method, path string }{
			{"GET", ""}, {"GET", "/messages"}, {"GET", "/turns"}, {"GET", "/tool-sessions"}, {"GET", "/timeline"}, {"DELETE", ""},
		} {
			want(t, f.do(probe.method, "/v1/sessions/"+a+probe.path, who, nil), http.StatusNotFound, "not_found")
		}
		want(t, f.say(who, a, "hi"), http.StatusNotFound, "not_found")
		want(t, f.decide(who, a, true), http.StatusNotFound, "not_found")
		want(t, f.do("POST", "/v1/sessions/"+a+"/decision", who, `{"interaction":"x","answer":"y"}`), http.StatusNotFound, "not_found")
		if r := f.do("GET", "/v1/sessions", who, nil); strings.Contains(string(r.body), a) {
			t.Fatalf("%s's list shows alice's session: %s", who, r.body)
		}
	}
	if m := f.do("GET", "/v1/sessions/"+a, "alice", nil).json(t); m["state"] != "paused" {
		t.Fatalf("alice's session changed: %v", m)
	}
	r := f.decide("alice", a, true)
	want(t, r, 200, "")
	if m := r.json(t); m["output"] != "approved" {
		t.Fatalf("alice's decision: %s", r.body)
	}
}

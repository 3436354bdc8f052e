package host_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// A restart resumes conversations and paused turns from the store; the
// live sessions re-open.
func TestRestartResumes(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			dsn := sk.dsn(t)
			ws := newWorkspaces(t)
			f1 := newFixture(t, config{dsn: dsn, ws: ws})
			a := f1.open("alice")
			want(t, f1.say("alice", a, "hello"), 200, "")
			want(t, f1.say("alice", a, `call files {"op":"write","name":"f","text":"before"}`), 200, "")
			want(t, f1.say("alice", a, `call deploy {"target":"prod"}`), http.StatusAccepted, "")
			f1.shutdown()
			if open, opened, closed := ws.stats(); open != 0 || opened != closed {
				t.Fatalf("after shutdown: %d open, %d opened, %d closed", open, opened, closed)
			}

			f2 := newFixture(t, config{dsn: dsn, ws: ws, tokens: f1.tokens}) // a new process, the same people
			r := f2.do("GET", "/v1/sessions/"+a, "alice", nil)
			if m := r.json(t); m["state"] != "paused" || m["turns"] != 3.0 {
				t.Fatalf("after restart: %s", r.body)
			}
			want(t, f2.say("alice", a, "hi"), http.StatusConflict, "awaiting_decision")
			r = f2.decide("alice", a, true)
			want(t, r, 200, "")
			if m := r.json(t); m["output"] != "tool said: deployed prod" {
				t.Fatalf("resumed turn: %s", r.body)
			}
			// The conversation goes on; the old sandbox is gone, a new one opens.
			r = f2.say("alice", a, `call files {"op":"read","name":"f"}`)
			if m := r.json(t); m["output"] != "tool said: no such file" {
				t.Fatalf("after restart: %s", r.body)
			}
			r = f2.do("GET", "/v1/sessions/"+a+"/messages", "alice", nil)
			if !strings.Contains(string(r.body), `"hello"`) {
				t.Fatalf("transcript after restart: %s", r.body)
			}
		})
	}
}

// Shutdown: ready fails and new requests get 503 at once; a turn in flight
// finishes and is saved; every tool session closes; the store closes.
func TestShutdownDrains(t *testing.T) {
	f := newFixture(t, config{real: true})
	a := f.open("alice")
	want(t, f.say("alice", a, `call files {"op":"write","name":"f","text":"x"}`), 200, "")
	want(t, f.do("GET", "/readyz", "", nil), 200, "")

	var wg sync.WaitGroup
	var inflight resp
	wg.Go(func() { inflight = f.say("alice", a, "call gate") })
	<-f.gate.entered

	f.h.Drain() // what Shutdown does first; from here the host is draining
	shut := make(chan error, 1)
	go func() { shut <- f.h.Shutdown(context.Background()) }()

	r := f.do("GET", "/readyz", "", nil)
	want(t, r, http.StatusServiceUnavailable, "shutting_down")
	want(t, f.do("GET", "/healthz", "", nil), 200, "")
	r = f.do("POST", "/v1/sessions", "alice", nil)
	want(t, r, http.StatusServiceUnavailable, "shutting_down")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}

	close(f.gate.release)
	wg.Wait()
	want(t, inflight, 200, "")
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if open, opened, closed := f.ws.stats(); open != 0 || opened != closed {
		t.Fatalf("after shutdown: %d open, %d opened, %d closed", open, opened, closed)
	}
	// The answered turn is in the store.
	st := openStore(t, f.dsn)
	defer st.Close()
	c, err := st.Load(context.Background(), owners["alice"], a)
	if err != nil || c.Turns != 2 || c.State != host.StateOpen {
		t.Fatalf("stored after drain: %+v, %v", c, err)
	}
	ts, _ := st.Turns(context.Background(), owners["alice"], a)
	if len(ts) != 2 || ts[1].Outcome != host.TurnAnswered {
		t.Fatalf("turn log after drain: %+v", ts)
	}
}

// A turn still running at the drain bound is cut: recorded as failed
// (outcome cut), its client told so, its tool sessions closed.
func TestShutdownCutsTurns(t *testing.T) {
	f := newFixture(t, config{real: true})
	a := f.open("alice")
	var wg sync.WaitGroup
	var cut resp
	wg.Go(func() { cut = f.say("alice", a, "call gate") })
	<-f.gate.entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the drain bound has already passed
	err := f.h.Shutdown(ctx)
	if err == nil || !strings.Contains(err.Error(), "cut") {
		t.Fatalf("shutdown: %v", err)
	}
	wg.Wait()
	want(t, cut, http.StatusServiceUnavailable, "turn_cut")
	if !f.h.Draining() {
		t.Fatal("Shutdown left the host not draining")
	}
	want(t, f.do("GET", "/readyz", "", nil), http.StatusServiceUnavailable, "shutting_down")
	if open, opened, closed := f.ws.stats(); open != 0 || opened != closed {
		t.Fatalf("after the cut: %d open, %d opened, %d closed", open, opened, closed)
	}
	st := openStore(t, f.dsn)
	defer st.Close()
	ts, err := st.Turns(context.Background(), owners["alice"], a)
	if err != nil || len(ts) != 1 || ts[0].Outcome != host.TurnCut || ts[0].Error == "" {
		t.Fatalf("turn log after the cut: %+v, %v", ts, err)
	}
	if ev := f.rec.ofType(host.TypeTurnFailed); len(ev) != 1 || ev[0].Meta.SessionID != a {
		t.Fatalf("turn_failed events: %+v", ev)
	}
	f.closed = true
	f.stop()
}

// A streamed turn cut by shutdown still ends with a result.
func TestShutdownCutsStream(t *testing.T) {
	f := newFixture(t, config{real: true})
	a := f.open("alice")
	req, _ := http.NewRequest("POST", f.url+"/v1/sessions/"+a+"/turns", strings.NewReader(`{"message":"call gate"}`))
	req.Header.Set("Authorization", "Bearer "+f.tokens["alice"])
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-f.gate.entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = f.h.Shutdown(ctx)
	evs := readSSE(t, res.Body)
	last := evs[len(evs)-1]
	if last.name != host.ResultEvent || !strings.Contains(string(last.data), "turn_cut") {
		t.Fatalf("last event %s %s", last.name, last.data)
	}
	f.closed = true
	f.stop()
}

// Health and readiness, whatever the provider.
func TestHealthAndReadiness(t *testing.T) {
	eachProvider(t, func(t *testing.T, kind string) { healthAndReadiness(t, newFixture(t, config{kind: kind})) })
}

func healthAndReadiness(t *testing.T, f *fixture) {
	want(t, f.do("GET", "/healthz", "", nil), 200, "")
	want(t, f.do("GET", "/readyz", "", nil), 200, "")
	// A store that cannot be reached makes the host unready (and only that).
	f.store.Close()
	r := f.do("GET", "/readyz", "", nil)
	want(t, r, http.StatusServiceUnavailable, "store_unavailable")
	want(t, f.do("GET", "/healthz", "", nil), 200, "")
	r = f.do("POST", "/v1/sessions", "alice", nil)
	want(t, r, http.StatusServiceUnavailable, "store_unavailable")
	if strings.Contains(string(r.body), "sql") {
		t.Fatalf("the store's error leaked to the client: %s", r.body)
	}
}

// Metrics: turns, durations, live tool sessions, closes by reason,
// failures.
func TestMetrics(t *testing.T) {
	f := newFixture(t, config{})
	a := f.open("alice")
	want(t, f.say("alice", a, "hello"), 200, "")
	want(t, f.say("alice", a, `call files {"op":"write","name":"f","text":"x"}`), 200, "")
	want(t, f.say("alice", a, "fail"), 500, "turn_failed")
	body := f.metrics()
	for _, w := range []string{
		`agentry_host_turns_total{kind="message",outcome="answered"} 2`,
		`agentry_host_turns_total{kind="message",outcome="failed"} 1`,
		`agentry_host_turn_duration_seconds_count{kind="message",outcome="answered"} 2`,
		`agentry_tool_sessions_live 1`,
		`agentry_host_failures_total{what="turn"} 1`,
		`agentry_host_sessions_opened_total 1`,
		`agentry_host_sessions_in_memory 1`,
	} {
		if !strings.Contains(body, w) {
			t.Errorf("metrics lack %q", w)
		}
	}
	want(t, f.do("DELETE", "/v1/sessions/"+a, "alice", nil), 204, "")
	body = f.metrics()
	for _, w := range []string{`agentry_tool_session_closes_total{reason="session-end"} 1`, `agentry_tool_sessions_live 0`} {
		if !strings.Contains(body, w) {
			t.Errorf("metrics lack %q", w)
		}
	}
}

func (f *fixture) metrics() string {
	f.t.Helper()
	res, err := http.Get(f.url + "/metrics")
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		f.t.Fatalf("metrics: %d", res.StatusCode)
	}
	return string(b)
}

func TestNewRefusesWhatItCannotRun(t *testing.T) {
	f := newFixture(t, config{})
	inst, err := f.reg.Instance("agents")
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, filepath.Join(t.TempDir(), "x.db"))
	defer st.Close()
	auth, _ := tokensFor(t, nil)
	for _, c := range []struct {
		opt  host.Options
		want string
	}{
		{host.Options{Store: st, Auth: auth}, "provider"},
		{host.Options{Provider: inst, Adapter: inst.Adapter(), Store: st, Auth: auth}, "not both"},
		{host.Options{Provider: inst, Auth: auth}, "Store"},
		{host.Options{Provider: inst, Store: st}, "Auth"},
		{host.Options{Provider: inst, Store: st, Auth: auth, MaxTurns: -1}, "negative"},
		{host.Options{Provider: inst, Store: st, Auth: auth, HostTools: []tool.Tool{nil}}, "nil"},
	} {
		if _, err := host.New(c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want a refusal naming %s: %v", c.want, err)
		}
	}
	// One router serves one host.
	r := host.NewEventSink()
	h1, err := host.New(host.Options{Adapter: inst.Adapter(), Store: st, Auth: auth, EventSink: r, EvictEvery: -1, RetentionEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	_ = h1
	if _, err := host.New(host.Options{Adapter: inst.Adapter(), Store: st, Auth: auth, EventSink: r, EvictEvery: -1, RetentionEvery: -1}); err == nil {
		t.Fatal("a router shared by two hosts")
	}
}

package agent_test

// One test for each defect the reference had that agentry must not
// (spec/toolsession.md, "Known defects in the reference").

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// Defect 1: run-scoped sessions were keyed on a run id that changed at
// resume, so a session opened before a pause was not reused after it.
func TestKnownDefectResumeKeepsTheRunIDSoRunSessionsAreReused(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, rec := newAgent(t, agent.Options{Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	res, _ := a.Run(bg(), agent.Input{Message: "x", Identity: id})
	res2, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true})
	if err != nil || res2.RunID != res.RunID {
		t.Fatalf("%v: run %s became %s", err, res.RunID, res2.RunID)
	}
	started, reused := rec.of(tool.TypeSessionStarted), rec.of(tool.TypeSessionReused)
	if len(started) != 1 || len(reused) != 1 {
		t.Fatalf("started %d reused %d: the session was not reused across the pause", len(started), len(reused))
	}
	want := toolsession.HashKey("t=acme/p=alice/r=" + res.RunID)
	if started[0].Payload.(*tool.SessionOpened).KeyHash != want || reused[0].Payload.(*tool.SessionOpened).KeyHash != want {
		t.Fatal("the key changed across the pause")
	}
	if _, opened, _ := w.stats(); opened != 1 {
		t.Fatalf("opened %d workspaces", opened)
	}
}

// Defect 2: call-scoped cleanups of a call that paused were never fired at
// resume.
func TestKnownDefectCallScopedSessionsOfAPausedCallCloseAtResume(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	m := scripted.New(calls(call("migrate", `{}`)), answer("fine, not migrating"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{askingTool(w)}})
	res, err := a.Run(bg(), agent.Input{Message: "x"})
	if err != nil || res.Paused == nil {
		t.Fatal(res, err)
	}
	dirs := w.dirs()
	if len(dirs) != 1 {
		t.Fatalf("%d open at the pause", len(dirs))
	}
	if _, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: false}); err != nil {
		t.Fatal(err)
	}
	cl := rec.closeEvents()
	if len(cl) != 1 || cl[0].Reason != "call-end" || cl[0].Scope != "call" {
		t.Fatalf("the paused call's session was not closed at resume: %+v", cl)
	}
	if _, err := os.Stat(dirs[0]); !os.IsNotExist(err) {
		t.Fatal("the paused call's workspace outlived the resume")
	}
	if a.LiveToolSessions() != 0 {
		t.Fatal("sessions left live")
	}
}

// Defect 3: after a resume, a tool could be handed the previous run's
// identity.
func TestKnownDefectAResumeNeverHandsAToolThePreviousRunsIdentity(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, _ := newAgent(t, agent.Options{Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	alice := &tool.Identity{Tenant: "acme", Principal: "alice"}
	bob := &tool.Identity{Tenant: "globex", Principal: "bob"}

	pausedAlice, _ := a.Run(bg(), agent.Input{Message: "x", Identity: alice})
	pausedNobody, _ := a.Run(bg(), agent.Input{Message: "x"})
	// Bob runs a whole turn in between: he is now the "last" identity.
	bobs, _ := a.Run(bg(), agent.Input{Message: "x", Identity: bob})
	if _, err := a.Resume(bg(), bobs.Paused.Checkpoint, agent.Decision{Approve: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resume(bg(), pausedAlice.Paused.Checkpoint, agent.Decision{Approve: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resume(bg(), pausedNobody.Paused.Checkpoint, agent.Decision{Approve: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range w.seen() {
		var want *tool.Identity
		switch c.RunID {
		case pausedAlice.RunID:
			want = alice
		case bobs.RunID:
			want = bob
		case pausedNobody.RunID:
			want = nil
		}
		if (want == nil) != (c.Identity == nil) || (want != nil && *want != *c.Identity) {
			t.Fatalf("run %s handed %+v, want %+v", c.RunID, c.Identity, want)
		}
	}
}

// clock is an injected clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Defect 4: a session expiring in the idle sweep could be handed out once
// more, because the lookup happened before the sweep.
func TestKnownDefectAnIdleSessionIsNeverHandedOutAgain(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	clk := &clock{now: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}
	m := scripted.New(calls(call("notes", `{"append":"old secret"}`)), answer("ok"), calls(call("notes", `{}`)), answer("ok"))
	a, rec := newAgent(t, agent.Options{Model: m, Now: clk.Now, SessionIdle: 10 * time.Minute, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeSession)}})
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	res, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s1", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	old := w.dirs()
	clk.Advance(11 * time.Minute)
	res, err = a.Run(bg(), agent.Input{Message: "y", SessionID: "s1", Identity: id, Conversation: res.Conversation})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SettleToolSessions(bg()); err != nil {
		t.Fatal(err)
	}
	if msg := toolMessages(res.Conversation)[1]; msg.Content != "(empty)" {
		t.Fatalf("the expired session was handed out again: %q", msg.Content)
	}
	seen := w.seen()
	if seen[1].Reused {
		t.Fatal("the door reported a reuse of an expired session")
	}
	if _, err := os.Stat(old[0]); !os.IsNotExist(err) {
		t.Fatal("the expired workspace was not removed")
	}
	cl := rec.closeEvents()
	if len(cl) != 1 || cl[0].Reason != "idle" {
		t.Fatalf("%+v", cl)
	}
	if a.LiveToolSessions() != 1 {
		t.Fatalf("%d live", a.LiveToolSessions())
	}
	// A host can sweep between turns too: nothing installs a timer.
	clk.Advance(11 * time.Minute)
	a.SweepIdleToolSessions()
	if err := a.SettleToolSessions(bg()); err != nil || a.LiveToolSessions() != 0 {
		t.Fatalf("sweep: %v, %d live", err, a.LiveToolSessions())
	}
}

// Defect 5: teardown failures were silent (over the reference's MCP door).
// Over this door every failure, panic and timeout is an event.
func TestKnownDefectTeardownFailuresAreNeverSilent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		defer close(hang)
		cleanups := map[string]func(context.Context) error{
			"fails":  func(context.Context) error { return errors.New("sandbox api: 500") },
			"panics": func(context.Context) error { panic("nil handle") },
			"hangs":  func(context.Context) error { <-hang; return nil },
		}
		var ts []tool.Tool
		var cs []callSpec
		for name, cleanup := range cleanups {
			ts = append(ts, tool.Func(name, "registers a bad cleanup", func(_ context.Context, c *tool.Call, _ struct{}) (string, error) {
				_, err := c.OnTeardown(cleanup, toolsession.Options{Scope: toolsession.ScopeCall})
				return "ok", err
			}))
			cs = append(cs, callSpec{name, `{}`})
		}
		a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(toCalls(cs)...), answer("ok")), Tools: ts, TeardownTimeout: 2 * time.Second})
		start := time.Now()
		res, err := a.Run(bg(), agent.Input{Message: "x"})
		if err != nil || res.Output != "ok" {
			t.Fatal("a failing teardown must not fail the run", err)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("the hung cleanup held the run for %s, want the 2s timeout", took)
		}
		failed := rec.of(tool.TypeSessionCloseFailed)
		classes := map[string]string{}
		for _, e := range failed {
			p := e.Payload.(*tool.SessionClosed)
			if p.Error == "" || e.Meta.RunID != res.RunID {
				t.Fatalf("a failure without its error or run: %+v %+v", p, e.Meta)
			}
			classes[p.Tool] = p.ErrorClass
		}
		if classes["fails"] != "error" || classes["panics"] != "panic" || classes["hangs"] != "timeout" {
			t.Fatalf("classes %v", classes)
		}
	})
}

type llmToolCall = llm.ToolCall

type callSpec struct{ name, args string }

func toCalls(cs []callSpec) []llmToolCall {
	var out []llmToolCall
	for _, c := range cs {
		out = append(out, call(c.name, c.args))
	}
	return out
}

// Defect 6: teardown events fired after the run were stamped with the last
// run, not the one that opened the session.
func TestKnownDefectLateTeardownEventsCarryTheOriginRun(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	m := scripted.New(calls(call("notes", `{"append":"x"}`)), answer("ok"), calls(call("notes", `{}`)), answer("ok"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeSession)}})
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	opener, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s1", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	// Later runs: one joins the session, one is another conversation.
	if _, err := a.Run(bg(), agent.Input{Message: "y", SessionID: "s1", Identity: id, Conversation: opener.Conversation}); err != nil {
		t.Fatal(err)
	}
	last, err := a.Run(bg(), agent.Input{Message: "z", SessionID: "s2", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	a.CloseToolSessions(bg(), "s1")
	var closes []event.Event
	for _, e := range rec.of(tool.TypeSessionClosed) {
		if e.Meta.SessionID == "s1" {
			closes = append(closes, e)
		}
	}
	if len(closes) != 1 || closes[0].Meta.RunID != opener.RunID || closes[0].Meta.RunID == last.RunID {
		t.Fatalf("close meta %+v; the opener was %s, the last run %s", closes, opener.RunID, last.RunID)
	}
}

// Defect 7: "zero-cost" was not — a tier was built on the first tool call.
func TestKnownDefectNoTierIsBuiltUntilAToolRegisters(t *testing.T) {
	t.Parallel()
	echo := tool.Func("echo", "echo", func(context.Context, *tool.Call, struct{}) (string, error) { return "e", nil })
	a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("echo", `{}`), call("echo", `{}`)), answer("ok")), Tools: []tool.Tool{echo}})
	if _, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if a.CloseToolSessions(bg(), "s") != 0 || a.LiveToolSessions() != 0 || a.SettleToolSessions(bg()) != nil {
		t.Fatal("closing with no tier")
	}
	a.SweepIdleToolSessions()
	if agent.TierBuilt(a) {
		t.Fatal("a tier was built though no tool registered")
	}
	if err := a.Shutdown(bg()); err != nil || agent.TierBuilt(a) {
		t.Fatalf("shutdown: %v, built %v", err, agent.TierBuilt(a))
	}
	if len(rec.of(tool.TypeSessionStarted, tool.TypeSessionClosed)) != 0 {
		t.Fatal("session events without sessions")
	}

	// Many first registrations at once build exactly one tier.
	w := newWorkspaces(t)
	var cs []llmToolCall
	for range 16 {
		cs = append(cs, call("scratch", `{}`))
	}
	b, _ := newAgent(t, agent.Options{Model: scripted.New(calls(cs...), answer("ok")), Tools: []tool.Tool{w.tool("scratch", toolsession.ScopeShutdown)}, MaxParallelTools: 16})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := b.Run(bg(), agent.Input{Message: "x"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if !agent.TierBuilt(b) || b.LiveToolSessions() != 64 {
		t.Fatalf("built %v, live %d: every registration must land in the one tier", agent.TierBuilt(b), b.LiveToolSessions())
	}
	if err := b.Shutdown(bg()); err != nil {
		t.Fatal(err)
	}
	if open, opened, closed := w.stats(); open != 0 || opened != 64 || closed != 64 {
		t.Fatal(fmt.Sprint(open, opened, closed))
	}
}

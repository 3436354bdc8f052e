package agent_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestEveryCallIsToldAllFourScopes(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	a, _ := newAgent(t, agent.Options{Model: scripted.New(calls(call("notes", `{}`)), answer("ok")), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeCall)}})
	if _, err := a.Run(bg(), agent.Input{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	want := []toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession, toolsession.ScopeShutdown}
	if got := w.seen()[0].Scopes; len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("scopes %v", got)
	}
}

func TestCallScopeClosesWhenTheCallEnds(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	m := &probe{Model: scripted.New(calls(call("scratch", `{"append":"tmp"}`)), calls(call("scratch", `{}`)), answer("ok")),
		before: func(n int, _ llm.Request) {
			// By the time the model hears back, the call's workspace is gone.
			if open, _, _ := w.stats(); n > 1 && open != 0 {
				t.Errorf("model call %d: %d call-scoped workspaces still open", n, open)
			}
		}}
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("scratch", toolsession.ScopeCall)}})
	res, err := a.Run(bg(), agent.Input{Message: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// A fresh workspace each call: the second call sees an empty note.
	if msgs := toolMessages(res.Conversation); msgs[0].Content != "tmp" || msgs[1].Content != "(empty)" {
		t.Fatalf("%+v", msgs)
	}
	cl := rec.closeEvents()
	if len(cl) != 2 || cl[0].Reason != "call-end" || cl[1].Reason != "call-end" || cl[0].Scope != "call" {
		t.Fatalf("closes %+v", cl)
	}
	if _, opened, closed := w.stats(); opened != 2 || closed != 2 {
		t.Fatalf("opened %d closed %d", opened, closed)
	}
}

func TestRunScopeIsReusedWithinTheRunAndClosedOnceAtTheAnswer(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var dir string
	m := &probe{Model: scripted.New(
		calls(call("notes", `{"append":"a"}`)),
		calls(call("notes", `{"append":"b"}`)),
		calls(call("notes", `{"append":"c"}`)),
		answer("done")),
		before: func(n int, _ llm.Request) {
			if n == 4 {
				d := w.dirs()
				if len(d) != 1 {
					t.Errorf("before the answer %d workspaces are open, want 1", len(d))
					return
				}
				dir = d[0]
			}
		}}
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun)}})
	res, err := a.Run(bg(), agent.Input{Message: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if msgs := toolMessages(res.Conversation); msgs[2].Content != "a | b | c" {
		t.Fatalf("the session was not kept across iterations: %+v", msgs)
	}
	if st, ru := rec.of(tool.TypeSessionStarted), rec.of(tool.TypeSessionReused); len(st) != 1 || len(ru) != 2 || ru[1].Payload.(*tool.SessionOpened).Calls != 3 {
		t.Fatalf("started %d reused %d", len(st), len(ru))
	}
	cl := rec.of(tool.TypeSessionClosed)
	if len(cl) != 1 || cl[0].Payload.(*tool.SessionClosed).Reason != "run-end" || cl[0].Meta.RunID != res.RunID {
		t.Fatalf("closes %+v", cl)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the workspace %s still exists: %v", dir, err)
	}
	// The close happened before the turn ended, so an audit never sees a
	// finished run with its sessions open.
	types := []event.Type{}
	for _, e := range rec.all() {
		types = append(types, e.Type)
	}
	if i, j := indexOf(types, tool.TypeSessionClosed), indexOf(types, event.TypeTurnEnd); i < 0 || j < i {
		t.Fatalf("session_closed at %d, turn_end at %d", i, j)
	}
}

func indexOf(ts []event.Type, t event.Type) int {
	for i, x := range ts {
		if x == t {
			return i
		}
	}
	return -1
}

func TestAFailedRunClosesItsRunScopedSessions(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	// The script runs out after the tool call: the model fails.
	a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("notes", `{"append":"a"}`))), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun)}})
	res, err := a.Run(bg(), agent.Input{Message: "x"})
	if !errors.Is(err, scripted.ErrOutOfSteps) || !strings.Contains(err.Error(), "model failed") {
		t.Fatalf("err = %v", err)
	}
	if open, opened, closed := w.stats(); open != 0 || opened != 1 || closed != 1 {
		t.Fatalf("open %d opened %d closed %d", open, opened, closed)
	}
	cl := rec.of(tool.TypeSessionClosed)
	if len(cl) != 1 || cl[0].Payload.(*tool.SessionClosed).Reason != "run-end" || cl[0].Meta.RunID != res.RunID {
		t.Fatalf("closes %+v", cl)
	}
	if ends := rec.turnEnds(); ends[0].Outcome != event.OutcomeError || !strings.Contains(ends[0].Error, "out of") && !strings.Contains(ends[0].Error, "no step") {
		t.Fatalf("turn end %+v", ends[0])
	}
	if f := rec.of(event.TypeFatal); len(f) != 1 || f[0].Payload.(*event.Fatal).ErrorClass != "model" {
		t.Fatalf("fatal %+v", f)
	}
}

func TestACancelledRunStillClosesItsRunScopedSessions(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	m := &probe{Model: scripted.New(calls(call("notes", `{"append":"a"}`)), answer("never")), before: func(n int, _ llm.Request) {
		if n == 2 {
			cancel() // the person gave up while the model was thinking
		}
	}}
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun)}})
	res, err := a.Run(ctx, agent.Input{Message: "x"})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancelled") || res.RunID == "" {
		t.Fatalf("%+v %v", res, err)
	}
	if open, _, closed := w.stats(); open != 0 || closed != 1 {
		t.Fatalf("open %d closed %d", open, closed)
	}
	w.mu.Lock()
	cerr := w.cleanupCtxErr[0]
	w.mu.Unlock()
	if cerr != nil {
		t.Fatalf("the cleanup was handed the run's cancelled context: %v", cerr)
	}
	if ends := rec.turnEnds(); ends[0].Outcome != event.OutcomeCancelled {
		t.Fatalf("turn end %+v", ends[0])
	}
}

func TestACancelledToolCallClosesItsCallScope(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	hang := tool.Func("hang", "opens a call workspace and waits", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
		if _, err := w.use(c, toolsession.ScopeCall); err != nil {
			return "", err
		}
		cancel()
		<-ctx.Done()
		return "", ctx.Err()
	})
	a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("hang", `{}`)), answer("never")), Tools: []tool.Tool{hang}})
	if _, err := a.Run(ctx, agent.Input{Message: "x"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if open, _, closed := w.stats(); open != 0 || closed != 1 {
		t.Fatalf("open %d closed %d", open, closed)
	}
	if cl := rec.closeEvents(); len(cl) != 1 || cl[0].Reason != "call-end" {
		t.Fatalf("%+v", cl)
	}
}

func TestSessionScopeClosesOnlyWhenTheConversationEnds(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	m := scripted.New(calls(call("notes", `{"append":"hi"}`)), answer("ok"), calls(call("notes", `{"append":"again"}`)), answer("ok"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeSession)}})
	id := &tool.Identity{Tenant: "acme", Principal: "alice"}
	res, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s1", Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.closeEvents()) != 0 || a.LiveToolSessions() != 1 {
		t.Fatal("an answer closed a session-scoped session")
	}
	res, err = a.Run(bg(), agent.Input{Message: "y", SessionID: "s1", Identity: id, Conversation: res.Conversation})
	if err != nil {
		t.Fatal(err)
	}
	if msgs := toolMessages(res.Conversation); msgs[1].Content != "hi | again" {
		t.Fatalf("the second turn did not reuse the session: %+v", msgs)
	}
	// Two more conversations.
	for _, s := range []string{"s2", "s3"} {
		if _, err := a.Run(bg(), agent.Input{Message: "x", SessionID: s, Identity: id}); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.CloseToolSessions(bg(), "s1"); n != 1 {
		t.Fatalf("closing s1 closed %d", n)
	}
	if n := a.CloseToolSessions(bg(), "s1"); n != 0 {
		t.Fatalf("closing s1 twice closed %d", n)
	}
	if n := a.CloseToolSessionsReason(bg(), "s2", toolsession.ReasonEvicted); n != 1 {
		t.Fatalf("evicting s2 closed %d", n)
	}
	if n := a.CloseToolSessions(bg(), ""); n != 1 {
		t.Fatalf(`"" closed %d, want the remaining one`, n)
	}
	reasons := []string{}
	for _, c := range rec.closeEvents() {
		reasons = append(reasons, c.Reason)
	}
	if strings.Join(reasons, ",") != "session-end,evicted,session-end" {
		t.Fatalf("reasons %v", reasons)
	}
	if open, _, _ := w.stats(); open != 0 {
		t.Fatalf("%d open", open)
	}
}

func TestASessionScopeWithoutASessionIsRefusedNotWidened(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	a, _ := newAgent(t, agent.Options{Model: scripted.New(calls(call("notes", `{}`)), answer("ok")), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeSession)}})
	res, err := a.Run(bg(), agent.Input{Message: "x"})
	if err != nil {
		t.Fatal(err)
	}
	msg := toolMessages(res.Conversation)[0]
	if !msg.IsError || !strings.Contains(msg.Content, "session id") {
		t.Fatalf("%+v", msg)
	}
	if _, opened, _ := w.stats(); opened != 0 || a.LiveToolSessions() != 0 {
		t.Fatal("a session-scoped workspace opened without a session")
	}
}

func TestShutdownScopeClosesOnlyAtShutdown(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	m := scripted.New(calls(call("pool", `{}`)), answer("ok"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("pool", toolsession.ScopeShutdown)}})
	if _, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	a.CloseToolSessions(bg(), "s")
	a.CloseToolSessions(bg(), "")
	if open, _, _ := w.stats(); open != 1 {
		t.Fatal("a shutdown-scoped session closed before shutdown")
	}
	if err := a.Shutdown(bg()); err != nil {
		t.Fatal(err)
	}
	if cl := rec.closeEvents(); len(cl) != 1 || cl[0].Reason != "shutdown" {
		t.Fatalf("%+v", cl)
	}
}

package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestShutdownRefusesNewRunsAndIsIdempotent(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("deploy", `{"target":"x"}`)), answer("ok")), Tools: []tool.Tool{deployTool(&ran)}})
	res, _ := a.Run(bg(), agent.Input{Message: "x"})
	if err := a.Shutdown(bg()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(bg(), agent.Input{Message: "x"}); !errors.Is(err, agent.ErrShutdown) {
		t.Fatalf("run after shutdown: %v", err)
	}
	if _, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true}); !errors.Is(err, agent.ErrShutdown) {
		t.Fatalf("resume after shutdown: %v", err)
	}
	if err := a.Shutdown(bg()); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.closes != 1 || rec.flushes != 1 {
		t.Fatalf("closes %d flushes %d", rec.closes, rec.flushes)
	}
}

func TestConcurrentShutdownsShareOne(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("notes", `{}`)), answer("ok")), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeSession)}})
	if _, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := a.Shutdown(bg()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, _, closed := w.stats(); closed != 1 {
		t.Fatalf("closed %d", closed)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.closes != 1 {
		t.Fatalf("sinks closed %d times", rec.closes)
	}
}

func TestShutdownFiresEverySessionThenClosesTheSinks(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	m := scripted.New(
		calls(call("session_notes", `{}`), call("pool", `{}`), call("notes", `{}`)),
		calls(call("deploy", `{"target":"x"}`)),
		answer("never"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{
		w.tool("session_notes", toolsession.ScopeSession), w.tool("pool", toolsession.ScopeShutdown),
		w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	res, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s"})
	if err != nil || res.Paused == nil {
		t.Fatal(res, err)
	}
	if a.LiveToolSessions() != 3 {
		t.Fatalf("%d live before shutdown", a.LiveToolSessions())
	}
	if err := a.Shutdown(bg()); err != nil {
		t.Fatal(err)
	}
	if open, _, closed := w.stats(); open != 0 || closed != 3 || a.LiveToolSessions() != 0 {
		t.Fatalf("open %d closed %d", open, closed)
	}
	for _, c := range rec.closeEvents() {
		if c.Reason != "shutdown" {
			t.Fatalf("%+v", c)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.afterEnd || rec.atClose != len(rec.events) {
		t.Fatal("events arrived after the sinks were closed")
	}
}

func TestShutdownDrainsInFlightRuns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorkspaces(t)
		g := newGate()
		a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("gate", `{}`)), answer("finished")), Tools: []tool.Tool{g.tool(w)}})
		type outcome struct {
			res agent.Result
			err error
		}
		ran := make(chan outcome, 1)
		go func() {
			res, err := a.Run(bg(), agent.Input{Message: "x"})
			ran <- outcome{res, err}
		}()
		<-g.entered
		shut := make(chan error, 1)
		go func() { shut <- a.Shutdown(bg()) }()
		synctest.Wait()
		select {
		case err := <-shut:
			t.Fatalf("shutdown returned while a run was in flight: %v", err)
		default:
		}
		if _, err := a.Run(bg(), agent.Input{Message: "late"}); !errors.Is(err, agent.ErrShutdown) {
			t.Fatalf("a new run during the drain: %v", err)
		}
		close(g.release)
		out := <-ran
		if out.err != nil || out.res.Output != "finished" {
			t.Fatalf("the in-flight run: %+v %v", out.res, out.err)
		}
		if err := <-shut; err != nil {
			t.Fatal(err)
		}
		// The run closed its own session at its answer; shutdown had nothing
		// left.
		if cl := rec.closeEvents(); len(cl) != 1 || cl[0].Reason != "run-end" {
			t.Fatalf("%+v", cl)
		}
	})
}

func TestShutdownCancelsRunsStillInFlightAtItsDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorkspaces(t)
		g := newGate()
		a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("gate", `{}`)), answer("never")), Tools: []tool.Tool{g.tool(w)}})
		ran := make(chan error, 1)
		go func() {
			_, err := a.Run(bg(), agent.Input{Message: "x"})
			ran <- err
		}()
		<-g.entered
		ctx, cancel := context.WithTimeout(bg(), time.Second)
		defer cancel()
		start := time.Now()
		err := a.Shutdown(ctx)
		if err == nil || !strings.Contains(err.Error(), "1 runs were still in flight") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("shutdown: %v", err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("shutdown took %s", took)
		}
		if err := <-ran; !errors.Is(err, agent.ErrShutdown) {
			t.Fatalf("the cut run: %v", err)
		}
		if open, _, closed := w.stats(); open != 0 || closed != 1 {
			t.Fatalf("open %d closed %d", open, closed)
		}
		if ends := rec.turnEnds(); len(ends) != 1 || ends[0].Outcome != event.OutcomeCancelled {
			t.Fatalf("%+v", ends)
		}
	})
}

func TestShutdownBoundsAHungCleanup(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		defer close(hang)
		stuck := tool.Func("stuck", "holds a session whose Stop hangs", func(_ context.Context, c *tool.Call, _ struct{}) (string, error) {
			_, err := c.OnTeardown(func(context.Context) error { <-hang; return nil }, toolsession.Options{Scope: toolsession.ScopeSession})
			return "ok", err
		})
		a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("stuck", `{}`)), answer("ok")), Tools: []tool.Tool{stuck}, TeardownTimeout: 3 * time.Second})
		if _, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s"}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := a.Shutdown(bg()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("shutdown took %s with a 3s teardown timeout", took)
		}
		f := rec.of(tool.TypeSessionCloseFailed)
		if len(f) != 1 || f[0].Payload.(*tool.SessionClosed).ErrorClass != "timeout" || f[0].Payload.(*tool.SessionClosed).Reason != "shutdown" {
			t.Fatalf("%+v", f)
		}
	})
}

// failingSink fails to flush.
type failingSink struct{ recorder }

func (*failingSink) Flush(context.Context) error { return errors.New("disk full") }

func TestShutdownReportsASinkThatFailsAndStillFinishes(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	bad := &failingSink{}
	var heard []error
	var mu sync.Mutex
	a, err := agent.New(agent.Options{Model: scripted.New(calls(call("notes", `{}`)), answer("ok")), Sinks: []event.Sink{bad},
		Tools:   []tool.Tool{w.tool("notes", toolsession.ScopeSession)},
		OnError: func(err error) { mu.Lock(); heard = append(heard, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	err = a.Shutdown(bg())
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("shutdown: %v", err)
	}
	if open, _, _ := w.stats(); open != 0 || bad.closes != 1 {
		t.Fatal("a failing flush stopped the shutdown")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) == 0 {
		t.Fatal("OnError heard nothing")
	}
}

// CancelRun stops one run in flight by its id: the run ends cancelled, its
// error wraps the cause, and its run-scoped sessions close.
func TestCancelRun(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	g := newGate()
	a, rec := newAgent(t, agent.Options{Model: scripted.New(calls(call("gate", `{}`)), answer("never")), Tools: []tool.Tool{g.tool(w)}})
	if a.CancelRun("", errors.New("x")) || a.CancelRun("run-nobody", errors.New("x")) {
		t.Fatal("CancelRun found a run that is not in flight")
	}
	type outcome struct {
		res agent.Result
		err error
	}
	ran := make(chan outcome, 1)
	go func() {
		res, err := a.Run(bg(), agent.Input{Message: "x"})
		ran <- outcome{res, err}
	}()
	<-g.entered
	runID := ""
	for _, e := range rec.all() {
		if e.Meta.RunID != "" {
			runID = e.Meta.RunID
			break
		}
	}
	stop := errors.New("the host stopped the turn")
	if !a.CancelRun(runID, stop) {
		t.Fatal("CancelRun did not find the run in flight")
	}
	out := <-ran
	if !errors.Is(out.err, stop) {
		t.Fatalf("the cancelled run's error: %v", out.err)
	}
	if cl := rec.closeEvents(); len(cl) != 1 || cl[0].Reason != "run-end" {
		t.Fatalf("%+v", cl)
	}
	if a.CancelRun(runID, stop) {
		t.Fatal("CancelRun found a run that had ended")
	}
}

package code_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

type callResult struct {
	res tool.Result
	err error
}

func TestASessionLostMidExecuteIsReportedAndNeverRerun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &memRunner{}
	d := newDoor(allScopes()...)
	tl := code.NewTool(r, code.ToolOptions{Events: d.emit})

	res, err := d.call(ctx, tl, "c1", "run-1", "", nil, "lose")
	if err != nil {
		t.Fatalf("a lost session is a result for the model, not a tool error: %v", err)
	}
	if r.execCount() != 1 || r.startCount() != 1 {
		t.Fatalf("%d executions on %d sessions; the tool must never run the code again on its own", r.execCount(), r.startCount())
	}
	for _, want := range []string{"half", "[session lost:", "may or may not have run", "not run again", "next call opens a new session"} {
		if !strings.Contains(res.Content, want) {
			t.Errorf("the model is not told %q:\n%s", want, res.Content)
		}
	}
	if !res.IsError || strings.Contains(res.Content, "[exit") {
		t.Fatalf("a lost session's result must be an error without an exit note:\n%s", res.Content)
	}
	if !r.sessions[0].isStopped() {
		t.Fatal("the lost session was kept")
	}
	runs := d.codeRuns()
	if len(runs) != 1 || !runs[0].StateLost || runs[0].OK || runs[0].Error == "" {
		t.Fatalf("code_run = %+v; want stateLost, not ok, with the error", runs)
	}

	res, err = d.call(ctx, tl, "c2", "run-1", "", nil, "print(1)")
	if err != nil || !strings.HasPrefix(res.Content, "[new session:") || !strings.HasSuffix(res.Content, "mem-2:print(1)") {
		t.Fatalf("the next call must open a new session and say so: %q, %v", res.Content, err)
	}
	d.tier.FireShutdown(ctx)
}

func TestATeardownRacingACallIsReportedAsLostNotRerun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := &memRunner{block: make(chan struct{}), entered: make(chan string, 1)}
		d := newDoor(allScopes()...)
		tl := code.NewTool(r, code.ToolOptions{Scope: toolsession.ScopeSession})
		done := make(chan callResult, 1)
		go func() {
			res, err := d.call(ctx, tl, "c1", "run-1", "conv-1", nil, "block")
			done <- callResult{res, err}
		}()
		<-r.entered
		// The host closes the conversation while its code runs: that close
		// is explicit, and the call learns its session is gone.
		fired := make(chan int, 1)
		go func() { fired <- d.tier.FireSession(ctx, "conv-1", "") }()
		synctest.Wait()
		close(r.block)
		got := <-done
		if n := <-fired; n != 1 {
			t.Fatalf("FireSession closed %d", n)
		}
		if got.err != nil || !strings.Contains(got.res.Content, "may or may not have run") {
			t.Fatalf("call cut by a teardown: %q, %v", got.res.Content, got.err)
		}
		if r.execCount() != 1 || r.startCount() != 1 {
			t.Fatalf("%d executions, %d starts: the code was run again", r.execCount(), r.startCount())
		}
	})
}

func TestEvictionNeverCutsACallInFlightAndAFullTierRefuses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := &memRunner{block: make(chan struct{}), entered: make(chan string, 1)}
		d := newDoorWith(toolsession.Config{MaxLive: 1, Wait: 5 * time.Second}, allScopes()...)
		tl := code.NewTool(r, code.ToolOptions{})

		x := make(chan callResult, 1)
		go func() {
			res, err := d.call(ctx, tl, "x1", "run-x", "", nil, "block")
			x <- callResult{res, err}
		}()
		<-r.entered

		start := time.Now()
		_, err := d.call(ctx, tl, "y1", "run-y", "", nil, "print(1)")
		if !errors.Is(err, toolsession.ErrCapacity) {
			t.Fatalf("a new session while the only one is busy = %v; want ErrCapacity", err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("refused after %s; want after the 5s wait", waited)
		}
		var ce *toolsession.CapacityError
		if !errors.As(err, &ce) || ce.MaxLive != 1 || !strings.Contains(err.Error(), "tool run_code") {
			t.Fatalf("error %v; want a *CapacityError naming MaxLive 1, from tool run_code", err)
		}
		if r.startCount() != 1 || r.sessions[0].isStopped() {
			t.Fatalf("%d starts, busy session stopped %v: a refused opener must start nothing and evict nothing",
				r.startCount(), r.sessions[0].isStopped())
		}

		// Z waits, and gets room when X's call ends.
		z := make(chan callResult, 1)
		go func() {
			res, err := d.call(ctx, tl, "z1", "run-z", "", nil, "print(1)")
			z <- callResult{res, err}
		}()
		synctest.Wait()
		if r.startCount() != 1 {
			t.Fatal("a waiting opener started a session")
		}
		close(r.block)
		if got := <-x; got.err != nil || got.res.Content != "mem-1:block" {
			t.Fatalf("X's answer: %q, %v; want it intact", got.res.Content, got.err)
		}
		if got := <-z; got.err != nil || got.res.Content != "mem-2:print(1)" {
			t.Fatalf("Z after X finished: %q, %v", got.res.Content, got.err)
		}
		if err := d.tier.Settled(ctx); err != nil {
			t.Fatal(err)
		}
		if !r.sessions[0].isStopped() || r.execCount() != 2 {
			t.Fatalf("X's idle session stopped %v, %d executions; want X evicted once idle, each code run once",
				r.sessions[0].isStopped(), r.execCount())
		}
		d.tier.FireShutdown(ctx)
	})
}

func TestAClaimedSessionIsNeverHandedOutAndItsCleanupSparesTheNewOne(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := &memRunner{}
		d := newDoorWith(toolsession.Config{MaxLive: 1}, allScopes()...)
		d.cleanupGate = make(chan struct{})
		tl := code.NewTool(r, code.ToolOptions{})

		if res, err := d.call(ctx, tl, "a1", "run-a", "", nil, "1"); err != nil || res.Content != "mem-1:1" {
			t.Fatalf("first call: %q, %v", res.Content, err)
		}
		// run-b evicts run-a's idle session; its cleanup is held at the gate,
		// so the tool still has mem-1 under run-a's key.
		if res, err := d.call(ctx, tl, "b1", "run-b", "", nil, "2"); err != nil || res.Content != "mem-2:2" {
			t.Fatalf("second call: %q, %v", res.Content, err)
		}
		// run-a again: its registration was claimed, so mem-1 is doomed and
		// must not be used; a new session opens.
		res, err := d.call(ctx, tl, "a2", "run-a", "", nil, "3")
		if err != nil || !strings.HasSuffix(res.Content, "mem-3:3") {
			t.Fatalf("a call under a claimed registration got %q, %v; want a new session", res.Content, err)
		}
		close(d.cleanupGate)
		if err := d.tier.Settled(ctx); err != nil {
			t.Fatal(err)
		}
		if !r.sessions[0].isStopped() || !r.sessions[1].isStopped() || r.sessions[2].isStopped() {
			t.Fatalf("stopped: mem-1 %v, mem-2 %v, mem-3 %v; the late cleanups must stop only their own sessions",
				r.sessions[0].isStopped(), r.sessions[1].isStopped(), r.sessions[2].isStopped())
		}
		if res, err := d.call(ctx, tl, "a3", "run-a", "", nil, "4"); err != nil || res.Content != "mem-3:4" {
			t.Fatalf("the new session is reused: %q, %v", res.Content, err)
		}
		d.tier.FireShutdown(ctx)
		if !r.sessions[2].isStopped() {
			t.Fatal("shutdown did not stop the new session")
		}
	})
}

func TestADoorWithoutAHolderStillServes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &memRunner{}
	d := newDoor(allScopes()...)
	d.noHold = true
	tl := code.NewTool(r, code.ToolOptions{})
	for i, want := range []string{"mem-1:a", "mem-1:b"} {
		res, err := d.call(ctx, tl, "c", "run-1", "", nil, string(rune('a'+i)))
		if err != nil || res.Content != want {
			t.Fatalf("call %d: %q, %v; want %q", i, res.Content, err, want)
		}
	}
	d.tier.FireShutdown(ctx)
	if !r.sessions[0].isStopped() {
		t.Fatal("shutdown did not stop the session")
	}
}

package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// holding is a tool that holds a session the way code.NewTool does: pin
// (or reserve room) first, then register, then work — here, wait on a
// channel the test controls.
func holding(release <-chan struct{}, entered chan<- string) tool.Tool {
	return tool.Func("hold", "holds a session while it works", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
		opt := toolsession.Options{Scope: toolsession.ScopeSession, RunnerID: "test"}
		l, err := c.Hold(ctx, opt)
		if err != nil {
			return "", err
		}
		defer l.Release()
		if _, err := c.OnTeardown(func(context.Context) error { return nil }, opt); err != nil {
			return "", err
		}
		entered <- c.SessionID
		select {
		case <-release:
			return "worked", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
}

func TestEveryLiveSessionBusyEndsTheRunWithErrCapacity(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		entered := make(chan string, 2)
		rec := &recorder{}
		m := scripted.New(calls(call("hold", `{}`)), answer("x done"), calls(call("hold", `{}`)))
		a, err := agent.New(agent.Options{Model: m, Tools: []tool.Tool{holding(release, entered)}, Sinks: []event.Sink{rec},
			MaxLiveSessions: 1, SessionWait: 4 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = a.Shutdown(context.Background()) }()

		x := make(chan error, 1)
		var xOut string
		go func() {
			res, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "conv-x"})
			xOut = res.Output
			x <- err
		}()
		<-entered

		start := time.Now()
		res, err := a.Run(bg(), agent.Input{Message: "y", SessionID: "conv-y", Identity: &tool.Identity{Tenant: "acme", Principal: "yan"}})
		if !errors.Is(err, toolsession.ErrCapacity) {
			t.Fatalf("Run while every session is busy = %v; want an error matching toolsession.ErrCapacity", err)
		}
		var ce *toolsession.CapacityError
		if !errors.As(err, &ce) || ce.MaxLive != 1 || time.Since(start) != 4*time.Second || res.RunID == "" {
			t.Fatalf("err %#v after %s, run %q; want a *CapacityError naming MaxLive 1 after the 4s wait", err, time.Since(start), res.RunID)
		}
		close(release)
		if err := <-x; err != nil || xOut != "x done" {
			t.Fatalf("X: %q, %v; want its answer intact", xOut, err)
		}

		caps := rec.of(tool.TypeSessionCapacity)
		if len(caps) != 1 || caps[0].Meta.RunID != res.RunID || caps[0].Meta.Principal != "yan" {
			t.Fatalf("session_capacity events %+v; want one, for Y's run", caps)
		}
		if p := caps[0].Payload.(*tool.SessionCapacity); p.Outcome != tool.CapacityRefused || p.MaxLive != 1 || p.WaitedMs != 4000 || p.Tool != "hold" {
			t.Fatalf("payload %+v", p)
		}
		var fatal *event.Fatal
		for _, e := range rec.of(event.TypeFatal) {
			if e.Meta.RunID == res.RunID {
				fatal = e.Payload.(*event.Fatal)
			}
		}
		if fatal == nil || fatal.ErrorClass != "capacity" {
			t.Fatalf("fatal event for Y = %+v; want errorClass capacity", fatal)
		}
		for _, c := range rec.closeEvents() {
			if c.Reason == string(toolsession.ReasonEvicted) {
				t.Fatalf("a session was evicted: %+v", c)
			}
		}
	})
}

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("this test needs python3 (Debian: apt-get install python3)")
	}
	return p
}

// The repro, on the real persistent interpreter with MaxLive 2:
// conversation X appends a line to a file and then blocks on a pipe the
// test holds; meanwhile Y and Z each run print(1). X is never evicted mid-
// execute, its line is written once, its answer is intact; Y and Z each
// either answer 1 (having waited for room if they met) or get the capacity
// error — never a session taken from under X.
func TestReproXIsNeverEvictedMidExecuteAndItsCodeRunsOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	side, ready, goOn := filepath.Join(dir, "side.txt"), filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	for _, p := range []string{ready, goOn} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	runner := local.NewInterpreter(local.Options{Commands: map[string]string{"python": python(t)}})
	rec := &recorder{}
	a, err := agent.New(agent.Options{
		Model:           scripted.Calculator(),
		Tools:           []tool.Tool{code.NewTool(runner, code.ToolOptions{Scope: toolsession.ScopeSession, Timeout: time.Minute})},
		Sinks:           []event.Sink{rec},
		MaxLiveSessions: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}()

	type outcome struct {
		res agent.Result
		err error
	}
	run := func(conv, principal, src string) <-chan outcome {
		ch := make(chan outcome, 1)
		go func() {
			res, err := a.Run(bg(), agent.Input{Message: "```\n" + src + "\n```", SessionID: conv,
				Identity: &tool.Identity{Tenant: "acme", Principal: principal}})
			ch <- outcome{res, err}
		}()
		return ch
	}
	x := run("conv-x", "xena", fmt.Sprintf(`open(%q, "a").write("x\n")
open(%q, "w").close()
print("x got", open(%q).read())`, side, ready, goOn))

	// X has written its line and is blocked: it opened the ready pipe.
	opened := make(chan error, 1)
	go func() {
		f, err := os.Open(ready)
		if err == nil {
			err = f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case o := <-x:
		t.Fatalf("X ended before it blocked: %+v", o)
	case <-time.After(30 * time.Second): // a watchdog, not a synchronisation
		t.Fatal("X never reached its pipe")
	}

	y, z := run("conv-y", "yan", "print(1)"), run("conv-z", "zed", "print(1)")
	for name, ch := range map[string]<-chan outcome{"Y": y, "Z": z} {
		o := <-ch
		switch {
		case o.err == nil && o.res.Output == "1":
		case errors.Is(o.err, toolsession.ErrCapacity):
			t.Logf("%s was refused: %v", name, o.err)
		default:
			t.Fatalf("%s: %q, %v; want 1 or the capacity error", name, o.res.Output, o.err)
		}
	}
	select {
	case o := <-x:
		t.Fatalf("X ended while its code was blocked: %+v", o)
	default:
	}
	if err := os.WriteFile(goOn, []byte("the go-ahead"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := <-x
	if o.err != nil || o.res.Output != "x got the go-ahead" {
		t.Fatalf("X's answer: %q, %v; want it intact", o.res.Output, o.err)
	}
	b, err := os.ReadFile(side)
	if err != nil || string(b) != "x\n" {
		t.Fatalf("side effect file %q (%v); want X's line exactly once", b, err)
	}
	// X's session is still the one it started: nothing of X's was closed.
	xHash := ""
	for _, e := range rec.of(tool.TypeSessionStarted) {
		if e.Meta.SessionID == "conv-x" {
			xHash = e.Payload.(*tool.SessionOpened).KeyHash
		}
	}
	if xHash == "" {
		t.Fatal("no session_started for X")
	}
	for _, c := range rec.closeEvents() {
		if c.KeyHash == xHash {
			t.Fatalf("X's session was closed (%s) while it ran", c.Reason)
		}
	}
	for _, e := range rec.of(code.TypeRun) {
		if p := e.Payload.(*code.RunReport); p.StateLost || strings.Contains(p.Error, "broken") {
			t.Fatalf("a code run lost its session: %+v", p)
		}
	}
}

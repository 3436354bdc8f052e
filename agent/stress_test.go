package agent_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// Runs, conversation closes, pauses and a shutdown all at once: every
// workspace is closed exactly once (a second close would fail and show up
// as session_close_failed), and nothing is left open.
func TestRunsClosesAndShutdownRaceSafely(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	m := scripted.New(
		calls(call("notes", `{"append":"a"}`), call("conv", `{"append":"b"}`), call("scratch", `{}`)),
		calls(call("deploy", `{"target":"x"}`)),
		answer("ok"))
	a, rec := newAgent(t, agent.Options{Model: m, MaxLiveSessions: 20, Tools: []tool.Tool{
		w.tool("notes", toolsession.ScopeRun), w.tool("conv", toolsession.ScopeSession),
		w.tool("scratch", toolsession.ScopeCall), deployTool(&ran)}})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				a.CloseToolSessions(bg(), "")
			}
		}
	})
	var runs sync.WaitGroup
	for i := range 12 {
		runs.Go(func() {
			for j := range 5 {
				id := &tool.Identity{Tenant: "t", Principal: fmt.Sprint("p", i)}
				res, err := a.Run(bg(), agent.Input{Message: "x", SessionID: fmt.Sprint("s", i), Identity: id})
				if errors.Is(err, agent.ErrShutdown) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if j%2 == 0 {
					_, err = a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true})
					if err != nil && !errors.Is(err, agent.ErrCheckpointAbandoned) && !errors.Is(err, agent.ErrShutdown) {
						t.Error(err)
					}
				}
			}
		})
	}
	runs.Wait()
	if err := a.Shutdown(bg()); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if open, opened, closed := w.stats(); open != 0 || opened != closed || opened == 0 {
		t.Fatalf("open %d opened %d closed %d", open, opened, closed)
	}
	if f := rec.of(tool.TypeSessionCloseFailed); len(f) != 0 {
		t.Fatalf("%d failed closes, first %+v", len(f), f[0].Payload)
	}
	if a.LiveToolSessions() != 0 {
		t.Fatal("live sessions after shutdown")
	}
}

func TestTheIterationLimitSpansPauses(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	m := scripted.New(calls(call("deploy", `{"target":"a"}`)), calls(call("deploy", `{"target":"b"}`)), answer("ok"))
	a, _ := newAgent(t, agent.Options{Model: m, MaxIterations: 2, Tools: []tool.Tool{deployTool(&ran)}})
	res, _ := a.Run(bg(), agent.Input{Message: "x"})
	res, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true})
	if err != nil || res.Paused == nil || res.Paused.Checkpoint.Iteration != 2 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true}); !errors.Is(err, agent.ErrMaxIterations) {
		t.Fatalf("the third model call of a run limited to 2: %v", err)
	}
}

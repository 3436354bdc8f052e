package agent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
)

// gateModel answers once it is let go, so a test holds a run in flight.
type gateModel struct {
	entered chan struct{}
	release chan struct{}
}

func (g gateModel) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	g.entered <- struct{}{}
	select {
	case <-g.release:
		return llm.Response{Text: "done", StopReason: llm.StopEnd}, nil
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
}

// A caller's run id names the run — in the result and in every event —
// and is refused when it is malformed or names a run in flight.
func TestCallersRunID(t *testing.T) {
	g := gateModel{entered: make(chan struct{}, 2), release: make(chan struct{})}
	a, rec := newAgent(t, agent.Options{Model: g})
	ctx := context.Background()
	done := make(chan agent.Result, 1)
	go func() {
		res, err := a.Run(ctx, agent.Input{Message: "hi", RunID: "run-host-1", SessionID: "s1"})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-g.entered
	if _, err := a.Run(ctx, agent.Input{Message: "hi", RunID: "run-host-1", SessionID: "s2"}); !errors.Is(err, agent.ErrRunIDInUse) {
		t.Fatalf("a second run under an id in flight: %v", err)
	}
	for _, bad := range []string{"has space", "tab\t", string(make([]byte, 129))} {
		if _, err := a.Run(ctx, agent.Input{Message: "hi", RunID: bad}); err == nil {
			t.Fatalf("run id %q accepted", bad)
		}
	}
	close(g.release)
	res := <-done
	if res.RunID != "run-host-1" || res.Output != "done" {
		t.Fatalf("result: %+v", res)
	}
	evs := rec.of(event.TypeTurnStart, event.TypeTurnEnd, event.TypeLLMStart)
	if len(evs) < 3 {
		t.Fatalf("%d events", len(evs))
	}
	for _, e := range evs {
		if e.Meta.RunID != "run-host-1" {
			t.Fatalf("%s names run %q", e.Type, e.Meta.RunID)
		}
	}
	// Once it is over, the id may be used again.
	g2 := gateModel{entered: make(chan struct{}, 1), release: make(chan struct{})}
	close(g2.release)
	b, _ := newAgent(t, agent.Options{Model: g2})
	if res, err := b.Run(ctx, agent.Input{Message: "hi", RunID: "run-host-1"}); err != nil || res.RunID != "run-host-1" {
		t.Fatalf("a fresh agent, the same id: %+v %v", res, err)
	}
}

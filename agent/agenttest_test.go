package agent_test

import (
	"context"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/agent/agenttest"
	"github.com/agentry-dev/agentry/event"
)

// The in-memory executor keeps the loop's promises.
func TestAgentTest(t *testing.T) {
	agenttest.Run(t, func(t *testing.T, s agenttest.Setup) agenttest.Agent {
		a, err := agent.New(agent.Options{ID: "agenttest", Model: s.Model, Tools: s.Tools, MaxIterations: s.MaxIterations,
			Sinks: []event.Sink{hook(s.Events)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := a.Shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
		return inMemory{a}
	})
}

// inMemory runs agenttest's turns on an *agent.Agent.
type inMemory struct{ a *agent.Agent }

func (m inMemory) Run(ctx context.Context, message string) agenttest.Turn {
	return turnOf(m.a.Run(ctx, agent.Input{Message: message}))
}

func (m inMemory) Resume(ctx context.Context, paused agenttest.Turn, d agent.Decision) agenttest.Turn {
	return turnOf(m.a.Resume(ctx, paused.Resume.(agent.Checkpoint), d))
}

func turnOf(res agent.Result, err error) agenttest.Turn {
	t := agenttest.Turn{RunID: res.RunID, Output: res.Output, Err: err, Usage: res.Usage}
	if res.Conversation != nil {
		t.Messages = res.Conversation.Messages
	}
	if p := res.Paused; p != nil {
		t.Pause = &agenttest.Pause{Question: p.Question, Tool: p.ToolName}
		t.Resume = p.Checkpoint
	}
	return t
}

// hook is a sink that hands every event to a function.
type hook func(event.Event)

func (h hook) Export(e event.Event)      { h(e) }
func (hook) Flush(context.Context) error { return nil }
func (hook) Close(context.Context) error { return nil }

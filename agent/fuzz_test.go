package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
)

// FuzzResumeCheckpoint feeds stored-checkpoint bytes to ParseCheckpoint
// and, when they parse, to Resume: neither may panic, and Resume either
// runs or refuses with one of its named errors.
func FuzzResumeCheckpoint(f *testing.F) {
	var ran atomic.Int32
	tools := func() []tool.Tool {
		return []tool.Tool{deployTool(&ran), tool.Func("echo", "echo", func(context.Context, *tool.Call, struct{}) (string, error) { return "e", nil })}
	}
	seed, err := agent.New(agent.Options{ID: "fz", Model: scripted.New(calls(call("echo", `{}`), call("deploy", `{"target":"a"}`), call("deploy", `{"target":"b"}`)), answer("ok")), Tools: tools()})
	if err != nil {
		f.Fatal(err)
	}
	res, err := seed.Run(bg(), agent.Input{Message: "x", SessionID: "s", Identity: &tool.Identity{Tenant: "t", Principal: "p"}})
	if err != nil || res.Paused == nil {
		f.Fatal(res, err)
	}
	good, _ := json.Marshal(res.Paused.Checkpoint)
	_ = seed.Shutdown(bg())
	f.Add(good)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":2,"id":"x"}`))
	f.Add([]byte(`{"version":1,"id":"c","runId":"r","iteration":1,"messages":[{"role":"assistant","toolCalls":[{"id":"a","name":"deploy","args":{}}]}],"results":[null],"waiting":[{"index":0}]}`))
	f.Add([]byte(`{"version":1,"id":"c","runId":"r","iteration":1,"messages":[{"role":"assistant","toolCalls":[{"id":"a","name":"deploy","args":{}}]}],"results":[null],"waiting":[{"index":5}]}`))
	f.Add([]byte(`null`))

	a, err := agent.New(agent.Options{ID: "fz", Model: scripted.New(answer("a"), answer("b"), answer("c"), answer("d")), Tools: tools(), MaxIterations: 3})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = a.Shutdown(bg()) })
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := agent.ParseCheckpoint(data)
		if err != nil {
			if !errors.Is(err, agent.ErrCheckpointInvalid) {
				t.Fatalf("a parse refusal must be a CheckpointError: %v", err)
			}
			return
		}
		d := agent.Decision{Approve: len(data)%2 == 0, Note: "n"}
		res, err := a.Resume(bg(), cp, d)
		switch {
		case err == nil:
			if res.RunID != cp.RunID {
				t.Fatalf("resumed as %s, checkpoint run %s", res.RunID, cp.RunID)
			}
			if res.Paused == nil {
				if _, err := json.Marshal(res.Conversation); err != nil {
					t.Fatalf("the conversation is not JSON: %v", err)
				}
			}
		case errors.Is(err, agent.ErrCheckpointInvalid), errors.Is(err, agent.ErrAlreadyResumed),
			errors.Is(err, agent.ErrSessionBusy), errors.Is(err, agent.ErrMaxIterations),
			errors.Is(err, scripted.ErrOutOfSteps), errors.Is(err, agent.ErrToolConflict):
		default:
			t.Fatalf("unexpected refusal: %v", err)
		}
	})
}

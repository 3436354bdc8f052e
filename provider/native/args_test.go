package native

import (
	"encoding/json"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
)

// A pause's approval request carries the input of the call it asks
// about (the first waiting one), as the model sent it; none when the
// checkpoint does not hold it.
func TestPendingRequestCarriesTheCallsArgs(t *testing.T) {
	pt := &PendingTurn{TurnID: "t1", Question: "may I?", Tool: "run_code", Checkpoint: agent.Checkpoint{ID: "cp-1",
		Messages: []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
			{ID: "a", Name: "deploy", Args: json.RawMessage(`{"target":"prod"}`)},
			{ID: "b", Name: "run_code", Args: json.RawMessage(`{"code":"print(1)"}`)},
		}}},
		Results: []*agent.CheckpointResult{{}, nil}, Waiting: []agent.CheckpointWait{{Index: 1, Question: "may I?"}}}}
	if r := pt.request(); string(r.Args) != `{"code":"print(1)"}` || r.Tool != "run_code" {
		t.Fatalf("the request: %+v", r)
	}
	pt.Checkpoint.Waiting = nil
	if r := pt.request(); r.Args != nil {
		t.Fatalf("args without a waiting call: %s", r.Args)
	}
	pt.Checkpoint.Waiting = []agent.CheckpointWait{{Index: 7}}
	if r := pt.request(); r.Args != nil {
		t.Fatalf("args of a call out of range: %s", r.Args)
	}
}

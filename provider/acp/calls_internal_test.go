package acp

import (
	"testing"

	sdk "github.com/coder/acp-go-sdk"
)

// callOf reads what the host shows of an ACP tool call: a tool_call's
// diff as its input, an update's end as its output (text content first,
// else the raw output), a failure as an error; other updates are about
// no call.
func TestCallOf(t *testing.T) {
	start := callOf(sdk.StartToolCall("c1", "Edit a.txt", sdk.WithStartKind(sdk.ToolKindEdit),
		sdk.WithStartContent([]sdk.ToolCallContent{sdk.ToolDiffContent("/w/a.txt", "new\n", "old\n")})))
	if start == nil || start.ID != "c1" || start.Tool != "Edit a.txt" || start.Ended ||
		string(start.Input) != `{"path":"/w/a.txt","oldText":"old\n","newText":"new\n"}` {
		t.Fatalf("the start: %+v (%s)", start, start.Input)
	}
	done := callOf(sdk.UpdateToolCall("c1", sdk.WithUpdateStatus(sdk.ToolCallStatusCompleted),
		sdk.WithUpdateContent([]sdk.ToolCallContent{sdk.ToolContent(sdk.TextBlock("edited"))})))
	if done == nil || !done.Ended || done.IsError || done.Output != "edited" || done.Tool != "" {
		t.Fatalf("the end: %+v", done)
	}
	failed := callOf(sdk.UpdateToolCall("c2", sdk.WithUpdateStatus(sdk.ToolCallStatusFailed), sdk.WithUpdateRawOutput(map[string]any{"code": 2})))
	if failed == nil || !failed.IsError || failed.Output != `{"code":2}` {
		t.Fatalf("the failure: %+v", failed)
	}
	running := callOf(sdk.UpdateToolCall("c3", sdk.WithUpdateStatus(sdk.ToolCallStatusInProgress), sdk.WithUpdateRawInput(map[string]any{"command": "ls"})))
	if running == nil || running.Ended || string(running.Input) != `{"command":"ls"}` {
		t.Fatalf("a call in progress: %+v", running)
	}
	if c := callOf(sdk.UpdateAgentMessageText("hi")); c != nil {
		t.Fatalf("text is about a call: %+v", c)
	}
}

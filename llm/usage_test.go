package llm_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/llm"
)

// A turn's usage counts model calls and their tokens per model and tool
// calls by tool; the stretches of a paused turn add up; it is plain JSON.
func TestTurnUsage(t *testing.T) {
	var a llm.TurnUsage
	a.CountModel("m1", llm.Usage{InputTokens: 10, OutputTokens: 2, CacheReadTokens: 4})
	a.CountModel("m1", llm.Usage{InputTokens: 5, OutputTokens: 1, CacheWriteTokens: 3})
	a.CountModel("", llm.Usage{})
	a.CountTool("run_code")
	a.Duration = time.Second
	var b llm.TurnUsage
	b.CountModel("m2", llm.Usage{InputTokens: 7})
	b.CountTool("run_code")
	b.CountTool("search")
	b.Duration = 2 * time.Second
	a.Add(b)
	if a.ModelCalls != 4 || a.Duration != 3*time.Second {
		t.Fatalf("usage %+v", a)
	}
	if got := a.Models["m1"]; got != (llm.Usage{InputTokens: 15, OutputTokens: 3, CacheReadTokens: 4, CacheWriteTokens: 3}) {
		t.Fatalf("m1: %+v", got)
	}
	if a.ToolCalls["run_code"] != 2 || a.ToolCalls["search"] != 1 {
		t.Fatalf("tool calls %v", a.ToolCalls)
	}
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var back llm.TurnUsage
	if err := json.Unmarshal(raw, &back); err != nil || back.ModelCalls != 4 || back.Models["m2"].InputTokens != 7 || back.ToolCalls["search"] != 1 {
		t.Fatalf("round trip %s: %+v %v", raw, back, err)
	}
	// Adding to an empty usage makes its maps.
	var empty llm.TurnUsage
	empty.Add(b)
	if empty.Models["m2"].InputTokens != 7 || empty.ToolCalls["run_code"] != 1 {
		t.Fatalf("added to empty: %+v", empty)
	}
}

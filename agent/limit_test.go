package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// A turn whose limit is crossed after a tool call finishes that step,
// then gets one model call with tool calls withheld and the reason told;
// a tool call the model asks for anyway does not run.
func TestLimitWrapsUpTheTurn(t *testing.T) {
	ran := 0
	note := tool.Func("note", "counts", func(context.Context, *tool.Call, noteArgs) (string, error) { ran++; return "ok", nil })
	var reqs []llm.Request
	m := &probe{Model: scripted.New(
		calls(call("note", `{"append":"one"}`)),
		calls(call("note", `{"append":"two"}`)), // asked on the wrap-up call: dropped
	), before: func(_ int, req llm.Request) { reqs = append(reqs, req) }}
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{note}})
	var seen []llm.TurnUsage
	res, err := a.Run(bg(), agent.Input{Message: "go", Limit: func(u llm.TurnUsage) string {
		seen = append(seen, u)
		if u.ToolCalls["note"] >= 1 {
			return "the daily cap of 10 tokens"
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].NoToolCalls || !reqs[1].NoToolCalls {
		t.Fatalf("model calls: %d, NoToolCalls %v; want the second (wrap-up) only", len(reqs), noToolCalls(reqs))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != llm.RoleUser || !strings.Contains(last.Content, "the daily cap of 10 tokens") {
		t.Fatalf("the wrap-up call was not told why: %+v", last)
	}
	if len(reqs[1].Tools) == 0 {
		t.Fatal("the wrap-up call dropped the tool descriptions its conversation refers to")
	}
	if ran != 1 {
		t.Fatalf("the tool ran %d times; the call asked on the wrap-up must not run", ran)
	}
	if len(seen) != 1 || seen[0].ModelCalls != 1 {
		t.Fatalf("the limit was asked %d times (%+v); want once, before the second model call", len(seen), seen)
	}
	if res.Usage.ModelCalls != 2 || res.Usage.ToolCalls["note"] != 1 {
		t.Fatalf("usage %+v: want 2 model calls and 1 tool call", res.Usage)
	}
	if ends := rec.turnEnds(); len(ends) != 1 || ends[0].Outcome != "answer" {
		t.Fatalf("turn ends: %+v", ends)
	}
}

// A limit that never answers leaves the turn as it was.
func TestLimitUncrossed(t *testing.T) {
	w := newWorkspaces(t)
	m := scripted.New(calls(call("note", `{"append":"one"}`)), answer("done"))
	a, _ := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("note", toolsession.ScopeRun)}})
	res, err := a.Run(bg(), agent.Input{Message: "go", Limit: func(llm.TurnUsage) string { return "" }})
	if err != nil || res.Output != "done" {
		t.Fatalf("%q, %v", res.Output, err)
	}
}

func noToolCalls(reqs []llm.Request) []bool {
	out := make([]bool, len(reqs))
	for i, r := range reqs {
		out[i] = r.NoToolCalls
	}
	return out
}

// What a call's sandbox reports is the turn's sandbox usage: CPU time
// summed, peak memory the largest.
func TestSandboxUsageIsCounted(t *testing.T) {
	var n atomic.Int32
	box := tool.Func("box", "runs in a sandbox", func(context.Context, *tool.Call, noteArgs) (sandboxed, error) {
		return sandboxed{int(n.Add(1))}, nil
	})
	m := scripted.New(calls(call("box", `{}`), call("box", `{}`)), answer("done"))
	a, _ := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{sandboxTool{box}}})
	res, err := a.Run(bg(), agent.Input{Message: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if u := res.Usage; u.SandboxCPU != 3*time.Second || u.SandboxPeakMemory != 2<<20 {
		t.Fatalf("sandbox usage %v, %d: want 3s and 2 MiB", u.SandboxCPU, u.SandboxPeakMemory)
	}
}

type sandboxed struct{ N int }

// sandboxTool reports call n as n seconds of CPU and n MiB at the peak.
type sandboxTool struct{ tool.Tool }

func (s sandboxTool) Call(ctx context.Context, c *tool.Call, args json.RawMessage) (tool.Result, error) {
	r, err := s.Tool.Call(ctx, c, args)
	var v sandboxed
	_ = json.Unmarshal([]byte(r.Content), &v)
	r.Sandbox = &tool.SandboxUsage{CPU: time.Duration(v.N) * time.Second, PeakMemory: int64(v.N) << 20}
	return r, err
}

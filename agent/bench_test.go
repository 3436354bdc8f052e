package agent_test

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// benchTools is the number of tool iterations per run; each run has one
// more iteration for the answer.
const benchTools = 8

type noop struct{}

func (noop) Spec() tool.Spec {
	return tool.Spec{Name: "noop", Description: "does nothing", InputSchema: json.RawMessage(`{"type":"object"}`)}
}
func (noop) Call(context.Context, *tool.Call, json.RawMessage) (tool.Result, error) {
	return tool.Result{Content: "ok"}, nil
}

func benchScript() *scripted.Model {
	var steps []scripted.Step
	for range benchTools {
		steps = append(steps, calls(call("noop", `{}`)))
	}
	return scripted.New(append(steps, answer("done"))...)
}

// perIteration reports ns and allocations per loop iteration.
func perIteration(b *testing.B, run func()) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := 0
	for b.Loop() {
		run()
		n++
	}
	runtime.ReadMemStats(&after)
	iters := float64(n * (benchTools + 1))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/iters, "ns/iter")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/iters, "allocs/iter")
}

// BenchmarkBaseline is what an iteration costs without the agent: the
// scripted model and the no-op tool called directly, messages appended by
// hand. The agent's overhead is the difference.
func BenchmarkBaseline(b *testing.B) {
	m, tl := benchScript(), noop{}
	defs := []llm.ToolDef{{Name: "noop", InputSchema: tl.Spec().InputSchema}}
	ctx := context.Background()
	perIteration(b, func() {
		msgs := []llm.Message{{Role: llm.RoleUser, Content: "go"}}
		for {
			resp, err := m.Generate(ctx, llm.Request{Messages: msgs, Tools: defs})
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls})
			if len(resp.ToolCalls) == 0 {
				return
			}
			for _, c := range resp.ToolCalls {
				res, _ := tl.Call(ctx, tool.NewCall(c.Name, c.ID, "run", "", nil, nil, nil), c.Args)
				msgs = append(msgs, llm.Message{Role: llm.RoleTool, Content: res.Content, ToolCallID: c.ID})
			}
		}
	})
}

func benchAgent(b *testing.B, opt agent.Options) {
	opt.Model = benchScript()
	opt.Tools = append(opt.Tools, noop{})
	a, err := agent.New(opt)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	ctx := context.Background()
	perIteration(b, func() {
		if _, err := a.Run(ctx, agent.Input{Message: "go"}); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkLoop is the agent loop with no sink attached.
func BenchmarkLoop(b *testing.B) { benchAgent(b, agent.Options{}) }

// discard is a sink that drops everything.
type discard struct{}

func (discard) Export(event.Event)          {}
func (discard) Flush(context.Context) error { return nil }
func (discard) Close(context.Context) error { return nil }

// BenchmarkLoopWithEvents is the loop with a standard-tier sink, so every
// event payload is built and delivered.
func BenchmarkLoopWithEvents(b *testing.B) {
	benchAgent(b, agent.Options{Sinks: []event.Sink{discard{}}})
}

// BenchmarkLoopWithSession adds a tool that holds a run-scoped session:
// the tier is built, and each call registers (a reuse after the first).
func BenchmarkLoopWithSession(b *testing.B) {
	held := &rawTool{spec: tool.Spec{Name: "noop", InputSchema: json.RawMessage(`{"type":"object"}`)},
		fn: func(_ context.Context, c *tool.Call, _ json.RawMessage) (tool.Result, error) {
			_, err := c.OnTeardown(func(context.Context) error { return nil }, toolsession.Options{Scope: toolsession.ScopeRun})
			return tool.Result{Content: "ok"}, err
		}}
	a, err := agent.New(agent.Options{Model: benchScript(), Tools: []tool.Tool{held}, Sinks: []event.Sink{discard{}}})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	perIteration(b, func() {
		if _, err := a.Run(context.Background(), agent.Input{Message: "go"}); err != nil {
			b.Fatal(err)
		}
	})
}

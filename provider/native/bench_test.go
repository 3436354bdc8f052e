package native_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// benchOptions: a scripted model that calls one tool, then answers.
func benchOptions() agent.Options {
	noop := tool.Func("noop", "does nothing", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) { return "ok", nil })
	return agent.Options{Model: scripted.New(
		scripted.Step{Text: "calling", ToolCalls: []llm.ToolCall{{Name: "noop", Args: json.RawMessage(`{}`)}}},
		scripted.Step{Text: "done"},
	), Tools: []tool.Tool{noop}}
}

// BenchmarkSessionTurn is one session's life with one turn (a model call,
// a tool call, an answer): through the native provider behind the
// validated wrapper, against the same agent called directly.
func BenchmarkSessionTurn(b *testing.B) {
	ctx := context.Background()
	b.Run("agent", func(b *testing.B) {
		a, err := agent.New(benchOptions())
		if err != nil {
			b.Fatal(err)
		}
		defer a.Shutdown(ctx)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprint("s", i)
			res, err := a.Run(ctx, agent.Input{SessionID: id, Message: "go"})
			if err != nil || res.Output != "done" {
				b.Fatal(res, err)
			}
			a.CloseToolSessions(ctx, id)
		}
	})
	b.Run("native", func(b *testing.B) {
		d, err := native.NewDriver(native.Config{Agent: func(context.Context, provider.Definition) (agent.Options, error) {
			return benchOptions(), nil
		}})
		if err != nil {
			b.Fatal(err)
		}
		reg, err := provider.OpenRegistry(ctx, []provider.Driver{d}, []provider.Definition{{ID: "bench", Provider: native.DefaultKey}})
		if err != nil {
			b.Fatal(err)
		}
		defer reg.Dispose(ctx)
		inst, _ := reg.Instance("bench")
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: fmt.Sprint("s", i), WorkingDirectory: "/"})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for o, err := range s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "go"}) {
				if err != nil {
					b.Fatal(err)
				}
				n++
				if o.Kind == provider.OutputTurnCompleted && o.Outcome != provider.OutcomeCompleted {
					b.Fatal(o.Outcome)
				}
			}
			if n != 6 {
				b.Fatalf("%d outputs", n)
			}
			if err := s.Close(ctx, provider.CloseRequested); err != nil {
				b.Fatal(err)
			}
		}
	})
}

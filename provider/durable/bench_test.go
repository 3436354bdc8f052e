package durable_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/internal/temporaltest"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// BenchmarkTurn is one session's life with one turn — a model call, a
// tool call, a second model call that answers — in memory (the native
// provider) and as a Temporal workflow (the durable provider, on the
// server AGENTRY_TEST_TEMPORAL names), with the same model and tool, so
// one run gives the ratio docs/scale.md quotes.
func BenchmarkTurn(b *testing.B) {
	ctx := context.Background()
	noop := tool.Func("noop", "does nothing", func(context.Context, *tool.Call, struct{}) (string, error) { return "ok", nil })
	life := func(b *testing.B, inst *provider.Instance) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s, err := inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: fmt.Sprint("s", i), WorkingDirectory: "/"})
			if err != nil {
				b.Fatal(err)
			}
			var end provider.Output
			for o, err := range s.RunTurn(ctx, provider.TurnRequest{TurnID: fmt.Sprint("t", i), Input: "call noop"}) {
				if err != nil {
					b.Fatal(err)
				}
				end = o
			}
			if end.Kind != provider.OutputTurnCompleted || end.Outcome != provider.OutcomeCompleted {
				b.Fatalf("the turn ended %+v", end)
			}
			if err := s.Close(ctx, provider.CloseRequested); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("native", func(b *testing.B) {
		reg, inst, err := native.Open(ctx, native.Config{Agent: native.Fixed(agent.Options{Model: &caller{}, Tools: []tool.Tool{noop}})})
		if err != nil {
			b.Fatal(err)
		}
		defer reg.Dispose(ctx)
		life(b, inst)
	})
	b.Run("durable", func(b *testing.B) {
		c := dial(b, temporaltest.Addr(b))
		r := openReplica(b, c, durable.Config{TaskQueue: uniq(b), Replica: "bench", Model: &caller{},
			Tools: []tool.Tool{noop}, Store: native.NewMemoryStore(0)})
		life(b, r.inst)
	})
}

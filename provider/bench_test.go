package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"testing"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// textTurn yields turn.started, n texts and turn.completed.
func textTurn(n int) turnScript {
	return func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
		return func(yield func(provider.Output, error) bool) {
			if !yield(s.out(provider.OutputTurnStarted, req.TurnID), nil) {
				return
			}
			for range n {
				o := s.out(provider.OutputText, req.TurnID)
				o.Text = "token"
				if !yield(o, nil) {
					return
				}
			}
			o := s.out(provider.OutputTurnCompleted, req.TurnID)
			o.Outcome = provider.OutcomeCompleted
			yield(o, nil)
		}
	}
}

// BenchmarkTurn compares a 100-output turn pulled straight from the
// provider (raw) with the same turn through the wrapper (validated): the
// difference is the contract's cost per turn.
func BenchmarkTurn(b *testing.B) {
	const outputs = 100
	p := newTprov()
	p.setup = func(s *tsess) { s.turn = textTurn(outputs) }
	v := p.validated(b)
	ctx := context.Background()
	s, err := v.Create(ctx, createReq("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx, "")
	raw := p.session(0)
	n := 0
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			n++
			for _, err := range raw.RunTurn(ctx, provider.TurnRequest{TurnID: fmt.Sprint(n), Input: "x"}) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("validated", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			n++
			for _, err := range s.RunTurn(ctx, provider.TurnRequest{TurnID: fmt.Sprint(n), Input: "x"}) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkHostToolInvoke compares checking the arguments against the
// tool's schema (the floor: a host must do that anyway) with the whole
// invocation through the facade (schema check, capacity, contexts, the
// tool, result check).
func BenchmarkHostToolInvoke(b *testing.B) {
	p := newTprov()
	v := p.validated(b)
	ctx := context.Background()
	fn := func(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
		return provider.HostToolResult{Output: json.RawMessage(`{"ok":true}`)}, nil
	}
	hb := &provider.HostBinding{
		Tools:   []provider.HostTool{{Name: "t", InputSchema: json.RawMessage(echoSchema), Invoke: fn}},
		Release: func(context.Context) error { return nil },
	}
	s, err := v.Create(ctx, provider.CreateRequest{SessionID: "bench", WorkingDirectory: workDir, HostBinding: hb})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx, "")
	ht := p.lastHostTools()
	args := json.RawMessage(`{"text":"hello"}`)
	val, err := tool.NewValidator("t", json.RawMessage(echoSchema))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("schema-only", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := val.Validate(args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("facade", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := ht.Invoke(ctx, provider.HostInvocation{ID: "i", Tool: "t", Arguments: args}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

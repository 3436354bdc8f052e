package toolsession_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentry-dev/agentry/toolsession"
)

// BenchmarkRegisterTouch measures the hot path: a tool call that finds its
// session already held and touches it. 64 sessions are live.
func BenchmarkRegisterTouch(b *testing.B) {
	tier := toolsession.NewTier(toolsession.Config{})
	keys := make([]string, 64)
	for i := range keys {
		keys[i], _ = toolsession.Key(toolsession.ScopeRun, toolsession.Facts{RunID: fmt.Sprint("run-", i), Tenant: "acme", Principal: "bob"})
		tier.Register(toolsession.Origin{Tool: "run_code", RunID: fmt.Sprint("run-", i)}, nil, toolsession.Options{Key: keys[i]})
	}
	o := toolsession.Origin{Tool: "run_code", ToolCallID: "c", RunID: "run-7"}
	opt := toolsession.Options{Key: keys[7], RunnerID: "local", Label: "python"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if !tier.Register(o, nil, opt).Reused {
			b.Fatal("not reused")
		}
	}
	b.StopTimer()
	tier.FireShutdown(context.Background())
}

// BenchmarkRegisterTouchParallel is the same touch from every core at once.
func BenchmarkRegisterTouchParallel(b *testing.B) {
	tier := toolsession.NewTier(toolsession.Config{})
	k, _ := toolsession.Key(toolsession.ScopeRun, toolsession.Facts{RunID: "run-1"})
	o := toolsession.Origin{Tool: "run_code", RunID: "run-1"}
	tier.Register(o, nil, toolsession.Options{Key: k})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tier.Register(o, nil, toolsession.Options{Key: k})
		}
	})
	b.StopTimer()
	tier.FireShutdown(context.Background())
}

// BenchmarkKey derives a run-scoped key with escaping.
func BenchmarkKey(b *testing.B) {
	f := toolsession.Facts{RunID: "run-8f3a", Tenant: "acme/eu", Principal: "bob"}
	b.ReportAllocs()
	for b.Loop() {
		toolsession.Key(toolsession.ScopeRun, f)
	}
}

// BenchmarkHoldTouchRelease measures what a call that pins its session adds
// to the hot path: pin the held session, touch it, release it. 64 sessions
// are live, as in BenchmarkRegisterTouch.
func BenchmarkHoldTouchRelease(b *testing.B) {
	tier := toolsession.NewTier(toolsession.Config{})
	keys := make([]string, 64)
	for i := range keys {
		keys[i], _ = toolsession.Key(toolsession.ScopeRun, toolsession.Facts{RunID: fmt.Sprint("run-", i), Tenant: "acme", Principal: "bob"})
		tier.Register(toolsession.Origin{Tool: "run_code", RunID: fmt.Sprint("run-", i)}, nil, toolsession.Options{Key: keys[i]})
	}
	o := toolsession.Origin{Tool: "run_code", ToolCallID: "c", RunID: "run-7"}
	opt := toolsession.Options{Key: keys[7], RunnerID: "local", Label: "python"}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l, err := tier.Hold(ctx, o, opt)
		if err != nil || l.Fresh {
			b.Fatal(err)
		}
		if !tier.Register(o, nil, opt).Reused {
			b.Fatal("not reused")
		}
		l.Release()
	}
	b.StopTimer()
	tier.FireShutdown(ctx)
}

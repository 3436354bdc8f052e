package native

import (
	"context"
	"encoding/json"
	"iter"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// The agent's steps go through guards: before each model call and each
// tool call, the host's check (provider.CheckStep) runs and the run's
// context is looked at, on the goroutine about to take the step. A host
// that can no longer stand behind a turn (its replica may have lost the
// conversation) thus stops the next step for certain, not only once its
// cancellation has reached the run.

// stepAllowed is the guards' check: the host's, then the run's context.
func stepAllowed(ctx context.Context, step provider.Step) error {
	if err := provider.CheckStep(ctx, step); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// guardModel puts m behind the step check, keeping what it can do
// (stream, tell its name).
func guardModel(m llm.Model) llm.Model {
	if m == nil {
		return nil
	}
	g := guardedModel{m: m}
	if s, ok := m.(llm.Streamer); ok {
		return guardedStreamer{guardedModel: g, s: s}
	}
	return g
}

type guardedModel struct{ m llm.Model }

func (g guardedModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := stepAllowed(ctx, provider.StepModel); err != nil {
		return llm.Response{}, err
	}
	return g.m.Generate(ctx, req)
}

func (g guardedModel) Name() string { return llm.NameOf(g.m) }

type guardedStreamer struct {
	guardedModel
	s llm.Streamer
}

func (g guardedStreamer) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Chunk, error] {
	if err := stepAllowed(ctx, provider.StepModel); err != nil {
		return func(yield func(llm.Chunk, error) bool) { yield(llm.Chunk{}, err) }
	}
	return g.s.Stream(ctx, req)
}

// guardTools puts each tool behind the step check.
func guardTools(ts []tool.Tool) []tool.Tool {
	if ts == nil {
		return nil
	}
	out := make([]tool.Tool, len(ts))
	for i, t := range ts {
		out[i] = guardedTool{t}
	}
	return out
}

type guardedTool struct{ tool.Tool }

// Unwrap is the tool behind the guard (tool.WorkspaceOf).
func (g guardedTool) Unwrap() tool.Tool { return g.Tool }

func (g guardedTool) Call(ctx context.Context, c *tool.Call, args json.RawMessage) (tool.Result, error) {
	if err := stepAllowed(ctx, provider.StepTool); err != nil {
		return tool.Result{}, err
	}
	return g.Tool.Call(ctx, c, args)
}

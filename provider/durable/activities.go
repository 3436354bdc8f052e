package durable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// activities are one instance's activity implementations.
type activities struct{ in *instance }

// model calls the model. Errors a retry cannot fix (no key, refused key,
// unknown model, refused request) are not retried.
func (a activities) model(ctx context.Context, in ModelInput) (llm.Response, error) {
	resp, err := a.in.cfg.Model.Generate(ctx, llm.Request{System: in.System, Messages: in.Messages, Tools: in.Tools})
	if err != nil {
		for _, permanent := range []error{llm.ErrNoAPIKey, llm.ErrAuth, llm.ErrModelNotFound, llm.ErrBadRequest} {
			if errors.Is(err, permanent) {
				return llm.Response{}, temporal.NewNonRetryableApplicationError(err.Error(), "model", nil)
			}
		}
		return llm.Response{}, err
	}
	return resp, nil
}

// tool runs one tool call on the replica that holds the conversation's
// live tool sessions, heartbeating while it runs so that the worker's
// death is noticed within the heartbeat timeout.
func (a activities) tool(ctx context.Context, in ToolInput) (tool.Result, error) {
	t, ok := a.in.tools[in.Call.Name]
	if !ok {
		return tool.Result{IsError: true, Content: fmt.Sprintf("There is no tool named %q.", in.Call.Name)}, nil
	}
	if err := t.valid.Validate(in.Call.Args); err != nil {
		return tool.Result{IsError: true, Content: err.Error()}, nil
	}
	call := tool.NewCall(in.Call.Name, in.Call.ID, in.RunID, in.SessionID, in.Identity,
		[]toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession}, a.in.tier.Register)
	type outcome struct {
		r   tool.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() {
			if p := recover(); p != nil {
				o = outcome{err: fmt.Errorf("the tool %s panicked: %v", in.Call.Name, p)}
			}
			done <- o
		}()
		o.r, o.err = t.Call(ctx, call, in.Call.Args)
	}()
	beat := time.NewTicker(a.in.beat)
	defer beat.Stop()
	for {
		select {
		case o := <-done:
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.in.cfg.TeardownTimeout)
			a.in.tier.FireCall(fctx, in.Call.ID)
			cancel()
			if o.err != nil {
				return tool.Result{}, temporal.NewNonRetryableApplicationError(o.err.Error(), "tool", nil)
			}
			return o.r, nil
		case <-beat.C:
			activity.RecordHeartbeat(ctx)
		}
	}
}

// record writes the workflow's progress to the stored conversation: a
// pause it waits on, or the turn's messages when it ends. Committing a
// turn twice is a no-op, so the activity may be retried.
func (a activities) record(ctx context.Context, in RecordInput) error {
	b := provider.Binding(in.Binding)
	rec, err := a.in.cfg.Store.Load(ctx, b)
	if err != nil {
		return fmt.Errorf("loading the conversation: %w", err)
	}
	if !rec.Conversation.Identity.Equal(in.Identity) {
		return temporal.NewNonRetryableApplicationError("the stored conversation belongs to another identity", "record", nil)
	}
	if slices.ContainsFunc(rec.Turns, func(m native.TurnMark) bool { return m.ID == in.TurnID }) {
		return nil
	}
	switch {
	case in.Done:
		rec.Conversation.Messages = append(slices.Clip(rec.Conversation.Messages), in.Added...)
		rec.Turns = append(slices.Clip(rec.Turns), native.TurnMark{ID: in.TurnID, Messages: len(rec.Conversation.Messages)})
		rec.Pending = nil
	case in.Ask != nil:
		rec.Pending = &native.PendingTurn{TurnID: in.TurnID, Question: in.Ask.Prompt, Tool: in.Ask.Tool,
			Checkpoint: agent.Checkpoint{Version: agent.CheckpointVersion, ID: in.Ask.ID}}
	default:
		return nil
	}
	if err := a.in.cfg.Store.Save(ctx, b, rec); err != nil {
		return fmt.Errorf("saving the conversation: %w", err)
	}
	return nil
}

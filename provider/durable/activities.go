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
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// activities are one instance's activity implementations. Each emits the
// agent events of what it does to this replica's sink, and hands the
// outputs it makes to the caller following the turn when that caller is
// on this replica (see watch).
type activities struct{ in *instance }

// model calls the model, heartbeating while it waits, so a worker that
// dies mid-call is noticed and the call retried elsewhere. Errors a retry
// cannot fix (no key, refused key, unknown model, refused request) are
// not retried.
func (a activities) model(ctx context.Context, in ModelInput) (llm.Response, error) {
	in2 := a.in
	meta := in2.meta(in.SessionID, in.TurnID, in.Identity)
	w := in2.watching(ctx)
	name := llm.NameOf(in2.cfg.Model)
	in2.emit(event.TypeLLMStart, &event.LLMStart{Model: name, Iteration: in.Iteration, Messages: len(in.Messages), Tools: len(in.Tools)}, meta)
	start := time.Now()
	resp, err := beating(ctx, in2.beat, func(ctx context.Context) (llm.Response, error) {
		return in2.cfg.Model.Generate(ctx, llm.Request{System: in.System, Messages: in.Messages, Tools: in.Tools, NoToolCalls: in.NoToolCalls})
	})
	end := &event.LLMEnd{Model: name, Iteration: in.Iteration, DurationMs: event.Ms(time.Since(start)),
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
		StopReason: string(resp.StopReason), ToolCalls: len(resp.ToolCalls)}
	if resp.Model != "" {
		end.Model = resp.Model
	}
	if err != nil {
		end.Error = err.Error()
	}
	in2.emit(event.TypeLLMEnd, end, meta)
	if resp.Model == "" {
		resp.Model = name
	}
	if err != nil {
		for _, permanent := range []error{llm.ErrNoAPIKey, llm.ErrAuth, llm.ErrModelNotFound, llm.ErrBadRequest} {
			if errors.Is(err, permanent) {
				return llm.Response{}, temporal.NewNonRetryableApplicationError(err.Error(), "model", nil)
			}
		}
		return llm.Response{}, err
	}
	if resp.Text != "" {
		in2.emit(event.TypeLLMMessage, &event.LLMMessage{Iteration: in.Iteration, Role: string(llm.RoleAssistant), Content: resp.Text}, meta)
		w.push(ctx, stepKey("text", in.Iteration, ""), provider.Output{Kind: provider.OutputText, SessionID: in.SessionID, TurnID: in.TurnID, Text: resp.Text})
	}
	return resp, nil
}

// limit asks the limit of the caller following the turn on this
// replica (TurnRequest.Limit, Resolution.Limit) about what the turn used.
// A turn nobody follows here has no limit anyone can ask: an error, which
// the workflow counts as crossed.
func (a activities) limit(ctx context.Context, li LimitInput) (string, error) {
	w := a.in.watching(ctx)
	if w == nil {
		return "", temporal.NewNonRetryableApplicationError("the caller holding the turn's budget is no longer on this replica", "limit", nil)
	}
	if w.limit == nil {
		return "", nil // the caller's budget was lifted since the turn began
	}
	return w.limit(li.Used), nil
}

// tool runs one tool call (tool.Invoke) on the replica that holds the
// session's live tool sessions and its lent host tools, heartbeating
// while it runs so that the worker's death is noticed within the
// heartbeat timeout. What the tool did wrong is a result for the model;
// only a call this worker could not finish is an error (the workflow
// reports it lost). A refused call is only told of, here.
func (a activities) tool(ctx context.Context, ti ToolInput) (tool.Outcome, error) {
	in := a.in
	c := ti.Call
	meta := in.meta(ti.SessionID, ti.RunID, ti.Identity)
	w := in.watching(ctx)
	out := func(text string) provider.Output {
		return provider.Output{Kind: provider.OutputActivity, SessionID: ti.SessionID, TurnID: ti.RunID, Text: text}
	}
	w.push(ctx, stepKey("start", c.Iteration, c.Call.ID), out(in.phrases.Calling(c.Call.Name)))
	req := tool.Request{Name: c.Call.Name, ToolCallID: c.DoorID, RunID: ti.RunID, SessionID: ti.SessionID, Identity: ti.Identity,
		Args: c.Call.Args, Iteration: c.Iteration, Approval: c.Approval, Refused: c.Refused}
	if t, ok := in.tools[c.Call.Name]; ok {
		req.Tool, req.Valid = t.Tool, t.valid
	} else if c.Refused == nil {
		// Lent by the session's host binding: the binding's facade checks
		// the arguments. Not open on this replica: an unknown tool here.
		req.Tool = in.lent(provider.Binding(ti.Binding), c.Call.Name)
	}
	res, err := beating(ctx, in.beat, func(ctx context.Context) (tool.Outcome, error) {
		return tool.Invoke(ctx, in.door(ctx, meta), req), nil
	})
	if err == nil && ctx.Err() != nil && res.Result.IsError {
		// Stopped under the tool (an interrupt, the worker stopping): the
		// call did not finish here.
		err = ctx.Err()
	}
	if err != nil {
		return tool.Outcome{}, err
	}
	if res.Asked == "" {
		w.push(ctx, stepKey("end", c.Iteration, c.Call.ID), out(in.phrases.Ended(&tool.CallEnd{Tool: c.Call.Name,
			IsError: res.Result.IsError, ErrorClass: res.Class})))
	}
	return res, nil
}

// door is this replica's door for one tool call: its tier (every scope
// but shutdown, which a replica's restart would outlive), its events with
// the turn's meta, and a check-in pauses the turn.
func (in *instance) door(ctx context.Context, meta event.Meta) *tool.Door {
	return &tool.Door{Scopes: durableScopes, Register: in.registrar(meta), Hold: in.holder(meta), Meta: meta,
		Report: in.cfg.Events, Events: in.toolEvent(meta), Asks: true,
		Settle: func(id string) {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.TeardownTimeout)
			in.tier.FireCall(fctx, id)
			cancel()
		}}
}

var durableScopes = []toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession}

// beating runs fn while heartbeating every interval, so the server
// notices a dead worker within the heartbeat timeout. A panic of fn is
// its error.
func beating[T any](ctx context.Context, every time.Duration, fn func(context.Context) (T, error)) (T, error) {
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() {
			if p := recover(); p != nil {
				o = outcome{err: fmt.Errorf("panicked: %v", p)}
			}
			done <- o
		}()
		o.v, o.err = fn(ctx)
	}()
	beat := time.NewTicker(every)
	defer beat.Stop()
	for {
		select {
		case o := <-done:
			return o.v, o.err
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

// mark runs on the session's replica when its turn pauses or ends: the
// turn's events, and at the end the close of its run-scoped tool
// sessions, which live here.
func (a activities) mark(ctx context.Context, m MarkInput) error {
	in := a.in
	meta := in.meta(m.SessionID, m.TurnID, m.Identity)
	end := &event.TurnEnd{Iterations: m.Iterations, DurationMs: event.Ms(m.Took)}
	if m.Ask != nil {
		in.emit(event.TypePauseRequest, &event.PauseRequest{Tool: m.Ask.Tool, ToolCallID: m.TurnID + ":" + m.Ask.CallID}, meta)
		end.Outcome = event.OutcomePaused
		in.emit(event.TypeTurnEnd, end, meta)
		return nil
	}
	for _, id := range m.Unsettled {
		in.tier.FireCall(ctx, id)
	}
	in.tier.FireRun(ctx, m.TurnID)
	switch m.Outcome {
	case "completed":
		end.Outcome = event.OutcomeAnswer
	case "interrupted":
		end.Outcome = event.OutcomeCancelled
		end.Error = "the turn was interrupted"
	default:
		end.Outcome, end.Error = event.OutcomeError, m.Problem
		in.emit(event.TypeFatal, &event.Fatal{Where: "agent", Error: m.Problem, ErrorClass: m.Class}, meta)
	}
	in.emit(event.TypeTurnEnd, end, meta)
	return nil
}

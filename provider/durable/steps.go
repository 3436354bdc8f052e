package durable

import (
	"errors"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// steps is the durable executor of the turn loop (agent.Executor): its
// model and tool calls are activities, its clock the workflow's, its
// fan-out activity futures. It runs in the workflow, so everything it
// does is deterministic under replay; it also notes each step (a model's
// text, a settled tool call) for the turn's callers.
type steps struct {
	ctx  workflow.Context // the workflow's
	tctx workflow.Context // the turn's calls: cancelled by an interrupt
	in   TurnInput
	st   *turnState
	// before is what the turn used in its stretches before this one
	// (before its pauses): a limit judges the whole turn.
	before llm.TurnUsage
}

var (
	_ agent.Executor = (*steps)(nil)
	_ agent.Limiter  = limitedSteps{}
)

// errInterrupted is why an interrupted turn stops.
var errInterrupted = errors.New("durable: the turn was interrupted")

func newSteps(ctx, tctx workflow.Context, in TurnInput, st *turnState) *steps {
	return &steps{ctx: ctx, tctx: tctx, in: in, st: st}
}

// Model runs one model call: on the session's replica while it takes
// them (so its caller sees the text as it comes), else on any replica.
// The binding's instructions come first in what the model sees.
func (x *steps) Model(c agent.ModelCall) (llm.Response, error) {
	in := x.in
	x.st.segment++
	msgs := c.Messages
	if in.Context != nil {
		msgs = append([]llm.Message{*in.Context}, c.Messages...)
	}
	req := ModelInput{SessionID: in.SessionID, TurnID: in.TurnID, Identity: in.Identity, Iteration: c.Iteration,
		System: in.System, Messages: msgs, Tools: in.Tools, NoToolCalls: c.WrapUp}
	resp, err := x.generate(req)
	if resp.Model == "" {
		resp.Model = in.Model
	}
	if err != nil {
		// The innermost cause: the activity's wrapping says nothing a
		// person needs.
		return resp, errors.New(cause(err))
	}
	if resp.Text != "" {
		x.st.steps = append(x.st.steps, Step{Iteration: c.Iteration, Text: resp.Text})
	}
	return resp, nil
}

func (x *steps) generate(req ModelInput) (llm.Response, error) {
	in := x.in
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: in.ModelTimeout,
		HeartbeatTimeout:    in.Heartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 30 * time.Second, MaximumAttempts: in.ModelAttempts},
	}
	var resp llm.Response
	if in.PinnedStart > 0 && !x.st.pinnedGone {
		pinned := opts
		pinned.TaskQueue, pinned.ScheduleToStartTimeout = in.ToolQueue, in.PinnedStart
		pctx := workflow.WithActivityOptions(x.tctx, pinned)
		err := workflow.ExecuteActivity(pctx, modelActivity, req).Get(pctx, &resp)
		var te *temporal.TimeoutError
		if err == nil || !errors.As(err, &te) || te.TimeoutType() != enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
			return resp, err
		}
		x.st.pinnedGone = true
	}
	sctx := workflow.WithActivityOptions(x.tctx, opts)
	err := workflow.ExecuteActivity(sctx, modelActivity, req).Get(sctx, &resp)
	return resp, err
}

// limitedSteps are the steps of a turn under its caller's limit
// (TurnInput.Limited).
type limitedSteps struct{ *steps }

// Limit asks the turn's caller whether the turn crossed its limit: the
// limit activity, once, on the session's replica, where the caller's
// limit lives. The answer is the activity's result, so replay reads it
// from the history. A limit that cannot be asked (the replica or its
// caller is gone) counts as crossed: a turn never runs on past a budget
// nobody can check.
func (x limitedSteps) Limit(used llm.TurnUsage) string {
	var all llm.TurnUsage
	all.Add(x.before)
	all.Add(used)
	var crossed string
	lctx := pinnedOnce(x.tctx, x.in)
	err := workflow.ExecuteActivity(lctx, limitActivity, LimitInput{TurnID: x.in.TurnID, Used: all}).Get(lctx, &crossed)
	switch {
	case err != nil && x.st.interrupted:
		return "" // the loop stops at its next step
	case err != nil:
		return "its budget could not be checked (" + cause(err) + "), so it is treated as spent"
	}
	return crossed
}

// Tools runs each call as a tool activity on the session's replica, at
// most MaxParallelTools at once, and waits for them in order. A call is
// attempted once: one whose worker went away is lost, never run again. A
// refused call is told on the session's replica, once, and skipped when
// the replica does not take it in time.
func (x *steps) Tools(calls []agent.ToolCall) []tool.Outcome {
	in := x.in
	tctx := workflow.WithActivityOptions(x.tctx, workflow.ActivityOptions{
		TaskQueue:              in.ToolQueue,
		ScheduleToStartTimeout: in.ToolStart,
		StartToCloseTimeout:    in.ToolTimeout,
		HeartbeatTimeout:       in.Heartbeat,
		// Never run a tool call again on our own: its side effects may
		// have happened.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	limit := in.MaxParallelTools
	if limit <= 0 {
		limit = agent.DefaultMaxParallelTools
	}
	outs := make([]tool.Outcome, len(calls))
	for from := 0; from < len(calls); from += limit {
		batch := calls[from:min(from+limit, len(calls))]
		futures := make([]workflow.Future, len(batch))
		for i, c := range batch {
			actx := tctx
			if c.Refused != nil {
				actx = pinnedOnce(x.tctx, in)
			}
			futures[i] = workflow.ExecuteActivity(actx, toolActivity, ToolInput{Binding: in.Binding, SessionID: in.SessionID,
				RunID: in.TurnID, Identity: in.Identity, Call: c})
		}
		for i, f := range futures {
			outs[from+i] = x.settled(batch[i], f)
		}
	}
	return outs
}

// settled waits for one tool activity and notes the call as a step once
// it has settled.
func (x *steps) settled(c agent.ToolCall, f workflow.Future) tool.Outcome {
	var out tool.Outcome
	err := f.Get(x.ctx, &out)
	switch {
	case c.Refused != nil:
		out = *c.Refused // told or not, the call did not run
	case err != nil && x.st.interrupted:
		out = tool.Outcome{Result: tool.Result{IsError: true, Content: "This tool call was stopped: the turn was interrupted."},
			Class: tool.ClassCancelled}
	case err != nil:
		out = tool.Outcome{Result: tool.Result{IsError: true, Content: lostText(err, x.in)}, Class: tool.ClassLost}
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) {
			out.Class = tool.ClassToolError
		}
	}
	if out.Asked == "" {
		x.st.steps = append(x.st.steps, Step{Iteration: c.Iteration, Tool: c.Call.Name, CallID: c.Call.ID,
			IsError: out.Result.IsError, ErrorClass: out.Class})
	}
	return out
}

// Lookup finds a tool among those offered to the model (the agent's and
// the ones the session's host binding lends).
func (x *steps) Lookup(name string) (checkIn, ok bool) {
	if !slices.ContainsFunc(x.in.Tools, func(d llm.ToolDef) bool { return d.Name == name }) {
		return false, false
	}
	return slices.Contains(x.in.CheckIns, name), true
}

// ToolNames are the tools offered to the model.
func (x *steps) ToolNames() []string {
	names := make([]string, len(x.in.Tools))
	for i, d := range x.in.Tools {
		names[i] = d.Name
	}
	return names
}

// Stopped is errInterrupted once the interrupt signal came.
func (x *steps) Stopped() error {
	if x.st.interrupted {
		return errInterrupted
	}
	return nil
}

// Now is the workflow's clock.
func (x *steps) Now() time.Time { return workflow.Now(x.ctx) }

// lostText tells the model what became of a tool call that did not come
// back, without claiming to know whether it took effect.
func lostText(err error, in TurnInput) string {
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		switch te.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			return fmt.Sprintf("This tool call was lost before it started: the replica holding this conversation's live sessions did not take it within %s. It did not run and will not be retried; its live state (interpreter variables, processes, files) may be gone.", in.ToolStart)
		case enumspb.TIMEOUT_TYPE_HEARTBEAT:
			return fmt.Sprintf("This tool call was lost while it ran: the worker running it stopped answering (no heartbeat for %s). It may or may not have taken effect and will not be re-run; the live state it used (interpreter variables, processes, files) may be gone. Check before repeating it.", in.Heartbeat)
		case enumspb.TIMEOUT_TYPE_START_TO_CLOSE:
			return fmt.Sprintf("This tool call did not finish within %s and was abandoned; it may or may not have taken effect and will not be re-run.", in.ToolTimeout)
		}
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return "The tool call failed: " + ae.Error()
	}
	return "This tool call was lost: " + cause(err) + ". It will not be re-run; it may or may not have taken effect."
}

// cause is the innermost message of a Temporal error chain.
func cause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

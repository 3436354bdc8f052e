package durable

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
)

// Names of the workflow, its activities, signals and update. They are part
// of the history: a running workflow needs workers that know them.
const (
	WorkflowName   = "agentry.turn"
	modelActivity  = "agentry.model"
	toolActivity   = "agentry.tool"
	recordActivity = "agentry.record"
	signalDecision = "agentry.decision"
	signalStop     = "agentry.interrupt"
	updateAdvance  = "agentry.advance"
)

// TurnInput is a turn workflow's input: plain JSON, everything the turn
// loop needs, so any worker can run it.
type TurnInput struct {
	Binding   string         `json:"binding"`
	SessionID string         `json:"sessionId"`
	TurnID    string         `json:"turnId"`
	Identity  *tool.Identity `json:"identity,omitempty"`
	System    string         `json:"system,omitempty"`
	// Messages is the conversation before the turn.
	Messages []llm.Message `json:"messages"`
	Input    string        `json:"input"`
	Tools    []llm.ToolDef `json:"tools,omitempty"`
	// CheckIns names the tools every call of which waits for a decision.
	CheckIns []string `json:"checkIns,omitempty"`
	// ToolQueue is the task queue of the replica holding the live tool
	// sessions.
	ToolQueue     string        `json:"toolQueue"`
	MaxIterations int           `json:"maxIterations"`
	Heartbeat     time.Duration `json:"heartbeat"`
	ToolTimeout   time.Duration `json:"toolTimeout"`
	ToolStart     time.Duration `json:"toolStart"`
	ModelTimeout  time.Duration `json:"modelTimeout"`
	ModelAttempts int32         `json:"modelAttempts"`
}

// TurnResult is how a turn workflow ended.
type TurnResult struct {
	// Outcome is "completed", "interrupted" or "failed".
	Outcome string `json:"outcome"`
	// Answer is the model's final text, if any.
	Answer string `json:"answer,omitempty"`
	// Problem says why a failed turn failed.
	Problem string `json:"problem,omitempty"`
	// Activity describes each tool call, in order.
	Activity []string `json:"activity,omitempty"`
	// Added is what the turn added to the conversation.
	Added []llm.Message `json:"added"`
}

// Ask is a check-in the workflow waits on.
type Ask struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
	Tool   string `json:"tool"`
}

// Stop is where a turn stands, as the advance update reports it: waiting
// on Ask, or done with Result.
type Stop struct {
	Ask    *Ask        `json:"ask,omitempty"`
	Done   bool        `json:"done"`
	Result *TurnResult `json:"result,omitempty"`
}

// Decision answers an Ask (the decision signal).
type Decision struct {
	RequestID string `json:"requestId"`
	Approve   bool   `json:"approve"`
	Note      string `json:"note,omitempty"`
}

// ModelInput is a model activity's input.
type ModelInput struct {
	System   string        `json:"system,omitempty"`
	Messages []llm.Message `json:"messages"`
	Tools    []llm.ToolDef `json:"tools,omitempty"`
}

// ToolInput is a tool activity's input.
type ToolInput struct {
	SessionID string         `json:"sessionId"`
	RunID     string         `json:"runId"`
	Identity  *tool.Identity `json:"identity,omitempty"`
	Call      llm.ToolCall   `json:"call"`
}

// RecordInput is a record activity's input: a pause to note, or a turn to
// commit to the stored conversation.
type RecordInput struct {
	Binding  string         `json:"binding"`
	TurnID   string         `json:"turnId"`
	Identity *tool.Identity `json:"identity,omitempty"`
	Ask      *Ask           `json:"ask,omitempty"`
	Added    []llm.Message  `json:"added,omitempty"`
	Done     bool           `json:"done"`
}

// turnState is the workflow's own state, read by its handlers.
type turnState struct {
	stop        Stop
	decisions   map[string]Decision
	interrupted bool
}

// TurnWorkflow is the turn loop: model, tool calls, model … until an
// answer, an interrupt or the iteration bound; a check-in waits for the
// decision signal. It is deterministic: everything it learns comes
// through activities and signals, recorded in the history.
func TurnWorkflow(ctx workflow.Context, in TurnInput) (TurnResult, error) {
	st := &turnState{decisions: map[string]Decision{}}
	tctx, cancel := workflow.WithCancel(ctx)
	if err := workflow.SetUpdateHandler(ctx, updateAdvance, func(ctx workflow.Context, ack string) (Stop, error) {
		err := workflow.Await(ctx, func() bool {
			return st.stop.Done || (st.stop.Ask != nil && st.stop.Ask.ID != ack)
		})
		return st.stop, err
	}); err != nil {
		return TurnResult{}, err
	}
	decisions := workflow.GetSignalChannel(ctx, signalDecision)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var d Decision
			decisions.Receive(ctx, &d)
			if _, seen := st.decisions[d.RequestID]; !seen {
				st.decisions[d.RequestID] = d
			}
		}
	})
	stops := workflow.GetSignalChannel(ctx, signalStop)
	workflow.Go(ctx, func(ctx workflow.Context) {
		stops.Receive(ctx, nil)
		st.interrupted = true
		cancel()
	})

	res := runLoop(tctx, in, st)

	// The turn is committed to the store even when it was interrupted: a
	// context of its own, since tctx may be cancelled.
	rctx := workflow.WithActivityOptions(ctx, recordOptions())
	if err := workflow.ExecuteActivity(rctx, recordActivity, RecordInput{Binding: in.Binding, TurnID: in.TurnID,
		Identity: in.Identity, Added: res.Added, Done: true}).Get(rctx, nil); err != nil {
		res.Outcome, res.Problem = "failed", "the turn could not be saved: "+err.Error()
	}
	st.stop = Stop{Done: true, Result: &res}
	// Answer every advance in flight before the workflow ends.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return res, nil
}

func recordOptions() workflow.ActivityOptions {
	return workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 10}}
}

// runLoop runs the model and tools until the turn ends. Added holds the
// messages through the last complete exchange, so a stored conversation
// never ends with a tool call that has no result.
func runLoop(ctx workflow.Context, in TurnInput, st *turnState) TurnResult {
	msgs := append(append([]llm.Message(nil), in.Messages...), llm.Message{Role: llm.RoleUser, Content: in.Input})
	base := len(in.Messages)
	res := TurnResult{Outcome: "failed"}
	safe := len(msgs)
	added := func() []llm.Message { return append([]llm.Message(nil), msgs[base:safe]...) }

	mctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: in.ModelTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 30 * time.Second, MaximumAttempts: in.ModelAttempts},
	})
	tctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              in.ToolQueue,
		ScheduleToStartTimeout: in.ToolStart,
		StartToCloseTimeout:    in.ToolTimeout,
		HeartbeatTimeout:       in.Heartbeat,
		// Never run a tool call again on our own: its side effects may
		// have happened.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	asks := 0
	for range in.MaxIterations {
		if st.interrupted {
			res.Outcome, res.Added = "interrupted", added()
			return res
		}
		var resp llm.Response
		err := workflow.ExecuteActivity(mctx, modelActivity, ModelInput{System: in.System, Messages: msgs, Tools: in.Tools}).Get(mctx, &resp)
		switch {
		case st.interrupted:
			res.Outcome, res.Added = "interrupted", added()
			return res
		case err != nil:
			res.Problem, res.Added = "the model call failed: "+cause(err), added()
			return res
		}
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls})
		if len(resp.ToolCalls) == 0 {
			safe = len(msgs)
			res.Outcome, res.Answer, res.Added = "completed", resp.Text, added()
			return res
		}
		for _, c := range resp.ToolCalls {
			var r tool.Result
			if isCheckIn(in.CheckIns, c.Name) {
				asks++
				ask := &Ask{ID: fmt.Sprintf("%s.ask%d", in.TurnID, asks), Tool: c.Name,
					Prompt: fmt.Sprintf("The agent wants to call %s with %s. Go ahead?", c.Name, clip(string(c.Args), 2000))}
				rctx := workflow.WithActivityOptions(ctx, recordOptions())
				if err := workflow.ExecuteActivity(rctx, recordActivity, RecordInput{Binding: in.Binding, TurnID: in.TurnID,
					Identity: in.Identity, Ask: ask}).Get(rctx, nil); err != nil && !st.interrupted {
					res.Problem, res.Added = "the pause could not be saved: "+cause(err), added()
					return res
				}
				st.stop = Stop{Ask: ask}
				_ = workflow.Await(ctx, func() bool { _, ok := st.decisions[ask.ID]; return ok || st.interrupted })
				st.stop = Stop{}
				if st.interrupted {
					res.Outcome, res.Added = "interrupted", added()
					return res
				}
				if d := st.decisions[ask.ID]; !d.Approve {
					r = tool.Result{IsError: true, Content: "A person declined this call; it did not run."}
					if d.Note != "" {
						r.Content += " Their note: " + d.Note
					}
					res.Activity = append(res.Activity, c.Name+": declined")
					msgs = append(msgs, toolMessage(c, r))
					continue
				}
			}
			err := workflow.ExecuteActivity(tctx, toolActivity, ToolInput{SessionID: in.SessionID, RunID: in.TurnID,
				Identity: in.Identity, Call: c}).Get(tctx, &r)
			if err != nil {
				if st.interrupted {
					res.Outcome, res.Added = "interrupted", added()
					return res
				}
				r = tool.Result{IsError: true, Content: lostText(err, in)}
				res.Activity = append(res.Activity, c.Name+": lost")
			} else {
				res.Activity = append(res.Activity, c.Name+": ran")
			}
			msgs = append(msgs, toolMessage(c, r))
		}
		safe = len(msgs)
	}
	res.Problem = fmt.Sprintf("the turn reached its bound of %d model calls; ask for less, or raise MaxIterations", in.MaxIterations)
	res.Added = added()
	return res
}

func toolMessage(c llm.ToolCall, r tool.Result) llm.Message {
	return llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Content: r.Content, IsError: r.IsError}
}

// lostText tells the model what became of a tool call that did not come
// back, without claiming to know whether it took effect.
func lostText(err error, in TurnInput) string {
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		switch te.TimeoutType().String() {
		case "ScheduleToStart":
			return fmt.Sprintf("This tool call was lost before it started: the replica holding this conversation's live sessions did not take it within %s. It did not run and will not be retried; its live state (interpreter variables, processes, files) may be gone.", in.ToolStart)
		case "Heartbeat":
			return fmt.Sprintf("This tool call was lost while it ran: the worker running it stopped answering (no heartbeat for %s). It may or may not have taken effect and will not be re-run; the live state it used (interpreter variables, processes, files) may be gone. Check before repeating it.", in.Heartbeat)
		case "StartToClose":
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

func isCheckIn(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

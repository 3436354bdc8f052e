package durable_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/tool"
)

// A tool call whose worker stops heartbeating is attempted once, and the
// model is told it was lost.
func TestWorkflowLostToolCallIsNotRetried(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	m := &toucher{}
	env.RegisterActivityWithOptions(func(ctx context.Context, in durable.ModelInput) (llm.Response, error) {
		return m.Generate(ctx, llm.Request{Messages: in.Messages})
	}, activity.RegisterOptions{Name: "agentry.model"})
	calls := 0
	env.RegisterActivityWithOptions(func(context.Context, durable.ToolInput) (tool.Outcome, error) {
		calls++
		return tool.Outcome{}, temporal.NewTimeoutError(enums.TIMEOUT_TYPE_HEARTBEAT, nil)
	}, activity.RegisterOptions{Name: "agentry.tool"})
	env.RegisterActivityWithOptions(func(context.Context, durable.RecordInput) error { return nil },
		activity.RegisterOptions{Name: "agentry.record"})
	env.RegisterActivityWithOptions(func(context.Context, durable.MarkInput) error { return nil },
		activity.RegisterOptions{Name: "agentry.mark"})
	env.ExecuteWorkflow(durable.TurnWorkflow, durable.TurnInput{TurnID: "t1", Input: "touch a", Tools: touchDefs, ToolQueue: "q", MaxIterations: 4,
		Heartbeat: 2 * time.Second, ToolTimeout: time.Minute, ToolStart: time.Minute, ModelTimeout: time.Minute, ModelAttempts: 3})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res durable.TurnResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("the tool activity ran %d times, want once", calls)
	}
	if res.Outcome != "completed" || !strings.Contains(res.Answer, "lost while it ran") {
		t.Fatalf("result %+v", res)
	}
	if len(res.Steps) == 0 || !res.Steps[0].IsError || res.Steps[0].ErrorClass != "lost" {
		t.Fatalf("the lost call's step: %+v", res.Steps)
	}
	raw, _ := json.Marshal(res.Added)
	if !strings.Contains(string(raw), `"isError":true`) {
		t.Fatalf("the lost call is not an error result in the conversation: %s", raw)
	}
}

// A model call the session's replica does not take within PinnedStart
// goes to the shared queue, and so do the turn's later model calls; tool
// calls and the turn's mark stay on the replica's queue.
func TestWorkflowModelCallsLeaveAnAbsentReplica(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	m := &toucher{}
	var queues []string
	env.RegisterActivityWithOptions(func(ctx context.Context, in durable.ModelInput) (llm.Response, error) {
		q := activity.GetInfo(ctx).TaskQueue
		queues = append(queues, "model@"+q)
		if q == "replica" {
			return llm.Response{}, temporal.NewTimeoutError(enums.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
		}
		return m.Generate(ctx, llm.Request{Messages: in.Messages})
	}, activity.RegisterOptions{Name: "agentry.model"})
	env.RegisterActivityWithOptions(func(ctx context.Context, in durable.ToolInput) (tool.Outcome, error) {
		queues = append(queues, "tool@"+activity.GetInfo(ctx).TaskQueue)
		return tool.Outcome{Result: tool.Result{Content: "touched " + in.Call.Call.ID}}, nil
	}, activity.RegisterOptions{Name: "agentry.tool"})
	env.RegisterActivityWithOptions(func(context.Context, durable.RecordInput) error { return nil },
		activity.RegisterOptions{Name: "agentry.record"})
	env.RegisterActivityWithOptions(func(ctx context.Context, _ durable.MarkInput) error {
		queues = append(queues, "mark@"+activity.GetInfo(ctx).TaskQueue)
		return nil
	}, activity.RegisterOptions{Name: "agentry.mark"})
	env.ExecuteWorkflow(durable.TurnWorkflow, durable.TurnInput{TurnID: "t1", Input: "touch a", Tools: touchDefs, ToolQueue: "replica", MaxIterations: 4,
		Heartbeat: 2 * time.Second, ToolTimeout: time.Minute, ToolStart: time.Minute, PinnedStart: 5 * time.Second,
		ModelTimeout: time.Minute, ModelAttempts: 3})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res durable.TurnResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Outcome != "completed" || res.Answer != "done: touched call-0" {
		t.Fatalf("result %+v", res)
	}
	want := "model@replica model@default-test-taskqueue tool@replica model@default-test-taskqueue mark@replica"
	if got := strings.Join(queues, " "); got != want {
		t.Fatalf("the activities ran on %s\nwant %s", got, want)
	}
	if len(res.Steps) != 2 || res.Steps[0].Tool != "touch" || res.Steps[1].Text != res.Answer {
		t.Fatalf("steps %+v", res.Steps)
	}
}

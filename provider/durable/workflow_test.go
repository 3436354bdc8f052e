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
	env.RegisterActivityWithOptions(func(context.Context, durable.ToolInput) (tool.Result, error) {
		calls++
		return tool.Result{}, temporal.NewTimeoutError(enums.TIMEOUT_TYPE_HEARTBEAT, nil)
	}, activity.RegisterOptions{Name: "agentry.tool"})
	env.RegisterActivityWithOptions(func(context.Context, durable.RecordInput) error { return nil },
		activity.RegisterOptions{Name: "agentry.record"})
	env.RegisterActivityWithOptions(func(context.Context, durable.MarkInput) error { return nil },
		activity.RegisterOptions{Name: "agentry.mark"})
	env.ExecuteWorkflow(durable.TurnWorkflow, durable.TurnInput{TurnID: "t1", Input: "touch a", ToolQueue: "q", MaxIterations: 4,
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
	raw, _ := json.Marshal(res.Added)
	if !strings.Contains(string(raw), `"isError":true`) {
		t.Fatalf("the lost call is not an error result in the conversation: %s", raw)
	}
}

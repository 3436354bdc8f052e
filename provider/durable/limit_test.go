package durable_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentry-dev/agentry/internal/temporaltest"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/tool"
)

// requests records every request a model gets.
type requests struct {
	llm.Model
	mu   sync.Mutex
	seen []llm.Request
}

func (m *requests) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.seen = append(m.seen, req)
	m.mu.Unlock()
	return m.Model.Generate(ctx, req)
}

func (m *requests) all() []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]llm.Request(nil), m.seen...)
}

// A durable turn whose caller's limit is crossed after its first tool
// call finishes that step, then gets exactly one model call with tool
// calls withheld and the reason told; the tool call the model asks for
// on it does not run; the limit is asked in the caller's process, where
// its crossing is told once; and the turn's history replays.
func TestLimitWrapsUpADurableTurn(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	model := &requests{Model: &toucher{}}
	r, file := touchReplica(t, c, model, false)
	ctx := context.Background()
	s := openS1(t, r)

	const capName = "the daily tokens cap of principal alice"
	var (
		asked    []llm.TurnUsage
		crossing sync.Once
		crossed  int
	)
	limit := func(u llm.TurnUsage) string {
		asked = append(asked, u) // activities of one turn run one after another
		if u.ToolCalls["touch"] >= 1 {
			crossing.Do(func() { crossed++ })
			return capName
		}
		return ""
	}
	outs := collect(t, s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "touch a,b,c", Limit: limit}))
	if got := last(outs); got.Kind != provider.OutputTurnCompleted || got.Outcome != provider.OutcomeCompleted {
		t.Fatalf("the turn ended with %+v", got)
	}
	if got := lines(t, file); strings.Join(got, ",") != "a" {
		t.Fatalf("the tool ran for %v, want a only (the step before the crossing)", got)
	}
	reqs := model.all()
	if len(reqs) != 2 || reqs[0].NoToolCalls || !reqs[1].NoToolCalls {
		t.Fatalf("%d model calls; want 2, the second (only) with tool calls withheld", len(reqs))
	}
	if note := reqs[1].Messages[len(reqs[1].Messages)-1]; note.Role != llm.RoleUser || !strings.Contains(note.Content, capName) {
		t.Fatalf("the wrap-up call was not told which cap: %+v", note)
	}
	if len(reqs[1].Tools) == 0 {
		t.Fatal("the wrap-up call dropped the tool descriptions its conversation refers to")
	}
	if len(asked) != 1 || asked[0].ModelCalls != 1 || asked[0].ToolCalls["touch"] != 1 || crossed != 1 {
		t.Fatalf("the limit was asked with %+v and crossed %d times; want once, after one model call and one tool call", asked, crossed)
	}
	var usage *llm.TurnUsage
	for _, o := range outs {
		if o.Kind == provider.OutputUsage {
			usage = o.Usage
		}
	}
	if usage == nil || usage.ModelCalls != 2 || usage.ToolCalls["touch"] != 1 {
		t.Fatalf("the turn's usage %+v: want 2 model calls and 1 tool call", usage)
	}

	wid := durable.WorkflowID(s.Binding(), "t1")
	var res durable.TurnResult
	if err := c.GetWorkflow(ctx, wid, "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Limited != capName {
		t.Fatalf("the result names %q as the crossed limit, want %q", res.Limited, capName)
	}
	if n := scheduled(t, c, wid)["agentry.limit"]; n != 1 {
		t.Fatalf("the history holds %d limit activities, want 1", n)
	}
	replay(t, c, wid)
}

// A turn without a limit asks nothing: its history has no limit
// activity, as before limits existed.
func TestUnlimitedDurableTurnAsksNothing(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	r, file := touchReplica(t, c, &toucher{}, false)
	ctx := context.Background()
	s := openS1(t, r)
	collect(t, s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "touch a,b"}))
	if got := lines(t, file); strings.Join(got, ",") != "a,b" {
		t.Fatalf("the tool ran for %v, want a,b", got)
	}
	wid := durable.WorkflowID(s.Binding(), "t1")
	if n := scheduled(t, c, wid)["agentry.limit"]; n != 0 {
		t.Fatalf("an unlimited turn asked its limit %d times", n)
	}
	replay(t, c, wid)
}

// scheduled counts the activities the workflow's history schedules, by
// name.
func scheduled(t *testing.T, c client.Client, wid string) map[string]int {
	t.Helper()
	n := map[string]int{}
	it := c.GetWorkflowHistory(context.Background(), wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			n[a.GetActivityType().GetName()]++
		}
	}
	return n
}

// replay runs the workflow's history through a replayer: the workflow
// code makes the same decisions from it.
func replay(t *testing.T, c client.Client, wid string) {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	rp := worker.NewWorkflowReplayer()
	rp.RegisterWorkflowWithOptions(durable.TurnWorkflow, workflow.RegisterOptions{Name: durable.WorkflowName})
	if err := rp.ReplayWorkflowHistory(nil, &historypb.History{Events: events}); err != nil {
		t.Fatalf("replaying the turn's history: %v", err)
	}
}

// A limit nobody can ask (the caller holding it is gone) counts as
// crossed: the turn wraps up and says why, never runs on unchecked.
func TestWorkflowUnaskableLimitWrapsUp(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	m := &requests{Model: &toucher{}}
	env.RegisterActivityWithOptions(func(ctx context.Context, in durable.ModelInput) (llm.Response, error) {
		return m.Generate(ctx, llm.Request{Messages: in.Messages, NoToolCalls: in.NoToolCalls})
	}, activity.RegisterOptions{Name: "agentry.model"})
	tools := 0
	env.RegisterActivityWithOptions(func(_ context.Context, in durable.ToolInput) (tool.Outcome, error) {
		tools++
		return tool.Outcome{Result: tool.Result{Content: "touched"}}, nil
	}, activity.RegisterOptions{Name: "agentry.tool"})
	env.RegisterActivityWithOptions(func(context.Context, durable.LimitInput) (string, error) {
		return "", temporal.NewNonRetryableApplicationError("the caller holding the turn's budget is no longer on this replica", "limit", nil)
	}, activity.RegisterOptions{Name: "agentry.limit"})
	env.RegisterActivityWithOptions(func(context.Context, durable.RecordInput) error { return nil },
		activity.RegisterOptions{Name: "agentry.record"})
	env.RegisterActivityWithOptions(func(context.Context, durable.MarkInput) error { return nil },
		activity.RegisterOptions{Name: "agentry.mark"})
	env.ExecuteWorkflow(durable.TurnWorkflow, durable.TurnInput{TurnID: "t1", Input: "touch a,b,c", Tools: touchDefs, ToolQueue: "q",
		MaxIterations: 8, Heartbeat: 2 * time.Second, ToolTimeout: time.Minute, ToolStart: time.Minute, ModelTimeout: time.Minute,
		ModelAttempts: 3, Limited: true})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res durable.TurnResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	reqs := m.all()
	if tools != 1 || len(reqs) != 2 || !reqs[1].NoToolCalls {
		t.Fatalf("%d tool calls, %d model calls; want 1 and 2, the last with tool calls withheld", tools, len(reqs))
	}
	if !strings.Contains(res.Limited, "could not be checked") || !strings.Contains(res.Limited, "no longer on this replica") {
		t.Fatalf("the turn does not say why it wrapped up: %q", res.Limited)
	}
}

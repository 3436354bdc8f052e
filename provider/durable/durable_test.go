package durable_test

import (
	"bufio"
	"context"
	"github.com/agentry-dev/agentry/internal/temporaltest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

func TestTurnWithToolCall(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	file := filepath.Join(t.TempDir(), "touched")
	store := native.NewMemoryStore(0)
	model := &toucher{}
	r := openReplica(t, c, durable.Config{TaskQueue: uniq(t), Replica: "r1", Model: model,
		Tools: []tool.Tool{touchTool(file, false, nil)}, Store: store})
	ctx := context.Background()
	s := openS1(t, r)

	outs := collect(t, s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "touch a,b"}))
	if got := last(outs); got.Kind != provider.OutputTurnCompleted || got.Outcome != provider.OutcomeCompleted {
		t.Fatalf("the turn ended with %+v", got)
	}
	if got, want := textOf(outs), "done: touched a | touched b"; got != want {
		t.Fatalf("answer %q, want %q", got, want)
	}
	if got := lines(t, file); strings.Join(got, ",") != "a,b" {
		t.Fatalf("the tool ran for %v, want a,b once each", got)
	}
	// The workflow committed the turn: the next turn sees it.
	rec, err := store.Load(ctx, s.Binding())
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Turns) != 1 || rec.Turns[0].ID != "t1" || len(rec.Conversation.Messages) != 6 {
		t.Fatalf("stored %d turns, %d messages; want 1 turn (t1) of 6 messages", len(rec.Turns), len(rec.Conversation.Messages))
	}
	outs = collect(t, s.RunTurn(ctx, provider.TurnRequest{TurnID: "t2", Input: "hello"}))
	if got := textOf(outs); got != "done: " {
		t.Fatalf("second turn answered %q", got)
	}
	if n := len(model.last.Messages); n != 7 {
		t.Fatalf("the second turn's model call saw %d messages, want 7 (the first turn's 6 and the new one)", n)
	}
}

func TestPauseSurvivesRestart(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	file := filepath.Join(t.TempDir(), "touched")
	store := native.NewMemoryStore(0)
	cfg := durable.Config{TaskQueue: uniq(t), Replica: "r1", Model: &toucher{},
		Tools: []tool.Tool{touchTool(file, true, nil)}, Store: store}
	ctx := context.Background()

	first := openReplica(t, c, cfg)
	s, err := first.inst.Adapter().Create(ctx, provider.CreateRequest{SessionID: "s1", WorkingDirectory: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	outs := collect(t, s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "touch a"}))
	req := last(outs)
	if req.Kind != provider.OutputRequest || req.Request.Kind != provider.RequestApproval || req.Request.Tool != "touch" {
		t.Fatalf("the turn ended with %+v, want an approval request for touch", req)
	}
	if got := lines(t, file); len(got) != 0 {
		t.Fatalf("the tool ran before the decision: %v", got)
	}
	binding := s.Binding()
	if err := s.Close(ctx, provider.CloseShutdown); err != nil {
		t.Fatal(err)
	}
	first.stop(t) // the replica goes; the workflow waits on the server

	second := openReplica(t, c, cfg)
	s2, err := second.inst.Adapter().Resume(ctx, provider.ResumeRequest{SessionID: "s1", WorkingDirectory: t.TempDir(), Binding: binding})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx, provider.CloseRequested)
	turnID, pending, ok := s2.Pending()
	if !ok || turnID != "t1" || pending.ID != req.Request.ID {
		t.Fatalf("the resumed session waits on %q %+v %v, want turn t1 and request %s", turnID, pending, ok, req.Request.ID)
	}
	outs = collect(t, s2.Resolve(ctx, provider.Resolution{TurnID: "t1", RequestID: pending.ID, Approve: true}))
	if got := last(outs); got.Kind != provider.OutputTurnCompleted || got.Outcome != provider.OutcomeCompleted {
		t.Fatalf("the resolved turn ended with %+v", got)
	}
	if got := textOf(outs); got != "done: touched a" {
		t.Fatalf("answer %q", got)
	}
	if got := lines(t, file); strings.Join(got, ",") != "a" {
		t.Fatalf("the tool ran for %v, want a once", got)
	}
	if _, _, ok := s2.Pending(); ok {
		t.Fatal("the session still reports a pending request")
	}
}

func TestDeclinedCheckIn(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	r, file := touchReplica(t, c, &toucher{}, true)
	ctx := context.Background()
	s := openS1(t, r)
	req := last(collect(t, s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "touch a"})))
	if req.Request == nil {
		t.Fatalf("no request: %+v", req)
	}
	outs := collect(t, s.Resolve(ctx, provider.Resolution{TurnID: "t1", RequestID: req.Request.ID, Note: "not today"}))
	if got := textOf(outs); !strings.Contains(got, "declined") || !strings.Contains(got, "not today") {
		t.Fatalf("the model was not told of the refusal: %q", got)
	}
	// What the resolution shows, in order, each once (and nothing of what
	// the turn showed before its pause).
	var shape []string
	for _, o := range outs {
		shape = append(shape, string(o.Kind)+":"+o.Text)
	}
	want := []string{"activity:calling touch", "activity:touch was declined", "text:" + textOf(outs), "usage:", "turn.completed:"} // the turn's usage comes just before its end
	if !slices.Equal(shape, want) {
		t.Fatalf("the resolution's outputs %q\nwant %q", shape, want)
	}
	if got := lines(t, file); len(got) != 0 {
		t.Fatalf("a declined call ran: %v", got)
	}
}

// TestKilledReplica kills (SIGKILL) the only worker of a turn — the one
// that ran its workflow and holds its tool calls — while a tool call is in
// flight, then starts the replica again in this process. The workflow is
// replayed from its history on a worker that never saw it: the tool call
// that completed is not run again, the one in flight is reported to the
// model as lost within the heartbeat timeout, and not re-run.
func TestKilledReplica(t *testing.T) {
	addr := temporaltest.Addr(t)
	c := dial(t, addr)
	file := filepath.Join(t.TempDir(), "touched")
	queue := uniq(t)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "AGENTRY_DURABLE_CHILD=1", "AGENTRY_TEST_TEMPORAL="+addr,
		"AGENTRY_DURABLE_QUEUE="+queue, "AGENTRY_DURABLE_REPLICA=r1", "AGENTRY_DURABLE_FILE="+file)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	said := bufio.NewScanner(out)
	expect := func(line string) {
		t.Helper()
		for said.Scan() {
			if said.Text() == line {
				return
			}
		}
		t.Fatalf("the child replica ended before saying %q", line)
	}
	expect("ready")

	ctx := context.Background()
	store := native.NewMemoryStore(0)
	binding := provider.Binding("durable-killed-replica-" + queue) // unique: the Temporal server is shared
	if err := store.Save(ctx, binding, native.Record{}); err != nil {
		t.Fatal(err)
	}
	heartbeat := 2 * time.Second
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "agentry/" + string(binding) + "/t1", TaskQueue: queue},
		durable.WorkflowName, durable.TurnInput{Binding: string(binding), SessionID: "s1", TurnID: "t1",
			Input: "touch one,hang,three", Tools: touchDefs, ToolQueue: queue + "@r1", MaxIterations: 8,
			Heartbeat: heartbeat, ToolTimeout: time.Minute, ToolStart: time.Minute, ModelTimeout: time.Minute, ModelAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	expect("hanging")
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true
	died := time.Now()

	model := &toucher{}
	openReplica(t, c, durable.Config{TaskQueue: queue, Replica: "r1", Model: model,
		Tools: []tool.Tool{touchTool(file, false, nil)}, Store: store, Heartbeat: heartbeat})
	var res durable.TurnResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	took := time.Since(died)
	if res.Outcome != "completed" {
		t.Fatalf("outcome %q (%s)", res.Outcome, res.Problem)
	}
	parts := strings.Split(strings.TrimPrefix(res.Answer, "done: "), " | ")
	if len(parts) != 3 || parts[0] != "touched one" || !strings.Contains(parts[1], "lost while it ran") || parts[2] != "touched three" {
		t.Fatalf("the model was told %q; want one touched, hang lost, three touched", res.Answer)
	}
	// One line per call that started: "one" ran before the kill and was
	// not repeated by the replay; "hang" was in flight and not re-run.
	if got := strings.Join(lines(t, file), ","); got != "one,hang,three" {
		t.Fatalf("the tool's side effects: %s, want one,hang,three once each", got)
	}
	if took > 10*heartbeat {
		t.Fatalf("the lost call was noticed %s after the kill; the heartbeat timeout is %s", took, heartbeat)
	}
	t.Logf("lost call reported %s after the kill (heartbeat timeout %s)", took.Round(100*time.Millisecond), heartbeat)
	rec, err := store.Load(ctx, binding)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Turns) != 1 || len(rec.Conversation.Messages) != 8 {
		t.Fatalf("stored %d turns and %d messages, want 1 and 8", len(rec.Turns), len(rec.Conversation.Messages))
	}
}

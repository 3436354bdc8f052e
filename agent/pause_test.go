package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// approvalScript: open a run-scoped note, ask to deploy (a check-in tool),
// write to the note again, answer.
func approvalScript() *scripted.Model {
	return scripted.New(
		calls(call("notes", `{"append":"before"}`)),
		calls(call("deploy", `{"target":"prod"}`)),
		calls(call("notes", `{"append":"after"}`)),
		answer("deployed"))
}

type deployArgs struct {
	Target string `json:"target"`
}

func deployTool(ran *atomic.Int32) tool.Tool {
	return tool.WithCheckIn(tool.Func("deploy", "deploys", func(ctx context.Context, c *tool.Call, in deployArgs) (string, error) {
		ran.Add(1)
		return "deployed to " + in.Target, nil
	}))
}

// The question shows the model's arguments up to a bound: the model
// writes them, and the question is stored and shown to a person.
func TestACheckInQuestionIsBounded(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	long := `{"target":"` + strings.Repeat("é", 3000) + `"}`
	a, _ := newAgent(t, agent.Options{Model: scripted.New(calls(call("deploy", long)), answer("done")), Tools: []tool.Tool{deployTool(&ran)}})
	res, err := a.Run(bg(), agent.Input{Message: "ship it"})
	if err != nil || res.Paused == nil {
		t.Fatalf("%+v %v", res, err)
	}
	q := res.Paused.Question
	if len(q) > 2200 || !utf8.ValidString(q) || !strings.Contains(q, fmt.Sprintf("of %d bytes shown", len(long))) || !strings.Contains(q, `"deploy"`) {
		t.Fatalf("question of %d bytes: %.200q…", len(q), q)
	}
}

func TestACheckInPausesBeforeTheToolRuns(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, rec := newAgent(t, agent.Options{ID: "ops", Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	res, err := a.Run(bg(), agent.Input{Message: "ship it"})
	if err != nil || res.Paused == nil {
		t.Fatalf("%+v %v", res, err)
	}
	p := res.Paused
	if p.ToolName != "deploy" || !strings.Contains(p.Question, `"deploy"`) || !strings.Contains(p.Question, `{"target":"prod"}`) {
		t.Fatalf("the question must name the tool and show its arguments: %+v", p)
	}
	if ran.Load() != 0 {
		t.Fatal("the check-in tool ran before anyone approved")
	}
	if res.Output != "" || res.Conversation != nil || res.RunID == "" {
		t.Fatalf("%+v", res)
	}
	cp := p.Checkpoint
	if cp.Version != agent.CheckpointVersion || cp.RunID != res.RunID || cp.Agent != "ops" || len(cp.Waiting) != 1 {
		t.Fatalf("checkpoint %+v", cp)
	}
	if ends := rec.turnEnds(); len(ends) != 1 || ends[0].Outcome != event.OutcomePaused {
		t.Fatalf("turn ends %+v", ends)
	}
	if pr := rec.of(event.TypePauseRequest); len(pr) != 1 || pr[0].Payload.(*event.PauseRequest).Tool != "deploy" || pr[0].Meta.RunID != res.RunID {
		t.Fatalf("pause request %+v", pr)
	}
	// The checkpoint is plain JSON and holds nothing live.
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil || generic["version"] != float64(1) {
		t.Fatalf("%s: %v", b, err)
	}
}

func TestARunScopedSessionSurvivesAPauseAndClosesOnceAtTheRealTerminal(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, rec := newAgent(t, agent.Options{Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	res, err := a.Run(bg(), agent.Input{Message: "ship it"})
	if err != nil || res.Paused == nil {
		t.Fatal(res, err)
	}
	dirs := w.dirs()
	if len(dirs) != 1 || len(rec.closeEvents()) != 0 || a.LiveToolSessions() != 1 {
		t.Fatalf("a pause closed the run's session: open %v, closes %+v", dirs, rec.closeEvents())
	}
	if _, err := os.Stat(dirs[0]); err != nil {
		t.Fatal(err)
	}
	res2, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true})
	if err != nil || res2.Output != "deployed" {
		t.Fatalf("%+v %v", res2, err)
	}
	if res2.RunID != res.RunID {
		t.Fatalf("resume ran as %s, the run was %s", res2.RunID, res.RunID)
	}
	msgs := toolMessages(res2.Conversation)
	if msgs[1].Content != "deployed to prod" || msgs[2].Content != "before | after" {
		t.Fatalf("the session opened before the pause was not reused after it: %+v", msgs)
	}
	seen := w.seen()
	if len(seen) != 2 || seen[0].Reused || !seen[1].Reused || seen[1].RunID != res.RunID {
		t.Fatalf("calls %+v", seen)
	}
	cl := rec.of(tool.TypeSessionClosed)
	if len(cl) != 1 || cl[0].Payload.(*tool.SessionClosed).Reason != "run-end" || cl[0].Meta.RunID != res.RunID {
		t.Fatalf("closes %+v", cl)
	}
	if open, opened, closed := w.stats(); open != 0 || opened != 1 || closed != 1 {
		t.Fatalf("open %d opened %d closed %d", open, opened, closed)
	}
	if _, err := os.Stat(dirs[0]); !os.IsNotExist(err) {
		t.Fatal("the workspace outlived the run")
	}
	ends := rec.turnEnds()
	if len(ends) != 2 || ends[1].Outcome != event.OutcomeAnswer {
		t.Fatalf("turn ends %+v", ends)
	}
	starts := rec.of(event.TypeTurnStart)
	if !starts[1].Payload.(*event.TurnStart).Resumed {
		t.Fatal("the resumed turn is not marked")
	}
	if pr := rec.of(event.TypePauseResume); len(pr) != 1 || !pr[0].Payload.(*event.PauseResume).Approved || pr[0].Meta.RunID != res.RunID {
		t.Fatalf("pause resume %+v", pr)
	}
}

func TestADeclineTellsTheModelWithTheNote(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	m := scripted.New(calls(call("deploy", `{"target":"prod"}`)), answer("ok, not deploying"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	res, _ := a.Run(bg(), agent.Input{Message: "ship it"})
	res2, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: false, Note: "not on a Friday"})
	if err != nil || res2.Output != "ok, not deploying" {
		t.Fatalf("%+v %v", res2, err)
	}
	msg := toolMessages(res2.Conversation)[0]
	if !msg.IsError || !strings.Contains(msg.Content, "declined") || !strings.Contains(msg.Content, "not on a Friday") {
		t.Fatalf("%+v", msg)
	}
	if ran.Load() != 0 {
		t.Fatal("a declined tool ran")
	}
	if ends := rec.of(tool.TypeCallEnd); ends[0].Payload.(*tool.CallEnd).ErrorClass != "declined" {
		t.Fatalf("%+v", ends[0].Payload)
	}
	if pr := rec.of(event.TypePauseResume); pr[0].Payload.(*event.PauseResume).Approved {
		t.Fatal("pause resume says approved")
	}
}

func TestACheckpointResumesInANewProcess(t *testing.T) {
	t.Parallel()
	alice := &tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "c-1"}
	key := []byte("a shared secret for checkpoints")

	w1 := newWorkspaces(t)
	var ran1 atomic.Int32
	a1, _ := newAgent(t, agent.Options{ID: "ops", Model: approvalScript(), CheckpointKey: key,
		Tools: []tool.Tool{w1.tool("notes", toolsession.ScopeRun), deployTool(&ran1)}})
	res, err := a1.Run(bg(), agent.Input{Message: "ship it", Identity: alice, SessionID: "s-9"})
	if err != nil || res.Paused == nil {
		t.Fatal(res, err)
	}
	stored, err := json.Marshal(res.Paused.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	// The first process goes away.
	if err := a1.Shutdown(bg()); err != nil {
		t.Fatal(err)
	}

	// A new process: new tools, new agent, the checkpoint from storage.
	w2 := newWorkspaces(t)
	var ran2 atomic.Int32
	a2, rec := newAgent(t, agent.Options{ID: "ops", Model: approvalScript(), CheckpointKey: key,
		Tools: []tool.Tool{deployTool(&ran2), w2.tool("notes", toolsession.ScopeRun)}})
	cp, err := agent.ParseCheckpoint(stored)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := a2.Resume(bg(), cp, agent.Decision{Approve: true})
	if err != nil || res2.Output != "deployed" || res2.RunID != res.RunID {
		t.Fatalf("%+v %v", res2, err)
	}
	if ran2.Load() != 1 || ran1.Load() != 0 {
		t.Fatal("the approved tool did not run exactly once in the new process")
	}
	// The live session is simply re-opened: a new workspace, under the same
	// run and identity.
	seen := w2.seen()
	if len(seen) != 1 || seen[0].Reused || seen[0].RunID != res.RunID || seen[0].SessionID != "s-9" || *seen[0].Identity != *alice {
		t.Fatalf("%+v", seen)
	}
	if msgs := toolMessages(res2.Conversation); msgs[2].Content != "after" {
		t.Fatalf("%+v", msgs)
	}
	if res2.Conversation.Identity == nil || *res2.Conversation.Identity != *alice {
		t.Fatal("the conversation lost its identity")
	}
	for _, e := range rec.all() {
		if e.Meta.RunID != res.RunID || e.Meta.SessionID != "s-9" {
			t.Fatalf("event %s meta %+v", e.Type, e.Meta)
		}
		// Teardown reports know the origin's run and session, not who it
		// was; every other event carries the identity from the checkpoint.
		closing := e.Type == tool.TypeSessionClosed || e.Type == tool.TypeSessionCloseFailed
		if !closing && (e.Meta.Tenant != "acme" || e.Meta.Principal != "alice") {
			t.Fatalf("event %s meta %+v", e.Type, e.Meta)
		}
	}
	if open, _, closed := w2.stats(); open != 0 || closed != 1 {
		t.Fatalf("open %d closed %d", open, closed)
	}
}

func TestResumingTwiceIsRefused(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, _ := newAgent(t, agent.Options{Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	res, _ := a.Run(bg(), agent.Input{Message: "ship it"})
	cp := res.Paused.Checkpoint
	var wg sync.WaitGroup
	var ok, refused atomic.Int32
	for range 8 {
		wg.Go(func() {
			_, err := a.Resume(bg(), cp, agent.Decision{Approve: true})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, agent.ErrAlreadyResumed):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || refused.Load() != 7 || ran.Load() != 1 {
		t.Fatalf("ok %d refused %d ran %d", ok.Load(), refused.Load(), ran.Load())
	}
	if _, err := a.Resume(bg(), cp, agent.Decision{Approve: false}); !errors.Is(err, agent.ErrAlreadyResumed) {
		t.Fatalf("later: %v", err)
	}
}

func TestTwoCheckInsInOneResponsePauseOneAfterTheOther(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	m := scripted.New(calls(call("deploy", `{"target":"a"}`), call("echo", `{}`), call("deploy", `{"target":"b"}`)), answer("done"))
	echo := tool.Func("echo", "echo", func(context.Context, *tool.Call, struct{}) (string, error) { return "echoed", nil })
	a, _ := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{deployTool(&ran), echo}})
	res, _ := a.Run(bg(), agent.Input{Message: "x"})
	if !strings.Contains(res.Paused.Question, `"target":"a"`) {
		t.Fatalf("first pause %q", res.Paused.Question)
	}
	res2, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true})
	if err != nil || res2.Paused == nil || !strings.Contains(res2.Paused.Question, `"target":"b"`) || res2.RunID != res.RunID {
		t.Fatalf("second pause %+v %v", res2, err)
	}
	res3, err := a.Resume(bg(), res2.Paused.Checkpoint, agent.Decision{Approve: false, Note: "one is enough"})
	if err != nil || res3.Output != "done" {
		t.Fatalf("%+v %v", res3, err)
	}
	msgs := toolMessages(res3.Conversation)
	if msgs[0].Content != "deployed to a" || msgs[1].Content != "echoed" || !strings.Contains(msgs[2].Content, "one is enough") {
		t.Fatalf("results out of order or wrong: %+v", msgs)
	}
	if _, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true}); !errors.Is(err, agent.ErrAlreadyResumed) {
		t.Fatalf("an old checkpoint of a run that moved on: %v", err)
	}
}

func TestACheckpointOfAnotherAgentOrToolSetIsRefusedByName(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	notes, deploy := w.tool("notes", toolsession.ScopeRun), deployTool(&ran)
	a, _ := newAgent(t, agent.Options{ID: "ops", Model: approvalScript(), Tools: []tool.Tool{notes, deploy}})
	res, _ := a.Run(bg(), agent.Input{Message: "ship it"})
	cp := res.Paused.Checkpoint

	other, _ := newAgent(t, agent.Options{ID: "support", Model: approvalScript(), Tools: []tool.Tool{notes, deploy}})
	_, err := other.Resume(bg(), cp, agent.Decision{Approve: true})
	var ce *agent.CheckpointError
	if !errors.As(err, &ce) || ce.Field != "agent" || !strings.Contains(err.Error(), `"ops"`) || !strings.Contains(err.Error(), `"support"`) {
		t.Fatalf("other agent: %v", err)
	}
	fewer, _ := newAgent(t, agent.Options{ID: "ops", Model: approvalScript(), Tools: []tool.Tool{notes}})
	_, err = fewer.Resume(bg(), cp, agent.Decision{Approve: true})
	if !errors.As(err, &ce) || ce.Field != "tools" || len(ce.Missing) != 1 || ce.Missing[0] != "deploy" || !strings.Contains(err.Error(), "deploy") {
		t.Fatalf("missing tool: %v", err)
	}
	more, _ := newAgent(t, agent.Options{ID: "ops", Model: approvalScript(), Tools: []tool.Tool{notes, deploy, w.tool("extra", toolsession.ScopeCall)}})
	_, err = more.Resume(bg(), cp, agent.Decision{Approve: true})
	if !errors.As(err, &ce) || len(ce.Unexpected) != 1 || ce.Unexpected[0] != "extra" || !errors.Is(err, agent.ErrCheckpointInvalid) {
		t.Fatalf("extra tool: %v", err)
	}
	bad := cp
	bad.Version = 2
	if _, err := a.Resume(bg(), bad, agent.Decision{}); !errors.As(err, &ce) || ce.Field != "version" || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("version: %v", err)
	}
	// None of those refusals spent the checkpoint.
	if _, err := a.Resume(bg(), cp, agent.Decision{Approve: true}); err != nil {
		t.Fatalf("the right agent: %v", err)
	}
}

func TestASignedCheckpointCannotBeForged(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	key := []byte("k1")
	m := scripted.New(calls(call("deploy", `{"target":"staging"}`)), answer("ok"))
	a, _ := newAgent(t, agent.Options{Model: m, CheckpointKey: key, Tools: []tool.Tool{deployTool(&ran)}})
	res, _ := a.Run(bg(), agent.Input{Message: "x", Identity: &tool.Identity{Tenant: "acme", Principal: "bob"}})
	cp := res.Paused.Checkpoint
	if cp.MAC == "" {
		t.Fatal("not signed")
	}
	forgeries := map[string]func(*agent.Checkpoint){
		"identity": func(c *agent.Checkpoint) { c.Identity = &tool.Identity{Tenant: "acme", Principal: "root"} },
		"arguments": func(c *agent.Checkpoint) {
			c.Messages[len(c.Messages)-1].ToolCalls[0].Args = json.RawMessage(`{"target":"prod"}`)
		},
		"run":      func(c *agent.Checkpoint) { c.RunID = "run-someone-else" },
		"unsigned": func(c *agent.Checkpoint) { c.MAC = "" },
	}
	for name, forge := range forgeries {
		b, _ := json.Marshal(cp)
		f, err := agent.ParseCheckpoint(b) // a deep copy
		if err != nil {
			t.Fatal(err)
		}
		forge(&f)
		_, err = a.Resume(bg(), f, agent.Decision{Approve: true})
		var ce *agent.CheckpointError
		if !errors.As(err, &ce) || ce.Field != "mac" {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := a.AbandonCheckpoint(bg(), f); !errors.As(err, &ce) {
			t.Fatalf("abandon %s: %v", name, err)
		}
	}
	other, _ := newAgent(t, agent.Options{Model: m, CheckpointKey: []byte("k2"), Tools: []tool.Tool{deployTool(&ran)}})
	if _, err := other.Resume(bg(), cp, agent.Decision{Approve: true}); !errors.Is(err, agent.ErrCheckpointInvalid) {
		t.Fatalf("another key: %v", err)
	}
	if ran.Load() != 0 {
		t.Fatal("a forged checkpoint ran the tool")
	}
	if _, err := a.Resume(bg(), cp, agent.Decision{Approve: true}); err != nil || ran.Load() != 1 {
		t.Fatalf("the genuine checkpoint: %v", err)
	}
}

func TestExtraToolsAreTakenAgainAtResume(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	bound := deployTool(&ran) // a host binding's tool, with a check-in
	m := scripted.New(calls(call("deploy", `{"target":"x"}`)), answer("ok"))
	a, _ := newAgent(t, agent.Options{Model: m})
	res, err := a.Run(bg(), agent.Input{Message: "x", Tools: []tool.Tool{bound}})
	if err != nil || res.Paused == nil {
		t.Fatal(res, err)
	}
	cp := res.Paused.Checkpoint
	if len(cp.ExtraTools) != 1 || cp.ExtraTools[0] != "deploy" {
		t.Fatalf("extra tools %v", cp.ExtraTools)
	}
	_, err = a.Resume(bg(), cp, agent.Decision{Approve: true})
	var ce *agent.CheckpointError
	if !errors.As(err, &ce) || ce.Field != "extra tools" || !strings.Contains(err.Error(), "deploy") || !strings.Contains(err.Error(), "ResumeOptions.Tools") {
		t.Fatalf("without the extra tools: %v", err)
	}
	res2, err := a.ResumeWith(bg(), cp, agent.Decision{Approve: true}, agent.ResumeOptions{Tools: []tool.Tool{bound}})
	if err != nil || res2.Output != "ok" || ran.Load() != 1 {
		t.Fatalf("%+v %v", res2, err)
	}
}

func TestAbandoningAPauseClosesItsRunAndRefusesTheCheckpoint(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, rec := newAgent(t, agent.Options{Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})

	// The host closes the conversation while a run of it is paused.
	res, _ := a.Run(bg(), agent.Input{Message: "x", SessionID: "s1"})
	if n := a.CloseToolSessions(bg(), "s1"); n != 1 {
		t.Fatalf("closing the conversation closed %d", n)
	}
	cl := rec.closeEvents()
	if len(cl) != 1 || cl[0].Reason != "run-end" || cl[0].Scope != "run" {
		t.Fatalf("%+v", cl)
	}
	if _, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true}); !errors.Is(err, agent.ErrCheckpointAbandoned) {
		t.Fatalf("resume after close: %v", err)
	}

	// A checkpoint dropped explicitly.
	res, _ = a.Run(bg(), agent.Input{Message: "x"})
	n, err := a.AbandonCheckpoint(bg(), res.Paused.Checkpoint)
	if err != nil || n != 1 {
		t.Fatalf("abandon: %d %v", n, err)
	}
	if n, err := a.AbandonCheckpoint(bg(), res.Paused.Checkpoint); !errors.Is(err, agent.ErrCheckpointAbandoned) || n != 0 {
		t.Fatalf("abandon twice: %d %v", n, err)
	}
	if _, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true}); !errors.Is(err, agent.ErrCheckpointAbandoned) {
		t.Fatalf("resume after abandon: %v", err)
	}

	// A checkpoint already resumed cannot be abandoned: its run lives on.
	res, _ = a.Run(bg(), agent.Input{Message: "x"})
	m2 := res.Paused.Checkpoint
	res2, err := a.Resume(bg(), m2, agent.Decision{Approve: true})
	if err != nil || res2.Output != "deployed" {
		t.Fatal(res2, err)
	}
	if _, err := a.AbandonCheckpoint(bg(), m2); !errors.Is(err, agent.ErrAlreadyResumed) {
		t.Fatalf("abandon a resumed checkpoint: %v", err)
	}
	if open, opened, closed := w.stats(); open != 0 || opened != 3 || closed != 3 {
		t.Fatalf("open %d opened %d closed %d", open, opened, closed)
	}
}

func TestAnUnrelatedConversationCloseLeavesAPauseAlone(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, _ := newAgent(t, agent.Options{Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	res, _ := a.Run(bg(), agent.Input{Message: "x", SessionID: "mine"})
	if n := a.CloseToolSessions(bg(), "theirs"); n != 0 {
		t.Fatalf("closed %d", n)
	}
	if _, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true}); err != nil {
		t.Fatal(err)
	}
}

// askingTool opens a call-scoped workspace, then asks a person before it
// goes on — unless this call runs because a person approved.
func askingTool(w *workspaces) tool.Tool {
	return tool.Func("migrate", "migrates, after asking", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
		dir, err := w.use(c, toolsession.ScopeCall)
		if err != nil {
			return "", err
		}
		if _, ok := tool.ApprovalFrom(ctx); ok {
			return appendNote(dir, "migrated")
		}
		if _, err := appendNote(dir, "planned"); err != nil {
			return "", err
		}
		return "", tool.CheckIn("drop the old table?")
	})
}

func TestAToolCanAskMidCallAndItsCallScopeWaitsForTheAnswer(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	m := scripted.New(calls(call("migrate", `{}`)), answer("done"))
	a, rec := newAgent(t, agent.Options{Model: m, Tools: []tool.Tool{askingTool(w)}})
	res, err := a.Run(bg(), agent.Input{Message: "x"})
	if err != nil || res.Paused == nil || !strings.Contains(res.Paused.Question, "drop the old table?") || !strings.Contains(res.Paused.Question, "migrate") {
		t.Fatalf("%+v %v", res, err)
	}
	if !res.Paused.Checkpoint.Waiting[0].Asked {
		t.Fatal("the checkpoint does not record that the tool asked")
	}
	// Not closed at the pause.
	if open, _, _ := w.stats(); open != 1 || len(rec.closeEvents()) != 0 {
		t.Fatal("the pause closed the call's session")
	}
	res2, err := a.Resume(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true})
	if err != nil || res2.Output != "done" {
		t.Fatal(res2, err)
	}
	// The same call, continued in the same workspace, then closed once.
	if msg := toolMessages(res2.Conversation)[0]; msg.Content != "planned | migrated" {
		t.Fatalf("%+v", msg)
	}
	seen := w.seen()
	if len(seen) != 2 || seen[0].ToolCallID != seen[1].ToolCallID || !seen[1].Reused {
		t.Fatalf("%+v", seen)
	}
	if cl := rec.closeEvents(); len(cl) != 1 || cl[0].Reason != "call-end" {
		t.Fatalf("%+v", cl)
	}
}

// Releasing a pause closes what it holds here and keeps it resumable: the
// resumed run opens what it needs afresh, and runs the approved call once.
func TestReleasingAPauseKeepsItResumable(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, rec := newAgent(t, agent.Options{Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	res, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "s1"})
	if err != nil || res.Paused == nil {
		t.Fatal(res, err)
	}
	cp := res.Paused.Checkpoint
	n, err := a.ReleaseCheckpoint(bg(), cp)
	if err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if cl := rec.closeEvents(); len(cl) != 1 || cl[0].Reason != "run-end" {
		t.Fatalf("%+v", cl)
	}
	// Released twice: nothing more is held; closing the conversation no
	// longer finds the pause to abandon.
	if n, err := a.ReleaseCheckpoint(bg(), cp); err != nil || n != 0 {
		t.Fatalf("release twice: %d %v", n, err)
	}
	if n := a.CloseToolSessions(bg(), "s1"); n != 0 {
		t.Fatalf("closing the conversation closed %d", n)
	}
	out, err := a.Resume(bg(), cp, agent.Decision{Approve: true})
	if err != nil || out.Output != "deployed" || ran.Load() != 1 {
		t.Fatalf("resume after release: %+v %v (ran %d)", out, err, ran.Load())
	}
	if _, err := a.ReleaseCheckpoint(bg(), cp); !errors.Is(err, agent.ErrAlreadyResumed) {
		t.Fatalf("release of a resumed checkpoint: %v", err)
	}
	if open, opened, closed := w.stats(); open != 0 || opened != closed {
		t.Fatalf("open %d opened %d closed %d", open, opened, closed)
	}
}

// A resume may bind the run to the session its conversation was re-opened
// under: its events and the session it belongs to are the new one's.
func TestResumeUnderAnotherSession(t *testing.T) {
	t.Parallel()
	w := newWorkspaces(t)
	var ran atomic.Int32
	a, rec := newAgent(t, agent.Options{Model: approvalScript(), Tools: []tool.Tool{w.tool("notes", toolsession.ScopeRun), deployTool(&ran)}})
	res, err := a.Run(bg(), agent.Input{Message: "x", SessionID: "old"})
	if err != nil || res.Paused == nil {
		t.Fatal(res, err)
	}
	if _, err := a.ReleaseCheckpoint(bg(), res.Paused.Checkpoint); err != nil {
		t.Fatal(err)
	}
	before := len(rec.all())
	out, err := a.ResumeWith(bg(), res.Paused.Checkpoint, agent.Decision{Approve: true}, agent.ResumeOptions{SessionID: "new"})
	if err != nil || out.Output != "deployed" {
		t.Fatal(out, err)
	}
	evs := rec.all()[before:]
	if len(evs) == 0 {
		t.Fatal("the resumed run emitted nothing")
	}
	for _, e := range evs {
		if e.Meta.RunID == res.RunID && e.Meta.SessionID != "new" {
			t.Fatalf("%s of the resumed run has session %q", e.Type, e.Meta.SessionID)
		}
	}
}

package agenttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

var checks = []check{
	{"Answer", checkAnswer},
	{"ParallelCallsAnswerInOrder", checkParallel},
	{"CheckInBeforeTheCall", checkCheckIn},
	{"CheckInDeclined", checkDecline},
	{"CheckInInsideACall", checkAskMidCall},
	{"CheckInInsideACallDeclined", checkAskMidCallDeclined},
	{"FailureClasses", checkFailureClasses},
	{"MaxIterations", checkMaxIterations},
	{"ModelFailure", checkModelFailure},
	{"Cancellation", checkCancellation},
	{"TeardownFiring", checkTeardown},
	{"RunScopeOutlivesAPause", checkRunScopeAcrossPause},
}

// timeout bounds every turn of a check.
const timeout = time.Minute

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// answered fails the check unless turn answered.
func answered(t *testing.T, what string, turn Turn) {
	t.Helper()
	if turn.Err != nil || turn.Pause != nil {
		t.Fatalf("%s: the turn did not answer: err %v, pause %+v", what, turn.Err, turn.Pause)
	}
}

func paused(t *testing.T, what string, turn Turn) {
	t.Helper()
	if turn.Err != nil || turn.Pause == nil {
		t.Fatalf("%s: the turn did not pause: err %v, output %q", what, turn.Err, turn.Output)
	}
}

// An answer without tools: the output, the conversation, the usage, the
// turn's end.
func checkAnswer(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	m := script(func(said string, _ []llm.Message) (llm.Response, error) {
		r := answer("you said " + said)
		r.Usage = llm.Usage{InputTokens: 12, OutputTokens: 3, CacheReadTokens: 4}
		return r, nil
	})
	a, rec := build(t, newAgent, Setup{Model: m})
	turn := a.Run(bounded(t), "hello")
	answered(t, "hello", turn)
	if turn.Output != "you said hello" || turn.RunID == "" {
		t.Fatalf("output %q, run %q", turn.Output, turn.RunID)
	}
	if n := len(turn.Messages); n < 2 || turn.Messages[n-2].Content != "hello" || turn.Messages[n-1].Content != "you said hello" {
		t.Fatalf("the conversation after the turn: %+v", turn.Messages)
	}
	u := turn.Usage
	if u.ModelCalls != 1 || u.Models[modelName] != (llm.Usage{InputTokens: 12, OutputTokens: 3, CacheReadTokens: 4}) || len(u.ToolCalls) != 0 {
		t.Fatalf("usage %+v; want one model call of %s with its tokens, no tool calls", u, modelName)
	}
	if got := rec.outcome(turn.RunID); got != event.OutcomeAnswer {
		t.Fatalf("turn_end outcome %q, want %q", got, event.OutcomeAnswer)
	}
}

// Three calls of one response run side by side (each waits for the
// others) and their results go back in the order the model asked.
func checkParallel(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	b := newBarrier(3)
	m := script(func(_ string, results []llm.Message) (llm.Response, error) {
		if len(results) == 0 {
			return calls(call("c1", "meet", `{"n":1}`), call("c2", "meet", `{"n":2}`), call("c3", "meet", `{"n":3}`)), nil
		}
		return answer(joined(results)), nil
	})
	a, _ := build(t, newAgent, Setup{Model: m, Tools: []tool.Tool{b.tool()}})
	turn := a.Run(bounded(t), "meet")
	answered(t, "meet", turn)
	if turn.Output != "met 1 | met 2 | met 3" {
		t.Fatalf("the model was told %q; want every call met, in the order asked (calls that run one at a time never meet)", turn.Output)
	}
	if u := turn.Usage; u.ModelCalls != 2 || u.ToolCalls["meet"] != 3 {
		t.Fatalf("usage %+v; want 2 model calls and 3 calls of meet", u)
	}
}

// guarded is a tool that waits for approval before every call.
func guarded(runs *counter) tool.Tool {
	return tool.WithCheckIn(tool.Func("guarded", "waits for a person first", func(context.Context, *tool.Call, none) (string, error) {
		runs.add()
		return "guarded ran", nil
	}))
}

// afterOne calls name once, then answers with what it was told.
func afterOne(name string) script {
	return func(_ string, results []llm.Message) (llm.Response, error) {
		if len(results) == 0 {
			return calls(call("c1", name, `{}`)), nil
		}
		return answer("after: " + joined(results)), nil
	}
}

// A tool that waits for approval pauses the turn before it runs; the
// approval resumes the same run, which runs it once.
func checkCheckIn(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	runs := &counter{}
	a, rec := build(t, newAgent, Setup{Model: afterOne("guarded"), Tools: []tool.Tool{guarded(runs)}})
	ctx := bounded(t)
	turn := a.Run(ctx, "go")
	paused(t, "go", turn)
	if turn.Pause.Tool != "guarded" || !strings.Contains(turn.Pause.Question, "guarded") || runs.count() != 0 {
		t.Fatalf("pause %+v after %d runs; want a question naming guarded, before it runs", turn.Pause, runs.count())
	}
	if got := rec.outcome(turn.RunID); got != event.OutcomePaused {
		t.Fatalf("turn_end outcome at the pause %q", got)
	}
	res := a.Resume(ctx, turn, agent.Decision{Approve: true})
	answered(t, "approved", res)
	if res.RunID != turn.RunID || res.Output != "after: guarded ran" || runs.count() != 1 {
		t.Fatalf("resumed run %q (paused %q): %q after %d runs; want the same run, the tool run once", res.RunID, turn.RunID, res.Output, runs.count())
	}
}

// A declined call is not run, and the model is told, with the note.
func checkDecline(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	runs := &counter{}
	a, rec := build(t, newAgent, Setup{Model: afterOne("guarded"), Tools: []tool.Tool{guarded(runs)}})
	ctx := bounded(t)
	turn := a.Run(ctx, "go")
	paused(t, "go", turn)
	res := a.Resume(ctx, turn, agent.Decision{Note: "not on a Friday"})
	answered(t, "declined", res)
	if runs.count() != 0 || !strings.Contains(res.Output, "declined") || !strings.Contains(res.Output, "not on a Friday") {
		t.Fatalf("after a decline the model was told %q and the tool ran %d times", res.Output, runs.count())
	}
	if got := rec.classes(turn.RunID)["guarded"]; !slices.Equal(got, []string{tool.ClassDeclined}) {
		t.Fatalf("tool_end classes of guarded %q, want [declined]", got)
	}
}

// A tool that asks mid-call pauses the turn with its call-scoped session
// open; approved, it is called again (joining that session), and the
// session closes once, when the call settles.
func checkAskMidCall(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	s := &sessions{}
	a, _ := build(t, newAgent, Setup{Model: afterOne("asker"), Tools: []tool.Tool{s.asker()}})
	ctx := bounded(t)
	turn := a.Run(ctx, "drop it")
	paused(t, "drop it", turn)
	if turn.Pause.Tool != "asker" || !strings.Contains(turn.Pause.Question, "may I drop the table?") {
		t.Fatalf("pause %+v; want the tool's own question", turn.Pause)
	}
	if opened, closed, _ := s.counts(); opened != 1 || closed != 0 {
		t.Fatalf("at the pause %d sessions opened, %d closed; want the call's session still open", opened, closed)
	}
	res := a.Resume(ctx, turn, agent.Decision{Approve: true})
	answered(t, "approved", res)
	if res.RunID != turn.RunID || res.Output != "after: asker done" {
		t.Fatalf("resumed run %q (paused %q) answered %q", res.RunID, turn.RunID, res.Output)
	}
	opened, closed, twice := s.counts()
	if opened != 1 || closed != 1 || twice || len(s.approvedCalls) != 1 || s.reusedByCall[s.approvedCalls[0]] != 1 {
		t.Fatalf("%d opened, %d closed (twice: %v), reuse %v; want one session, joined by the approved call, closed once",
			opened, closed, twice, s.reusedByCall)
	}
	if res.Usage.ToolCalls["asker"] < 1 {
		t.Fatalf("usage %+v does not count the approved call", res.Usage)
	}
}

// Declined, what the call opened closes, and the model is told.
func checkAskMidCallDeclined(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	s := &sessions{}
	a, _ := build(t, newAgent, Setup{Model: afterOne("asker"), Tools: []tool.Tool{s.asker()}})
	ctx := bounded(t)
	turn := a.Run(ctx, "drop it")
	paused(t, "drop it", turn)
	res := a.Resume(ctx, turn, agent.Decision{})
	answered(t, "declined", res)
	if !strings.Contains(res.Output, "declined") {
		t.Fatalf("the model was told %q", res.Output)
	}
	if opened, closed, twice := s.counts(); opened != 1 || closed != 1 || twice {
		t.Fatalf("%d opened, %d closed (twice: %v); want the asking call's session closed once at the decline", opened, closed, twice)
	}
}

// Every way a tool call fails is a result of its class, and the turn
// goes on.
func checkFailureClasses(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	failing := tool.Func("failing", "fails", func(context.Context, *tool.Call, none) (string, error) {
		return "", errors.New("the disk is full")
	})
	soft := tool.Func("soft", "answers with an error result", func(context.Context, *tool.Call, none) (tool.Result, error) {
		return tool.Result{Content: "no such file", IsError: true}, nil
	})
	panicky := tool.Func("panicky", "panics", func(context.Context, *tool.Call, none) (string, error) {
		panic("index out of range")
	})
	type count struct {
		N int `json:"n"`
	}
	strict := tool.Func("strict", "takes a number", func(_ context.Context, _ *tool.Call, c count) (string, error) {
		return fmt.Sprint(c.N), nil
	})
	m := script(func(_ string, results []llm.Message) (llm.Response, error) {
		if len(results) == 0 {
			return calls(call("c1", "failing", `{}`), call("c2", "soft", `{}`), call("c3", "panicky", `{}`),
				call("c4", "strict", `{"n":"seven"}`), call("c5", "nope", `{}`)), nil
		}
		return answer("recovered"), nil
	})
	a, rec := build(t, newAgent, Setup{Model: m, Tools: []tool.Tool{failing, soft, panicky, strict}})
	turn := a.Run(bounded(t), "go")
	answered(t, "go", turn)
	results := toolResults(turn.Messages)
	if turn.Output != "recovered" || len(results) != 5 {
		t.Fatalf("output %q with %d tool results", turn.Output, len(results))
	}
	for _, r := range results {
		if !r.IsError {
			t.Errorf("the result of %s is not an error: %+v", r.ToolName, r)
		}
	}
	if !strings.Contains(results[0].Content, "the disk is full") || results[1].Content != "no such file" || !strings.Contains(results[4].Content, `"nope"`) {
		t.Errorf("results %+v", results)
	}
	want := map[string][]string{"failing": {tool.ClassToolError}, "soft": {tool.ClassToolError}, "panicky": {tool.ClassPanic},
		"strict": {tool.ClassInvalidArguments}, "nope": {tool.ClassUnknownTool}}
	got := rec.classes(turn.RunID)
	for name, classes := range want {
		if !slices.Equal(got[name], classes) {
			t.Errorf("tool_end classes of %s: %q, want %q", name, got[name], classes)
		}
	}
	if n := len(rec.of(turn.RunID, tool.TypePanic)); n != 1 {
		t.Errorf("%d tool_panic events, want 1", n)
	}
	if u := turn.Usage.ToolCalls; u["failing"] != 1 || u["panicky"] != 1 || u["strict"] != 1 || u["nope"] != 0 {
		t.Errorf("tool calls counted %v; want each call that ran once, the unknown tool none", u)
	}
}

// A model that keeps calling tools ends the run at the bound, an error of
// class max_iterations.
func checkMaxIterations(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	s := &sessions{}
	m := script(func(_ string, results []llm.Message) (llm.Response, error) {
		return calls(call(fmt.Sprintf("c%d", len(results)), "scratch", `{}`)), nil
	})
	a, rec := build(t, newAgent, Setup{Model: m, Tools: []tool.Tool{s.scratch("scratch", toolsession.ScopeRun)}, MaxIterations: 3})
	turn := a.Run(bounded(t), "loop")
	if turn.Err == nil || !strings.Contains(turn.Err.Error(), "3 model calls") {
		t.Fatalf("err %v; want the iteration limit, named", turn.Err)
	}
	if got := rec.fatalClass(turn.RunID); got != tool.ClassMaxIterations {
		t.Fatalf("fatal class %q, want %q", got, tool.ClassMaxIterations)
	}
	if got := rec.outcome(turn.RunID); got != event.OutcomeError {
		t.Fatalf("turn_end outcome %q", got)
	}
	if turn.Usage.ModelCalls != 3 || turn.Usage.ToolCalls["scratch"] != 3 {
		t.Fatalf("usage %+v; want what the failed run used", turn.Usage)
	}
	if opened, closed, _ := s.counts(); opened != 1 || closed != 1 {
		t.Fatalf("run-scoped sessions: %d opened, %d closed; a failed run closes what it opened", opened, closed)
	}
}

// A model that fails ends the turn with an error of class model.
func checkModelFailure(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	m := script(func(string, []llm.Message) (llm.Response, error) {
		// Refused requests are not retried by any executor.
		return llm.Response{}, fmt.Errorf("%w: the model is down", llm.ErrBadRequest)
	})
	a, rec := build(t, newAgent, Setup{Model: m})
	turn := a.Run(bounded(t), "hello")
	if turn.Err == nil || !strings.Contains(turn.Err.Error(), "the model is down") {
		t.Fatalf("err %v; want the model's failure", turn.Err)
	}
	if got := rec.fatalClass(turn.RunID); got != tool.ClassModel {
		t.Fatalf("fatal class %q, want %q", got, tool.ClassModel)
	}
	if turn.Usage.ModelCalls < 1 {
		t.Fatalf("usage %+v does not count the failed call", turn.Usage)
	}
}

// A turn cancelled while a tool runs ends cancelled, and what it opened
// closes.
func checkCancellation(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	s := &sessions{}
	entered := make(chan struct{}, 1)
	a, rec := build(t, newAgent, Setup{Model: afterOne("block"), Tools: []tool.Tool{blocker(entered, s)}})
	ctx, cancel := context.WithCancel(bounded(t))
	go func() {
		<-entered
		cancel()
	}()
	turn := a.Run(ctx, "block")
	cancel()
	if turn.Err == nil || turn.Pause != nil {
		t.Fatalf("a cancelled turn ended with err %v, pause %+v", turn.Err, turn.Pause)
	}
	if got := rec.outcome(turn.RunID); got != event.OutcomeCancelled {
		t.Fatalf("turn_end outcome %q, want %q", got, event.OutcomeCancelled)
	}
	if opened, closed, twice := s.counts(); opened != 1 || closed != 1 || twice {
		t.Fatalf("run-scoped sessions: %d opened, %d closed (twice: %v); a cancelled run closes what it opened", opened, closed, twice)
	}
}

// Call-scoped sessions close when their call settles; a run-scoped one
// is joined by the run's later calls and closes once, at the answer.
func checkTeardown(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	perCall, perRun := &sessions{}, &sessions{}
	m := script(func(_ string, results []llm.Message) (llm.Response, error) {
		switch len(results) {
		case 0:
			return calls(call("c1", "temp", `{}`), call("c2", "scratch", `{}`)), nil
		case 2:
			return calls(call("c3", "temp", `{}`), call("c4", "scratch", `{}`)), nil
		}
		return answer(joined(results)), nil
	})
	tools := []tool.Tool{perCall.scratch("temp", toolsession.ScopeCall), perRun.scratch("scratch", toolsession.ScopeRun)}
	a, _ := build(t, newAgent, Setup{Model: m, Tools: tools})
	turn := a.Run(bounded(t), "work")
	answered(t, "work", turn)
	if opened, closed, twice := perCall.counts(); opened != 2 || closed != 2 || twice {
		t.Fatalf("call-scoped: %d opened, %d closed (twice: %v); want one per call, each closed once", opened, closed, twice)
	}
	if opened, closed, twice := perRun.counts(); opened != 1 || closed != 1 || twice {
		t.Fatalf("run-scoped: %d opened, %d closed (twice: %v); want one for the run, closed once", opened, closed, twice)
	}
	if u := turn.Usage.ToolCalls; u["temp"] != 2 || u["scratch"] != 2 {
		t.Fatalf("tool calls counted %v", u)
	}
}

// A run-scoped session opened before a pause is still open while the
// turn waits, is joined after the resume (the same run), and closes once
// at the real end.
func checkRunScopeAcrossPause(t *testing.T, newAgent func(*testing.T, Setup) Agent) {
	perRun, runs := &sessions{}, &counter{}
	m := script(func(_ string, results []llm.Message) (llm.Response, error) {
		switch len(results) {
		case 0:
			return calls(call("c1", "scratch", `{}`)), nil
		case 1:
			return calls(call("c2", "guarded", `{}`)), nil
		case 2:
			return calls(call("c3", "scratch", `{}`)), nil
		}
		return answer(joined(results)), nil
	})
	a, _ := build(t, newAgent, Setup{Model: m, Tools: []tool.Tool{perRun.scratch("scratch", toolsession.ScopeRun), guarded(runs)}})
	ctx := bounded(t)
	turn := a.Run(ctx, "work")
	paused(t, "work", turn)
	if opened, closed, _ := perRun.counts(); opened != 1 || closed != 0 {
		t.Fatalf("at the pause: %d opened, %d closed; a pause is not a terminal", opened, closed)
	}
	res := a.Resume(ctx, turn, agent.Decision{Approve: true})
	answered(t, "approved", res)
	if res.Output != "scratch ok | guarded ran | scratch ok" || res.RunID != turn.RunID {
		t.Fatalf("resumed run %q (paused %q) answered %q", res.RunID, turn.RunID, res.Output)
	}
	if opened, closed, twice := perRun.counts(); opened != 1 || closed != 1 || twice {
		t.Fatalf("after the answer: %d opened, %d closed (twice: %v); want the one session joined after the resume and closed once", opened, closed, twice)
	}
}

package native_test

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
)

// Every turn that began says what it used, just before its last output:
// an answered one, a paused one (the stretch up to the pause) and one
// whose model panicked.
func TestTurnReportsUsage(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	usage := func(outs []provider.Output) *llm.TurnUsage {
		t.Helper()
		var u *llm.TurnUsage
		for i, o := range outs {
			if o.Kind != provider.OutputUsage {
				continue
			}
			if u != nil || i != len(outs)-2 && i != len(outs)-1 {
				t.Fatalf("usage at %d of %q", i, shape(outs))
			}
			u = o.Usage
		}
		if u == nil || u.Basis != llm.BasisCounted {
			t.Fatalf("usage %+v in %d outputs", u, len(outs))
		}
		return u
	}
	if u := usage(turn(t, s, "t1", "say hi there")); u.ModelCalls != 1 || len(u.ToolCalls) != 0 {
		t.Fatalf("answered: %+v", u)
	}
	if u := usage(turn(t, s, "t2", "call noop {}")); u.ModelCalls != 2 || u.ToolCalls["noop"] != 1 {
		t.Fatalf("with a tool call: %+v", u)
	}
	outs, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t3", Input: "panic"}))
	if err == nil {
		t.Fatal("the panicking model's turn did not fail")
	}
	usage(outs) // the agent panicked: its counts are lost, the report is not
}

func TestTurnMapsAnAnswer(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	outs := turn(t, s, "t1", "say hi there")
	want := []string{"turn.started", "text:hi there", "turn.completed:completed"}
	if got := shape(outs); !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
	for _, o := range outs {
		if o.SessionID != s.ID() || o.TurnID != "t1" {
			t.Fatalf("output %s names session %q turn %q", o.Kind, o.SessionID, o.TurnID)
		}
	}
}

func TestTurnMapsToolProgress(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	for _, tc := range []struct {
		input string
		want  []string
	}{
		{"call noop {}", []string{"turn.started", "text:let me use noop", "activity:calling noop", "activity:noop returned",
			"text:the tool said: ok", "turn.completed:completed"}},
		{"call nosuch {}", []string{"turn.started", "text:let me use nosuch", "activity:calling nosuch",
			"activity:nosuch returned an error (unknown_tool)", "text:the tool said: There is no tool named \"nosuch\". The tools are: approve_me, midway, noop, who, workspace.",
			"turn.completed:completed"}},
		{`call workspace {"scope":"bogus"}`, []string{"turn.started", "text:let me use workspace", "activity:calling workspace",
			"activity:workspace returned an error (tool_error)"}},
	} {
		outs := turn(t, s, "t-"+tc.input, tc.input)
		got := shape(outs)
		if len(got) < len(tc.want) || !slices.Equal(got[:len(tc.want)], tc.want) {
			t.Errorf("%s: outputs %q, want them to start %q", tc.input, got, tc.want)
		}
		if last(outs).Kind != provider.OutputTurnCompleted {
			t.Errorf("%s ended at %s", tc.input, last(outs).Kind)
		}
	}
}

// A streaming model's text arrives as its deltas, never twice.
func TestTurnMapsStreamedText(t *testing.T) {
	t.Parallel()
	w := newWorld(t, func(o *agent.Options) { o.Model = streamingModel{&promptModel{}} })
	s := w.create(t, provider.CreateRequest{})
	got := shape(turn(t, s, "t1", "call noop {}"))
	want := []string{"turn.started", "text:let ", "text:me ", "text:use ", "text:noop", "activity:calling noop", "activity:noop returned",
		"text:the ", "text:tool ", "text:said: ", "text:ok", "turn.completed:completed"}
	if !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
}

func TestTurnPausesAsAnApprovalRequest(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	outs := turn(t, s, "t1", "ask")
	if got, want := shape(outs), []string{"turn.started", "text:let me use approve_me", "request:approval:approve_me"}; !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
	req := last(outs).Request
	if req.ID == "" || !strings.Contains(req.Prompt, "approve_me") || len(req.Schema) != 0 {
		t.Fatalf("request %+v", req)
	}
	// While it waits, no other turn starts.
	if _, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t2", Input: "hello"})); !provider.HasCode(err, provider.CodeRequestPending) {
		t.Fatalf("a turn while a request waits: %v", err)
	}

	rest, err := pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"activity:calling approve_me", "activity:approve_me returned", "text:done: the approved action ran", "turn.completed:completed"}
	if got := shape(rest); !slices.Equal(got, want) {
		t.Fatalf("after approval %q, want %q", got, want)
	}
	if w.lab.approved != 1 {
		t.Fatalf("the approved tool ran %d times", w.lab.approved)
	}
	// The next turn continues the whole conversation.
	turn(t, s, "t3", "hello")
	reqs := w.model.seen()
	msgs := reqs[len(reqs)-1].Messages
	if len(msgs) != 5 || msgs[0].Content != "ask" || msgs[2].Content != "the approved action ran" || msgs[4].Content != "hello" {
		t.Fatalf("the model saw %+v", msgs)
	}
}

func TestDeclineTellsTheModelTheNote(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	req := last(turn(t, s, "t1", "ask")).Request
	rest, err := pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: false, Note: "not on a Friday"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"activity:calling approve_me", "activity:approve_me was declined",
		"text:done: A person declined this call, with this note: not on a Friday", "turn.completed:completed"}
	if got := shape(rest); !slices.Equal(got, want) {
		t.Fatalf("after decline %q, want %q", got, want)
	}
	if w.lab.approved != 0 {
		t.Fatal("a declined tool ran")
	}
}

// A tool that asks a person halfway is an approval request too; approval
// runs it again, and what it opened for the call closes after.
func TestCheckInMidCall(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	outs := turn(t, s, "t1", "call midway {}")
	req := last(outs).Request
	if req == nil || req.Tool != "midway" || !strings.Contains(req.Prompt, "go on halfway?") {
		t.Fatalf("outputs %q", shape(outs))
	}
	if w.lab.opens() != 1 || w.lab.closes() != 0 {
		t.Fatalf("while waiting: %d opened, %d closed", w.lab.opens(), w.lab.closes())
	}
	rest, err := pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true}))
	if err != nil {
		t.Fatal(err)
	}
	if got := shape(rest); !slices.Contains(got, "text:the tool said: went on after the approval") {
		t.Fatalf("after approval %q", got)
	}
	if w.lab.closes() != 1 {
		t.Fatalf("the call's workspace closed %d times", w.lab.closes())
	}
}

func TestInterruptARunningTurn(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	next, stop := iter.Pull2(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "hold"}))
	defer stop()
	if o, err, _ := next(); err != nil || o.Kind != provider.OutputTurnStarted {
		t.Fatalf("first output %v %v", o.Kind, err)
	}
	if err := s.Interrupt(t.Context(), "t1"); err != nil {
		t.Fatal(err)
	}
	var rest []provider.Output
	for {
		o, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, o)
	}
	if got := shape(rest); !slices.Equal(got, []string{"turn.completed:interrupted"}) {
		t.Fatalf("after the interrupt %q", got)
	}
	// The interrupted turn left nothing in the conversation.
	turn(t, s, "t2", "hello")
	reqs := w.model.seen()
	if msgs := reqs[len(reqs)-1].Messages; len(msgs) != 1 || msgs[0].Content != "hello" {
		t.Fatalf("the next turn's model saw %+v", msgs)
	}
}

// Interrupting a waiting turn gives up its pause: what the paused call
// holds closes, and the request can no longer be resolved.
func TestInterruptAWaitingTurn(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	req := last(turn(t, s, "t1", "call midway {}")).Request
	if err := s.Interrupt(t.Context(), "t1"); err != nil {
		t.Fatal(err)
	}
	if w.lab.closes() != 1 {
		t.Fatalf("the paused call's workspace closed %d times", w.lab.closes())
	}
	if _, err := pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true})); !provider.HasCode(err, provider.CodeRequestResolutionMismatch) {
		t.Fatalf("resolving after the interrupt: %v", err)
	}
	if got := last(turn(t, s, "t2", "hello")); got.Outcome != provider.OutcomeCompleted {
		t.Fatalf("the next turn: %+v", got)
	}
	if n := len(w.sink.of(event.TypePauseResume)); n != 0 {
		t.Fatalf("the abandoned pause was resumed %d times", n)
	}
}

// An interrupt that comes as the run is about to call a tool (the host
// holds the call's "calling" output) ends the turn at turn.completed
// before the call starts: the tool never runs, so nothing it would have
// opened is left open.
func TestInterruptBeforeTheCallStarts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		s := w.create(t, provider.CreateRequest{})
		next, stop := iter.Pull2(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "call midway {}"}))
		defer stop()
		var got []provider.Output
		for len(got) < 4 { // turn.started, text, calling midway, and nothing more until the run pauses
			o, err, _ := next()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, o)
			if o.Kind == provider.OutputActivity {
				break
			}
		}
		synctest.Wait() // the run waits for the host to take the call's output
		if err := s.Interrupt(t.Context(), "t1"); err != nil {
			t.Fatal(err)
		}
		for {
			o, err, ok := next()
			if !ok {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, o)
		}
		if last(got).Outcome != provider.OutcomeInterrupted {
			t.Fatalf("outputs %q", shape(got))
		}
		if w.lab.opens() != 0 || w.lab.closes() != 0 {
			t.Fatalf("the call ran after the interrupt: %d workspaces opened, %d closed", w.lab.opens(), w.lab.closes())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestModelFailureEndsTheTurnFailed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	turn(t, s, "t1", "say first")
	outs := turn(t, s, "t2", "fail")
	want := []string{"turn.started", "activity:the turn failed: the model failed", "turn.completed:failed"}
	if got := shape(outs); !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
	// Not silent: the agent's fatal event has the error.
	fatal := w.sink.of(event.TypeFatal)
	if len(fatal) != 1 || !strings.Contains(fatal[0].Payload.(*event.Fatal).Error, "the model is down") || fatal[0].Meta.SessionID != s.ID() {
		t.Fatalf("fatal events %+v", fatal)
	}
	// The session goes on, with the conversation as it was.
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	turn(t, s, "t3", "hello")
	reqs := w.model.seen()
	msgs := reqs[len(reqs)-1].Messages
	if len(msgs) != 3 || msgs[0].Content != "say first" || msgs[2].Content != "hello" {
		t.Fatalf("the model saw %+v", msgs)
	}
}

func TestIterationLimitEndsTheTurnFailed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	outs := turn(t, s, "t1", "loop")
	if got := shape(outs); len(got) < 3 || got[len(got)-2] != "activity:the turn failed: the agent reached its iteration limit without an answer" ||
		got[len(got)-1] != "turn.completed:failed" {
		t.Fatalf("outputs %q", got)
	}
}

// A turn the agent refuses before it begins changes nothing: the error
// says it did not start, and the session stays usable.
func TestRefusedTurnDidNotStart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	outs, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: ""}))
	var oe *provider.OperationError
	if len(outs) != 0 || !errors.As(err, &oe) || oe.Started || !errors.Is(err, provider.ErrNotStarted) || !errors.Is(err, agent.ErrEmptyMessage) {
		t.Fatalf("an empty message: %v %v", shape(outs), err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("after a refused turn: %v", err)
	}
	turn(t, s, "t1", "hello") // the refused turn's id is free again
}

// A host that cancels a turn's context gets an error, and the session is
// no longer trusted.
func TestHostCancellationIsAnError(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var err error
	for o, e := range s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "hold"}) {
		if o.Kind == provider.OutputTurnStarted {
			cancel()
		}
		if e != nil {
			err = e
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled turn: %v", err)
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionUnusable) {
		t.Fatalf("after a cancelled turn: %v", s.Err())
	}
}

// A host that stops pulling cancels the run; run-scoped sessions close and
// nothing outlives the turn.
func TestAbandonedTurnStopsTheRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s := w.create(t, provider.CreateRequest{})
	for o := range s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: `calls workspace {"scope":"run"}`}) {
		if o.Kind == provider.OutputActivity {
			break
		}
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionUnusable) {
		t.Fatalf("after abandoning: %v", s.Err())
	}
	if w.lab.opens() != w.lab.closes() {
		t.Fatalf("%d workspaces opened, %d closed", w.lab.opens(), w.lab.closes())
	}
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
}

// The run waits for the host: it is never ahead of what was pulled. The
// model's chunk behind each text output is streamed only once the host
// asks for that output.
func TestTurnBackpressure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pm := &promptModel{}
		counted := &countingStream{streamingModel: streamingModel{pm}}
		w := newWorld(t, func(o *agent.Options) { o.Model = counted })
		s := w.create(t, provider.CreateRequest{})
		words := strings.Repeat("word ", 200)
		next, stop := iter.Pull2(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t1", Input: "say " + words}))
		defer stop()
		if o, err, _ := next(); err != nil || o.Kind != provider.OutputTurnStarted {
			t.Fatalf("first: %v %v", o.Kind, err)
		}
		synctest.Wait()
		if ahead := counted.n(); ahead != 0 {
			t.Fatalf("the model streamed %d chunks while the host held turn.started", ahead)
		}
		n, texts := 1, 0
		for {
			o, err, ok := next()
			if !ok {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
			if o.Kind == provider.OutputText {
				texts++
				synctest.Wait()
				if got := counted.n(); got != texts {
					t.Fatalf("the host holds text output %d and the model has streamed %d chunks", texts, got)
				}
			}
		}
		if n != 203 || counted.n() != 201 { // turn.started, 200 texts, usage, turn.completed
			t.Fatalf("%d outputs, %d chunks", n, counted.n())
		}
	})
}

type countingStream struct {
	streamingModel
	mu     sync.Mutex
	chunks int
}

func (c *countingStream) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chunks
}

func (c *countingStream) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		for ch, err := range c.streamingModel.Stream(ctx, req) {
			c.mu.Lock()
			c.chunks++
			c.mu.Unlock()
			if !yield(ch, err) {
				return
			}
		}
	}
}

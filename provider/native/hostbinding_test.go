package native_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/provider/native"
)

func toolNames(req llm.Request) []string {
	var names []string
	for _, d := range req.Tools {
		names = append(names, d.Name)
	}
	return names
}

// The tools a host lends a session are that session's: its runs can call
// them; another session's runs neither see them nor reach them.
func TestHostToolsBelongToOneSession(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	lender := &conformance.Echo{}
	a := w.create(t, provider.CreateRequest{HostBinding: lender.Binding(nil)})
	b := w.create(t, provider.CreateRequest{})

	outs := turn(t, a, "t1", `call conformance_echo {"text":"for a"}`)
	if got := shape(outs); !slices.Contains(got, `text:the tool said: {"echo":"for a"}`) {
		t.Fatalf("the lending session's turn: %q", got)
	}
	reqs := w.model.seen()
	if !slices.Contains(toolNames(reqs[len(reqs)-1]), "conformance_echo") {
		t.Fatalf("the lending session's model was offered %v", toolNames(reqs[len(reqs)-1]))
	}

	outs = turn(t, b, "t1", `call conformance_echo {"text":"stolen"}`)
	if got := shape(outs); !slices.Contains(got, "activity:conformance_echo returned an error (unknown_tool)") {
		t.Fatalf("the other session's turn: %q", got)
	}
	for _, req := range w.model.seen()[len(reqs):] {
		if slices.Contains(toolNames(req), "conformance_echo") {
			t.Fatalf("the other session's model was offered %v", toolNames(req))
		}
	}
	calls := lender.Invocations()
	if len(calls) != 1 || !strings.Contains(string(calls[0].Arguments), "for a") {
		t.Fatalf("the host tool was invoked %+v", calls)
	}
	// The invocation id is the agent's tool-call id, prefixed by the run.
	if !strings.HasPrefix(calls[0].ID, "run-") || !strings.HasSuffix(calls[0].ID, ":c0_0") {
		t.Fatalf("invocation id %q", calls[0].ID)
	}
}

// Many sessions, each with its own lender, running at once: every
// invocation reaches its own session's host and no other.
func TestHostToolsUnderConcurrentSessions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const sessions, turns = 8, 4
	lenders := make([]*conformance.Echo, sessions)
	ss := make([]*provider.ValidatedSession, sessions)
	for i := range sessions {
		lenders[i] = &conformance.Echo{}
		ss[i] = w.create(t, provider.CreateRequest{HostBinding: lenders[i].Binding(nil),
			Configuration: identityConfig("tenant", fmt.Sprint("p", i))})
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions*turns)
	for i, s := range ss {
		wg.Go(func() {
			for j := range turns {
				text := fmt.Sprintf("s%d-t%d", i, j)
				outs, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: fmt.Sprint("t", j),
					Input: fmt.Sprintf(`call conformance_echo {"text":%q}`, text)}))
				if err != nil {
					errs <- err
					return
				}
				for _, o := range outs {
					if o.SessionID != s.ID() {
						errs <- fmt.Errorf("session %s got an output of %s", s.ID(), o.SessionID)
					}
				}
				if got := shape(outs); !slices.Contains(got, fmt.Sprintf(`text:the tool said: {"echo":%q}`, text)) {
					errs <- fmt.Errorf("session %d turn %d: %q", i, j, got)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, l := range lenders {
		calls := l.Invocations()
		if len(calls) != turns {
			t.Errorf("lender %d was invoked %d times", i, len(calls))
		}
		for _, c := range calls {
			if !strings.Contains(string(c.Arguments), fmt.Sprintf(`"s%d-`, i)) {
				t.Errorf("lender %d was invoked for %s", i, c.Arguments)
			}
		}
	}
}

// A paused run of a lending session resumes with the lent tools.
func TestHostToolsSurviveAPause(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	lender := &conformance.Echo{}
	s := w.create(t, provider.CreateRequest{HostBinding: lender.Binding(nil)})
	req := last(turn(t, s, "t1", "ask")).Request
	outs, err := pull(s.Resolve(t.Context(), provider.Resolution{TurnID: "t1", RequestID: req.ID, Approve: true}))
	if err != nil || last(outs).Outcome != provider.OutcomeCompleted {
		t.Fatalf("resolve: %q %v", shape(outs), err)
	}
	reqs := w.model.seen()
	if !slices.Contains(toolNames(reqs[len(reqs)-1]), "conformance_echo") {
		t.Fatal("the resumed run lost the host tools")
	}
}

func TestHostToolNameClashIsRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	released := 0
	b := &provider.HostBinding{
		Tools: []provider.HostTool{{Name: "noop", Invoke: func(context.Context, provider.HostInvocation) (provider.HostToolResult, error) {
			return provider.HostToolResult{Output: json.RawMessage(`1`)}, nil
		}}},
		Release: func(context.Context) error { released++; return nil },
	}
	_, err := w.inst.Adapter().Create(t.Context(), provider.CreateRequest{SessionID: w.sessionID(), WorkingDirectory: w.dir, HostBinding: b})
	if !errors.Is(err, native.ErrHostToolConflict) || !strings.Contains(err.Error(), "noop") {
		t.Fatalf("a clashing host tool: %v", err)
	}
	if released != 1 {
		t.Fatalf("the binding was released %d times", released)
	}
}

// Instructions placed as context open every run of the session, and stay
// out of the stored conversation.
func TestInstructionsAreContextOfTheSessionOnly(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	lender := &conformance.Echo{}
	instr := &provider.Instructions{Placement: provider.PlacementContext, Text: "Answer in French."}
	s := w.create(t, provider.CreateRequest{HostBinding: lender.Binding(instr)})
	turn(t, s, "t1", "say bonjour")
	turn(t, s, "t2", "say encore")
	reqs := w.model.seen()
	msgs := reqs[len(reqs)-1].Messages
	if len(msgs) != 4 || msgs[0].Role != llm.RoleUser || msgs[0].Content != "Answer in French." || msgs[1].Content != "say bonjour" {
		t.Fatalf("the model saw %+v", msgs)
	}
	// Branch and resume without the binding: the instructions are gone,
	// the turns are there.
	br, err := w.branch(t, provider.BranchRequest{Source: provider.BranchSource{Binding: s.Binding(), TurnID: "t2"}})
	if err != nil {
		t.Fatal(err)
	}
	turn(t, br, "b1", "hello")
	reqs = w.model.seen()
	msgs = reqs[len(reqs)-1].Messages
	if len(msgs) != 5 || msgs[0].Content != "say bonjour" {
		t.Fatalf("the branch's model saw %+v", msgs)
	}
	// The system placement is not one the native provider takes.
	sys := &conformance.Echo{}
	_, err = w.inst.Adapter().Create(t.Context(), provider.CreateRequest{SessionID: w.sessionID(), WorkingDirectory: w.dir,
		HostBinding: sys.Binding(&provider.Instructions{Placement: provider.PlacementSystem, Text: "x"})})
	if !provider.HasCode(err, provider.CodeHostBindingUnsupported) {
		t.Fatalf("system instructions: %v", err)
	}
}

func TestCloseReleasesTheHostBinding(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	lender := &conformance.Echo{}
	s := w.create(t, provider.CreateRequest{HostBinding: lender.Binding(nil)})
	turn(t, s, "t1", `call conformance_echo {"text":"x"}`)
	for range 2 {
		if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
			t.Fatal(err)
		}
	}
	if n := lender.Releases(); n != 1 {
		t.Fatalf("released %d times", n)
	}
}

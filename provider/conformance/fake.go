package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentry-dev/agentry/provider"
)

// FakeKey is the fake provider's key.
const FakeKey = "fake"

// The fake's prompts. Any other input is answered with "echo: <input>".
const (
	// FakeAsk raises an approval request; FakeElicit an elicitation.
	FakeAsk    = "ask"
	FakeElicit = "elicit"
	// FakeHold runs until interrupted.
	FakeHold = "hold"
	// FakeSteer runs until steered, then answers with what it was told.
	FakeSteer = "steer"
	// FakeCall, followed by a tool name and JSON arguments, invokes a host
	// tool: "call conformance_echo {\"text\":\"hi\"}".
	FakeCall = "call"
	// FakeInteract asks the host a question (options "yes" and "no")
	// through the session's interactions, tells it a notice of the
	// answer, and completes with what the person said.
	FakeInteract = "interact"
)

// The fake's question, for FakeInteract.
const (
	FakeQuestion = "May the fake go on?"
	FakeYes      = "yes"
	FakeNo       = "no"
)

// FakeCapabilities is what the fake declares: every session and turn port
// (a resumed session comes back waiting on its open request), both
// request kinds, host bindings with both instruction placements, no
// authentication.
func FakeCapabilities() provider.Capabilities {
	return provider.Capabilities{
		ProviderKey: FakeKey,
		Sessions:    provider.SessionCapabilities{Resume: true, ResumePending: true, Branch: provider.BranchThroughTurn},
		Turns:       provider.TurnCapabilities{Interrupt: true, Steer: true},
		Requests:    provider.RequestCapabilities{Approval: true, Elicitation: true},
		HostBinding: provider.HostBindingSupport{Supported: true,
			InstructionPlacements: []provider.Placement{provider.PlacementSystem, provider.PlacementContext}},
		Interactions: provider.InteractionSupport{Kinds: []provider.InteractionKind{provider.InteractionQuestion, provider.InteractionNotice}},
	}
}

// FakeFixture is the fixture that drives the fake through every check.
func FakeFixture() Fixture {
	return Fixture{
		Prompt:            "hello",
		RequestPrompt:     FakeAsk,
		InterruptPrompt:   FakeHold,
		SteerPrompt:       FakeSteer,
		HostToolPrompt:    FakeCall + " " + HostToolName + ` {"text":"hi"}`,
		InteractionPrompt: FakeInteract,
	}
}

// FakeDriver materialises the fake: an in-memory provider that keeps
// every rule of the contract. Conversations live in the instance, so a
// session can be resumed or branched while the instance lives. It stands
// in for a real agent in examples and in hosts' tests.
type FakeDriver struct {
	flaw flaw // set only by this package's tests, to break one rule

	live sync.Map // session id → *fakeSession, the open sessions of every instance
}

// flaw names the one rule a deliberately broken fake breaks.
type flaw int

const (
	sound flaw = iota
	flawReadiness
	flawNoCallback
	flawTurnIDs
	flawResolveRestarts
	flawIgnoresInterrupt
	flawSteerFails
	flawCloseFails
	flawResumeElsewhere
	flawBranchReuses
	flawRefusesHostTools
	flawNeverCallsTools
	flawBreaksOnRefusal
	flawToolsOnClose
	flawDisposeFails
	flawForgetsPending
	flawNeverInteracts
)

// NewFakeDriver returns the fake's driver.
func NewFakeDriver() *FakeDriver { return &FakeDriver{} }

func (d *FakeDriver) ProviderKey() string             { return FakeKey }
func (d *FakeDriver) SupportsMultipleInstances() bool { return true }

// Materialize builds an instance. The definition's configuration is
// ignored.
func (d *FakeDriver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	in := &fakeInstance{id: def.ID, flaw: d.flaw, driver: d, conversations: map[provider.Binding][]fakeTurn{},
		waiting: map[provider.Binding]fakeWaiting{}}
	return provider.Materialized{
		Capabilities: FakeCapabilities(),
		Adapter:      in,
		Readiness: func(context.Context) (provider.Readiness, error) {
			if d.flaw == flawReadiness {
				return "warming_up", nil
			}
			return provider.Ready, nil
		},
		Dispose: func(context.Context) error {
			if d.flaw == flawDisposeFails {
				return errors.New("the fake would not let go")
			}
			return nil
		},
	}, nil
}

type fakeTurn struct{ id, input string }

// fakeWaiting is a conversation's turn that waits on a request.
type fakeWaiting struct {
	turnID, input string
	req           provider.Request
}

type fakeInstance struct {
	id     string
	flaw   flaw
	driver *FakeDriver
	n      atomic.Int64

	mu            sync.Mutex
	conversations map[provider.Binding][]fakeTurn
	waiting       map[provider.Binding]fakeWaiting // kept across sessions until answered or given up
}

func (in *fakeInstance) setWaiting(b provider.Binding, w *fakeWaiting) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if w == nil {
		delete(in.waiting, b)
		return
	}
	in.waiting[b] = *w
}

func (in *fakeInstance) waitingOn(b provider.Binding) (fakeWaiting, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	w, ok := in.waiting[b]
	return w, ok
}

func (in *fakeInstance) newBinding() provider.Binding {
	return provider.Binding(fmt.Sprintf("fake-%s-%d", in.id, in.n.Add(1)))
}

func (in *fakeInstance) save(b provider.Binding, turns []fakeTurn) {
	in.mu.Lock()
	in.conversations[b] = turns
	in.mu.Unlock()
}

func (in *fakeInstance) load(b provider.Binding) ([]fakeTurn, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	t, ok := in.conversations[b]
	return append([]fakeTurn(nil), t...), ok
}

func (in *fakeInstance) session(id string, b provider.Binding, tools provider.HostTools, ia provider.Interactions, turns []fakeTurn) *fakeSession {
	in.save(b, turns)
	s := &fakeSession{in: in, id: id, binding: b, tools: tools, interactions: ia, history: turns}
	in.driver.live.Store(id, s)
	return s
}

// Interact makes the open fake session with that id interact with its
// host, outside any turn: how a host's test makes the fake ask a person
// something. It fails when no such session is open or the host supplied
// no interactions.
func (d *FakeDriver) Interact(ctx context.Context, sessionID string, in provider.Interaction) (provider.InteractionReply, error) {
	v, ok := d.live.Load(sessionID)
	if !ok {
		return provider.InteractionReply{}, errors.New("conformance: no fake session with that id is open")
	}
	s := v.(*fakeSession)
	if s.interactions == nil {
		return provider.InteractionReply{}, errors.New("conformance: the fake session was opened without interactions")
	}
	return s.interactions.Interact(ctx, sessionID, in)
}

func (in *fakeInstance) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	if in.flaw == flawRefusesHostTools && req.HostTools != nil {
		return nil, errors.New("the fake will not take host tools")
	}
	b := in.newBinding()
	if in.flaw != flawNoCallback {
		req.OnBinding(b)
	}
	return in.session(req.SessionID, b, req.HostTools, req.Interactions, nil), nil
}

func (in *fakeInstance) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	turns, ok := in.load(req.Binding)
	if !ok {
		return nil, fmt.Errorf("%w: the fake has no conversation with that binding", provider.ErrNotStarted)
	}
	b := req.Binding
	if in.flaw == flawResumeElsewhere {
		b = in.newBinding()
	}
	s := in.session(req.SessionID, b, req.HostTools, req.Interactions, turns)
	if w, ok := in.waitingOn(b); ok && in.flaw != flawForgetsPending {
		r := w.req
		s.active, s.input, s.pending = w.turnID, w.input, &r
	}
	return s, nil
}

func (in *fakeInstance) Branch(ctx context.Context, req provider.BranchRequest) (provider.Session, error) {
	turns, ok := in.load(req.Source.Binding)
	if !ok {
		return nil, errors.New("the fake has no conversation with the source binding")
	}
	cut := -1
	for i, t := range turns {
		if t.id == req.Source.TurnID {
			cut = i
		}
	}
	if cut < 0 {
		return nil, errors.New("the source conversation has no such turn")
	}
	b := in.newBinding()
	if in.flaw == flawBranchReuses {
		b = req.Source.Binding
	}
	req.OnBinding(b)
	return in.session(req.SessionID, b, req.HostTools, req.Interactions, turns[:cut+1]), nil
}

// fakeSession is one conversation. The wrapper guarantees one turn at a
// time; the mutex guards what Interrupt, Steer and Close touch
// concurrently with a turn.
type fakeSession struct {
	in           *fakeInstance
	id           string
	binding      provider.Binding
	tools        provider.HostTools
	interactions provider.Interactions

	mu      sync.Mutex
	history []fakeTurn
	active  string
	wake    chan string // interrupt ("") or steer input, for the active turn
	pending *provider.Request
	input   string
	reqs    int
}

func (s *fakeSession) Binding() provider.Binding { return s.binding }

// Pending is the turn a resumed conversation still waits on.
func (s *fakeSession) Pending() (string, provider.Request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return "", provider.Request{}, false
	}
	return s.active, *s.pending, true
}

func (s *fakeSession) out(kind provider.OutputKind, turnID string) provider.Output {
	return provider.Output{Kind: kind, SessionID: s.id, TurnID: turnID}
}

func (s *fakeSession) RunTurn(ctx context.Context, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		wake := make(chan string, 1)
		s.mu.Lock()
		s.active, s.wake, s.input, s.pending = req.TurnID, wake, req.Input, nil
		s.mu.Unlock()
		if !yield(s.out(provider.OutputTurnStarted, req.TurnID), nil) {
			return
		}
		text := s.out(provider.OutputText, req.TurnID)
		verb, rest, _ := strings.Cut(req.Input, " ")
		switch {
		case req.Input == FakeAsk || req.Input == FakeElicit:
			kind := provider.RequestApproval
			if req.Input == FakeElicit {
				kind = provider.RequestElicitation
			}
			s.mu.Lock()
			s.reqs++
			r := &provider.Request{ID: fmt.Sprintf("%s-%s-request-%d", s.binding, s.id, s.reqs), Kind: kind, Prompt: "may the fake go on?"}
			s.pending = r
			s.mu.Unlock()
			s.in.setWaiting(s.binding, &fakeWaiting{turnID: req.TurnID, input: req.Input, req: *r})
			o := s.out(provider.OutputRequest, req.TurnID)
			o.Request = r
			yield(o, nil)
			return
		case req.Input == FakeHold, req.Input == FakeSteer:
			for {
				select {
				case got := <-wake:
					if got == "" && s.in.flaw == flawIgnoresInterrupt {
						continue
					}
					if got == "" {
						s.finish(req.TurnID, provider.OutcomeInterrupted, yield)
						return
					}
					text.Text = "steered: " + got
				case <-ctx.Done():
					yield(provider.Output{}, context.Cause(ctx))
					return
				}
				break
			}
		case req.Input == FakeInteract && s.in.flaw != flawNeverInteracts:
			said, err := s.interact(ctx, req.TurnID)
			if err != nil {
				yield(provider.Output{}, err)
				return
			}
			text.Text = said
		case verb == FakeCall && s.in.flaw != flawNeverCallsTools:
			name, args, _ := strings.Cut(rest, " ")
			said, err := s.call(ctx, req.TurnID, name, args)
			if err != nil {
				yield(provider.Output{}, err)
				return
			}
			text.Text = said
		default:
			text.Text = "echo: " + req.Input
		}
		if s.in.flaw == flawTurnIDs && req.Input != FakeHold && req.Input != FakeSteer && verb != FakeCall {
			text.TurnID = "some-other-turn"
		}
		if !yield(text, nil) {
			return
		}
		s.finish(req.TurnID, provider.OutcomeCompleted, yield)
	}
}

// interact asks the person the fake's question and tells them what it
// heard.
func (s *fakeSession) interact(ctx context.Context, turnID string) (string, error) {
	if s.interactions == nil {
		return "there is nobody to ask", nil
	}
	r, err := s.interactions.Interact(ctx, s.id, provider.Interaction{ID: turnID + "-question", Kind: provider.InteractionQuestion,
		Message: FakeQuestion, Options: []string{FakeYes, FakeNo}})
	if err != nil {
		return "", err
	}
	said := "the person declined"
	if !r.Declined {
		said = "the person said: " + r.Answer
	}
	if _, err := s.interactions.Interact(ctx, s.id, provider.Interaction{ID: turnID + "-notice", Kind: provider.InteractionNotice,
		Message: "The fake heard you."}); err != nil {
		return "", err
	}
	return said, nil
}

// call invokes a host tool and says how it went. A refusal is something
// to tell the model, not a failure of the turn.
func (s *fakeSession) call(ctx context.Context, turnID, name, args string) (string, error) {
	if s.tools == nil {
		return "no host tools were lent", nil
	}
	res, err := s.tools.Invoke(ctx, provider.HostInvocation{ID: turnID + "-call", Tool: name, Arguments: json.RawMessage(args)})
	switch {
	case err != nil && s.in.flaw == flawBreaksOnRefusal:
		return "", err
	case err != nil:
		return "the host refused: " + string(provider.CodeOf(err)), nil
	case res.Error != nil:
		return "the tool failed: " + res.Error.Code, nil
	}
	return "the tool said: " + string(res.Output), nil
}

// finish records the turn and ends it.
func (s *fakeSession) finish(turnID string, outcome provider.Outcome, yield func(provider.Output, error) bool) {
	s.mu.Lock()
	s.history = append(s.history, fakeTurn{id: turnID, input: s.input})
	history := append([]fakeTurn(nil), s.history...)
	s.active, s.wake, s.pending = "", nil, nil
	s.mu.Unlock()
	s.in.save(s.binding, history)
	s.in.setWaiting(s.binding, nil)
	o := s.out(provider.OutputTurnCompleted, turnID)
	o.Outcome = outcome
	yield(o, nil)
}

func (s *fakeSession) Resolve(ctx context.Context, res provider.Resolution) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		if s.in.flaw == flawResolveRestarts && !yield(s.out(provider.OutputTurnStarted, res.TurnID), nil) {
			return
		}
		t := s.out(provider.OutputText, res.TurnID)
		t.Text = "declined"
		if res.Approve {
			t.Text = "approved"
		}
		if !yield(t, nil) {
			return
		}
		s.finish(res.TurnID, provider.OutcomeCompleted, yield)
	}
}

func (s *fakeSession) Interrupt(ctx context.Context, turnID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active != turnID {
		return nil // already over
	}
	if s.pending != nil {
		s.active, s.wake, s.pending = "", nil, nil
		s.in.setWaiting(s.binding, nil)
		return nil
	}
	select {
	case s.wake <- "":
	default:
	}
	return nil
}

func (s *fakeSession) Steer(ctx context.Context, req provider.SteerRequest) error {
	if s.in.flaw == flawSteerFails {
		return errors.New("the fake lost the steer")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active != req.TurnID || s.wake == nil {
		return fmt.Errorf("%w: the turn is not running", provider.ErrNotStarted)
	}
	select {
	case s.wake <- req.Input:
		return nil
	default:
		return fmt.Errorf("%w: the turn is busy", provider.ErrNotStarted)
	}
}

func (s *fakeSession) Close(ctx context.Context, reason provider.CloseReason) error {
	s.in.driver.live.CompareAndDelete(s.id, s)
	if s.in.flaw == flawToolsOnClose && s.tools != nil {
		for _, t := range s.tools.Tools() {
			s.tools.Invoke(ctx, provider.HostInvocation{ID: "on-close", Tool: t.Name, Arguments: json.RawMessage(`{"text":"bye"}`)})
		}
	}
	if s.in.flaw == flawCloseFails {
		return errors.New("the fake would not close")
	}
	if reason == provider.CloseRequested {
		// The host closed the conversation: its waiting turn is over.
		// Any other reason keeps it for a resume.
		s.mu.Lock()
		waiting := s.pending != nil
		s.mu.Unlock()
		if waiting {
			s.in.setWaiting(s.binding, nil)
		}
	}
	return nil
}

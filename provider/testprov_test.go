package provider_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentry-dev/agentry/provider"
)

// A scriptable provider for the wrapper's tests. It behaves unless a test
// tells it otherwise through its hooks.

type createFn func(context.Context, provider.CreateRequest) (provider.Session, error)

func (f createFn) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	return f(ctx, req)
}

type resumeFn func(context.Context, provider.ResumeRequest) (provider.Session, error)

func (f resumeFn) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	return f(ctx, req)
}

type branchFn func(context.Context, provider.BranchRequest) (provider.Session, error)

func (f branchFn) Branch(ctx context.Context, req provider.BranchRequest) (provider.Session, error) {
	return f(ctx, req)
}

type authFn func(context.Context, provider.AuthRequest) (provider.AuthResult, error)

func (f authFn) Authenticate(ctx context.Context, req provider.AuthRequest) (provider.AuthResult, error) {
	return f(ctx, req)
}

type turnScript func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error]
type resolveScript func(ctx context.Context, s *tsess, res provider.Resolution) iter.Seq2[provider.Output, error]

type tsess struct {
	id      string
	binding provider.Binding

	turn     turnScript
	resolve  resolveScript
	closeErr func(n int) error
	intErr   func() error
	steerErr func() error

	interrupts chan string
	steers     chan string
	closes     atomic.Int32
	turns      atomic.Int32

	mu       sync.Mutex
	reasons  []provider.CloseReason
	resolved []provider.Resolution
}

func newTsess(id string, b provider.Binding) *tsess {
	return &tsess{id: id, binding: b, interrupts: make(chan string, 4), steers: make(chan string, 4)}
}

func (s *tsess) Binding() provider.Binding { return s.binding }

func (s *tsess) out(kind provider.OutputKind, turnID string) provider.Output {
	return provider.Output{Kind: kind, SessionID: s.id, TurnID: turnID}
}

func (s *tsess) RunTurn(ctx context.Context, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
	s.turns.Add(1)
	if s.turn != nil {
		return s.turn(ctx, s, req)
	}
	return s.defaultTurn(ctx, req)
}

func (s *tsess) defaultTurn(ctx context.Context, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
	return func(yield func(provider.Output, error) bool) {
		if !yield(s.out(provider.OutputTurnStarted, req.TurnID), nil) {
			return
		}
		switch req.Input {
		case "ask", "elicit":
			kind := provider.RequestApproval
			if req.Input == "elicit" {
				kind = provider.RequestElicitation
			}
			o := s.out(provider.OutputRequest, req.TurnID)
			o.Request = &provider.Request{ID: "req-" + req.TurnID, Kind: kind, Prompt: "may I?"}
			yield(o, nil)
			return
		case "hold":
			select {
			case <-s.interrupts:
			case <-ctx.Done():
				yield(provider.Output{}, ctx.Err())
				return
			}
			o := s.out(provider.OutputTurnCompleted, req.TurnID)
			o.Outcome = provider.OutcomeInterrupted
			yield(o, nil)
			return
		case "steer":
			var in string
			select {
			case in = <-s.steers:
			case <-ctx.Done():
				yield(provider.Output{}, ctx.Err())
				return
			}
			t := s.out(provider.OutputText, req.TurnID)
			t.Text = "steered: " + in
			if !yield(t, nil) {
				return
			}
		default:
			t := s.out(provider.OutputText, req.TurnID)
			t.Text = "hi"
			if !yield(t, nil) {
				return
			}
		}
		o := s.out(provider.OutputTurnCompleted, req.TurnID)
		o.Outcome = provider.OutcomeCompleted
		yield(o, nil)
	}
}

func (s *tsess) Resolve(ctx context.Context, res provider.Resolution) iter.Seq2[provider.Output, error] {
	s.mu.Lock()
	s.resolved = append(s.resolved, res)
	s.mu.Unlock()
	if s.resolve != nil {
		return s.resolve(ctx, s, res)
	}
	return func(yield func(provider.Output, error) bool) {
		t := s.out(provider.OutputText, res.TurnID)
		t.Text = fmt.Sprintf("approved=%v", res.Approve)
		if !yield(t, nil) {
			return
		}
		o := s.out(provider.OutputTurnCompleted, res.TurnID)
		o.Outcome = provider.OutcomeCompleted
		yield(o, nil)
	}
}

func (s *tsess) Close(ctx context.Context, reason provider.CloseReason) error {
	n := int(s.closes.Add(1))
	s.mu.Lock()
	s.reasons = append(s.reasons, reason)
	s.mu.Unlock()
	if s.closeErr != nil {
		return s.closeErr(n)
	}
	return nil
}

func (s *tsess) closeReasons() []provider.CloseReason {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]provider.CloseReason(nil), s.reasons...)
}

type interruptPort struct{ s *tsess }

func (p interruptPort) Interrupt(ctx context.Context, turnID string) error {
	if p.s.intErr != nil {
		if err := p.s.intErr(); err != nil {
			return err
		}
	}
	select {
	case p.s.interrupts <- turnID:
	default:
	}
	return nil
}

type steerPort struct{ s *tsess }

func (p steerPort) Steer(ctx context.Context, req provider.SteerRequest) error {
	if p.s.steerErr != nil {
		if err := p.s.steerErr(); err != nil {
			return err
		}
	}
	p.s.steers <- req.Input
	return nil
}

// withPorts gives s exactly the optional ports asked for.
func withPorts(s *tsess, interrupt, steer bool) provider.Session {
	switch {
	case interrupt && steer:
		return struct {
			*tsess
			interruptPort
			steerPort
		}{s, interruptPort{s}, steerPort{s}}
	case interrupt:
		return struct {
			*tsess
			interruptPort
		}{s, interruptPort{s}}
	case steer:
		return struct {
			*tsess
			steerPort
		}{s, steerPort{s}}
	}
	return s
}

// tprov is a provider of tsess sessions.
type tprov struct {
	caps provider.Capabilities

	// setup, if set, adjusts every new session before it is returned.
	setup func(*tsess)
	// create, if set, replaces the default create.
	create createFn
	resume resumeFn
	branch branchFn

	calls     atomic.Int32 // openings that reached the provider
	n         atomic.Int32
	mu        sync.Mutex
	sessions  []*tsess
	hostTools []provider.HostTools
}

func fullCaps() provider.Capabilities {
	return provider.Capabilities{
		ProviderKey: "test",
		Sessions:    provider.SessionCapabilities{Resume: true, Branch: provider.BranchThroughTurn},
		Turns:       provider.TurnCapabilities{Interrupt: true, Steer: true},
		Requests:    provider.RequestCapabilities{Approval: true, Elicitation: true},
		HostBinding: provider.HostBindingSupport{Supported: true, InstructionPlacements: []provider.Placement{provider.PlacementSystem}},
	}
}

func newTprov() *tprov { return &tprov{caps: fullCaps()} }

func (p *tprov) newSession(id string, b provider.Binding, ht provider.HostTools) (*tsess, provider.Session) {
	s := newTsess(id, b)
	if p.setup != nil {
		p.setup(s)
	}
	p.mu.Lock()
	p.sessions = append(p.sessions, s)
	p.hostTools = append(p.hostTools, ht)
	p.mu.Unlock()
	return s, withPorts(s, p.caps.Turns.Interrupt, p.caps.Turns.Steer)
}

func (p *tprov) session(i int) *tsess {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[i]
}

func (p *tprov) lastHostTools() provider.HostTools {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hostTools[len(p.hostTools)-1]
}

func (p *tprov) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	p.calls.Add(1)
	if p.create != nil {
		return p.create(ctx, req)
	}
	b := provider.Binding(fmt.Sprintf("native-%d", p.n.Add(1)))
	req.OnBinding(b)
	_, s := p.newSession(req.SessionID, b, req.HostTools)
	return s, nil
}

func (p *tprov) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	p.calls.Add(1)
	if p.resume != nil {
		return p.resume(ctx, req)
	}
	_, s := p.newSession(req.SessionID, req.Binding, req.HostTools)
	return s, nil
}

func (p *tprov) Branch(ctx context.Context, req provider.BranchRequest) (provider.Session, error) {
	p.calls.Add(1)
	if p.branch != nil {
		return p.branch(ctx, req)
	}
	b := provider.Binding(fmt.Sprintf("native-%d", p.n.Add(1)))
	req.OnBinding(b)
	_, s := p.newSession(req.SessionID, b, req.HostTools)
	return s, nil
}

// adapter returns p with exactly the ports its capabilities declare.
func (p *tprov) adapter() provider.Adapter {
	c := createFn(p.Create)
	r := resumeFn(p.Resume)
	b := branchFn(p.Branch)
	resume, branch := p.caps.Sessions.Resume, p.caps.Sessions.Branch == provider.BranchThroughTurn
	switch {
	case resume && branch:
		return struct {
			createFn
			resumeFn
			branchFn
		}{c, r, b}
	case resume:
		return struct {
			createFn
			resumeFn
		}{c, r}
	case branch:
		return struct {
			createFn
			branchFn
		}{c, b}
	}
	return c
}

func (p *tprov) validated(t testing.TB, opts ...provider.Option) *provider.Validated {
	t.Helper()
	v, err := provider.Validate(p.caps, p.adapter(), opts...)
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return v
}

const workDir = "/work/repo"

func createReq(id string) provider.CreateRequest {
	return provider.CreateRequest{SessionID: id, WorkingDirectory: workDir}
}

func open(t testing.TB, v *provider.Validated, id string) *provider.ValidatedSession {
	t.Helper()
	s, err := v.Create(t.Context(), createReq(id))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return s
}

// drain pulls a sequence to its end.
func drain(seq iter.Seq2[provider.Output, error]) ([]provider.Output, error) {
	var outs []provider.Output
	for o, err := range seq {
		if err != nil {
			return outs, err
		}
		outs = append(outs, o)
	}
	return outs, nil
}

func kinds(outs []provider.Output) []provider.OutputKind {
	var ks []provider.OutputKind
	for _, o := range outs {
		ks = append(ks, o.Kind)
	}
	return ks
}

func wantCode(t testing.TB, err error, code provider.Code) {
	t.Helper()
	if !provider.HasCode(err, code) {
		t.Fatalf("err = %v; want code %s", err, code)
	}
	sawCode(code)
}

// recorder collects events.
type recorder struct {
	mu  sync.Mutex
	evs []string
}

func (r *recorder) add(typ string) {
	r.mu.Lock()
	r.evs = append(r.evs, typ)
	r.mu.Unlock()
}

func (r *recorder) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.evs...)
}

package code_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// door is a test door over a real toolsession.Tier: it builds calls the
// way the agent loop does and records what was registered and emitted.
type door struct {
	tier   *toolsession.Tier
	scopes []toolsession.Scope
	// noHold makes a door that cannot pin sessions (no tool.Holder).
	noHold bool
	// cleanupGate, when set, holds every registered cleanup until it is
	// closed: the window between the tier claiming a registration and the
	// tool hearing of it.
	cleanupGate chan struct{}

	mu       sync.Mutex
	regs     []reg
	events   []event.Event
	closures []toolsession.Report
}

type reg struct {
	origin toolsession.Origin
	opt    toolsession.Options
	out    toolsession.Outcome
}

func newDoor(scopes ...toolsession.Scope) *door {
	return newDoorWith(toolsession.Config{}, scopes...)
}

// newDoorWith is newDoor over a tier configured by cfg (its Report is the
// door's).
func newDoorWith(cfg toolsession.Config, scopes ...toolsession.Scope) *door {
	d := &door{scopes: scopes}
	cfg.Report = func(r toolsession.Report) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.closures = append(d.closures, r)
	}
	d.tier = toolsession.NewTier(cfg)
	return d
}

func allScopes() []toolsession.Scope {
	return []toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession, toolsession.ScopeShutdown}
}

func (d *door) register(o toolsession.Origin, cleanup func(context.Context) error, opt toolsession.Options) toolsession.Outcome {
	if gate := d.cleanupGate; gate != nil {
		inner := cleanup
		cleanup = func(ctx context.Context) error { <-gate; return inner(ctx) }
	}
	out := d.tier.Register(o, cleanup, opt)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.regs = append(d.regs, reg{o, opt, out})
	return out
}

func (d *door) emit(e event.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, e)
}

func (d *door) codeRuns() []*code.RunReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*code.RunReport
	for _, e := range d.events {
		if e.Type == code.TypeRun {
			out = append(out, e.Payload.(*code.RunReport))
		}
	}
	return out
}

func (d *door) registrations() []reg {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]reg(nil), d.regs...)
}

// call runs the tool as the agent loop would: one call id, a run, maybe a
// hosted session and an identity.
func (d *door) call(ctx context.Context, tl tool.Tool, callID, runID, sessionID string, id *tool.Identity, src string) (tool.Result, error) {
	args, _ := json.Marshal(map[string]string{"code": src})
	c := tool.NewCall(tl.Spec().Name, callID, runID, sessionID, id, d.scopes, d.register).WithEvents(d.emit)
	if !d.noHold {
		c.WithHolder(d.tier.Hold)
	}
	return tl.Call(ctx, c, args)
}

// memRunner is an in-memory implementation of the runner port, used only
// where a test needs to hold a Start open or fail it on cue (under
// testing/synctest); everything else runs against code/local.
type memRunner struct {
	gate    chan struct{} // when set, Start waits for it
	failing error         // when set, Start fails with it (after the gate)
	noStage bool
	result  func(src string) (code.Result, error)
	// block, when set, is what Execute of the code "block" waits for;
	// entered is told when it starts waiting.
	block   chan struct{}
	entered chan string

	mu       sync.Mutex
	starts   int
	execs    int // Execute calls that ran code
	sessions []*memSession
}

func (r *memRunner) execCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.execs
}

func (r *memRunner) ID() string { return "mem" }

func (r *memRunner) Start(ctx context.Context, req code.StartRequest) (code.Session, error) {
	r.mu.Lock()
	r.starts++
	n := r.starts
	r.mu.Unlock()
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if r.failing != nil {
		return nil, r.failing
	}
	s := &memSession{id: fmt.Sprintf("mem-%d", n), key: req.Key, r: r, vars: map[string]string{}}
	r.mu.Lock()
	r.sessions = append(r.sessions, s)
	r.mu.Unlock()
	if r.noStage {
		return plainSession{s}, nil
	}
	return s, nil
}

func (r *memRunner) startCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts
}

type memSession struct {
	id, key string
	r       *memRunner

	mu       sync.Mutex
	stopped  bool
	broken   bool
	stopGate chan struct{}
	vars     map[string]string
	staged   []code.Staged
}

func (s *memSession) ID() string { return s.id }

func (s *memSession) Execute(_ context.Context, req code.ExecRequest) (code.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return code.Result{}, fmt.Errorf("mem: session %s stopped: %w", s.id, code.ErrStopped)
	}
	if s.broken {
		return code.Result{}, fmt.Errorf("mem: session %s broken: %w", s.id, code.ErrBroken)
	}
	s.r.mu.Lock()
	s.r.execs++
	s.r.mu.Unlock()
	switch req.Code {
	case "hang":
		s.broken = true
		return code.Result{Stdout: "partial"}, fmt.Errorf("mem: timed out: %w", code.ErrTimeout)
	case "lose":
		// The session dies under the code, after it may have done
		// something.
		s.broken = true
		return code.Result{Stdout: "half"}, fmt.Errorf("mem: session %s died mid-execute: %w", s.id, code.ErrBroken)
	case "block":
		s.mu.Unlock()
		if s.r.entered != nil {
			s.r.entered <- s.id
		}
		<-s.r.block
		s.mu.Lock()
		if s.stopped {
			return code.Result{}, fmt.Errorf("mem: session %s stopped mid-execute: %w", s.id, code.ErrStopped)
		}
	}
	if s.r.result != nil {
		return s.r.result(req.Code)
	}
	zero := 0
	return code.Result{OK: true, Stdout: s.id + ":" + req.Code, ExitCode: &zero}, nil
}

func (s *memSession) Stop(context.Context) error {
	s.mu.Lock()
	gate := s.stopGate
	s.stopped = true
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return nil
}

func (s *memSession) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (s *memSession) Stage(_ context.Context, in []code.Input) ([]code.Staged, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range in {
		s.staged = append(s.staged, code.Staged{Name: x.Name, Path: "/work/inputs/" + x.Name, Bytes: len(x.Data)})
	}
	return s.staged, nil
}

// plainSession hides Stage: a session that cannot stage.
type plainSession struct{ s *memSession }

func (p plainSession) ID() string { return p.s.ID() }
func (p plainSession) Execute(ctx context.Context, r code.ExecRequest) (code.Result, error) {
	return p.s.Execute(ctx, r)
}
func (p plainSession) Stop(ctx context.Context) error { return p.s.Stop(ctx) }

func mustErrorAs[T error](t *testing.T, err error) T {
	t.Helper()
	var target T
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T) is not a %T", err, err, target)
	}
	return target
}

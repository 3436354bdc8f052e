package provider

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// Option configures a [Validated] adapter.
type Option func(*options)

type options struct {
	events         func(event.Event)
	instance       string
	cleanupTimeout time.Duration
	gate           func() error
}

// WithEvents sends the wrapper's events (agentry.provider.*) to fn, which
// must not block; pass an event.Sink's or Bus's Export.
func WithEvents(fn func(event.Event)) Option { return func(o *options) { o.events = fn } }

// WithInstance names the instance in events (the registry sets it).
func WithInstance(id string) Option { return func(o *options) { o.instance = id } }

// WithCleanupTimeout bounds the cleanup of a session the wrapper rejected
// or a binding whose opening failed (default 10s). The opening's own
// context may already be done when that cleanup runs, so it gets this
// bound instead.
func WithCleanupTimeout(d time.Duration) Option {
	return func(o *options) { o.cleanupTimeout = d }
}

// withGate refuses openings when gate returns an error (a disposed
// instance).
func withGate(gate func() error) Option { return func(o *options) { o.gate = gate } }

// Validated is an adapter behind the contract. It checks every input
// before delegating (a refused call never reaches the provider), enforces
// the binding-callback discipline, claims and releases host bindings, and
// returns *ValidatedSession. It has every opening (Create, Resume, Branch)
// and Authenticate; one the capabilities do not declare refuses with
// input_capability_mismatch. [Validated.AsAdapter] is its view as an
// [Adapter]. Safe for concurrent use.
type Validated struct {
	caps  Capabilities
	inner Adapter
	opt   options
}

var _ Authenticator = (*Validated)(nil)

// Validate puts adapter behind caps. It refuses invalid capabilities
// (invalid_capabilities), a nil adapter (invalid_adapter), and an adapter
// whose optional ports do not match what caps declare
// (capability_port_mismatch).
//
// Validating a wrapper (its [Validated.AsAdapter]) with the same
// capabilities returns it as it is (the options of its first validation
// stand); with other capabilities it wraps the original adapter afresh,
// never a wrapper in a wrapper.
func Validate(caps Capabilities, adapter Adapter, opts ...Option) (*Validated, error) {
	c, err := CheckCapabilities(caps)
	if err != nil {
		return nil, err
	}
	if va, ok := adapter.(validatedAdapter); ok && va.v != nil {
		if va.v.caps.Equal(c) {
			return va.v, nil
		}
		adapter = va.v.inner
	}
	if isNil(adapter) {
		return nil, violation(c.ProviderKey, CodeInvalidAdapter, "the adapter is nil")
	}
	_, resumes := adapter.(Resumer)
	_, branches := adapter.(Brancher)
	_, authenticates := adapter.(Authenticator)
	for _, p := range []struct {
		port              string
		declared, present bool
	}{
		{"resume (Resumer)", c.Sessions.Resume, resumes},
		{"branch (Brancher)", c.Sessions.Branch == BranchThroughTurn, branches},
		{"authentication (Authenticator)", c.Authentication.Supported, authenticates},
	} {
		if p.declared != p.present {
			return nil, portMismatch(c.ProviderKey, p.port, p.declared)
		}
	}
	v := &Validated{caps: c, inner: adapter, opt: options{cleanupTimeout: 10 * time.Second}}
	for _, o := range opts {
		o(&v.opt)
	}
	if v.opt.cleanupTimeout <= 0 {
		v.opt.cleanupTimeout = 10 * time.Second
	}
	return v, nil
}

func portMismatch(key, port string, declared bool) *ContractError {
	if declared {
		return violation(key, CodeCapabilityPortMismatch, "the capabilities declare %s but the adapter does not implement it", port)
	}
	return violation(key, CodeCapabilityPortMismatch, "the adapter implements %s but the capabilities do not declare it", port)
}

func isNil(a any) bool {
	if a == nil {
		return true
	}
	v := reflect.ValueOf(a)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Interface, reflect.Slice, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// Capabilities returns the normalised declaration.
func (v *Validated) Capabilities() Capabilities { return v.caps }

// ProviderKey returns the provider's key.
func (v *Validated) ProviderKey() string { return v.caps.ProviderKey }

// opening is what create, resume and branch share.
type opening struct {
	mode        string // create, resume, branch
	sessionID   string
	workDir     string
	config      []byte
	hostBinding *HostBinding
	hostTools   HostTools
}

// checkOpening checks the inputs every opening shares.
func (v *Validated) checkOpening(o opening) error {
	key := v.caps.ProviderKey
	if v.opt.gate != nil {
		if err := v.opt.gate(); err != nil {
			return err
		}
	}
	if err := CheckID(o.sessionID); err != nil {
		return &ContractError{Provider: key, Code: CodeInvalidInput, Message: "the session id is malformed", Err: err}
	}
	if err := CheckWorkingDirectory(o.workDir); err != nil {
		return &ContractError{Provider: key, Code: CodeInvalidInput, Message: "the working directory is unusable", Err: err}
	}
	if err := CheckConfiguration(o.config); err != nil {
		return &ContractError{Provider: key, Code: CodeInvalidInput, Message: "the configuration is unusable", Err: err}
	}
	if o.hostTools != nil {
		return violation(key, CodeInvalidHostBinding, "a host passes a HostBinding, never HostTools")
	}
	return nil
}

// withLease claims and initialises the opening's host binding, runs open,
// and releases the binding when open fails.
func (v *Validated) withLease(ctx context.Context, b *HostBinding, open func(*lease) (*ValidatedSession, error)) (*ValidatedSession, error) {
	var l *lease
	if b != nil {
		var err error
		l, err = claim(v.caps.ProviderKey, b)
		if err != nil {
			return nil, err
		}
		if err := l.initialise(v.caps); err != nil {
			return nil, v.releaseAfterFailure(ctx, l, err)
		}
	}
	s, err := open(l)
	if err != nil && l != nil {
		switch err.(type) {
		case *CleanupError, *HostBindingCleanupError:
			// The rejected candidate's cleanup already covered the lease.
			return nil, err
		}
		return nil, v.releaseAfterFailure(ctx, l, err)
	}
	return s, err
}

// releaseAfterFailure releases a lease whose opening failed. When that
// fails too, the error is a *HostBindingCleanupError holding both.
func (v *Validated) releaseAfterFailure(ctx context.Context, l *lease, cause error) error {
	cctx, cancel := v.cleanupContext(ctx)
	defer cancel()
	if err := l.release.do(cctx); err != nil {
		v.emitProblem("", CodeHostBindingClosed, err)
		return &HostBindingCleanupError{CleanupError{Provider: v.caps.ProviderKey, Errs: flatten(cause, err), retry: l.release}}
	}
	return cause
}

func (v *Validated) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), v.opt.cleanupTimeout)
}

// observer is the binding callback the wrapper hands a provider.
type observer struct {
	mu        sync.Mutex
	calls     int
	first     Binding
	sealed    bool
	late      *ValidatedSession // quarantined by a callback after the opening
	host      func(Binding)
	hostPanic atomic.Bool // the host's own OnBinding is running
}

func (o *observer) report(b Binding) {
	o.mu.Lock()
	o.calls++
	n, sealed, late := o.calls, o.sealed, o.late
	if n == 1 {
		o.first = b
	}
	o.mu.Unlock()
	if sealed {
		if late != nil {
			late.quarantine(violation(late.v.caps.ProviderKey, CodeBindingCallbackRepeated, "the provider reported a binding after the opening returned"))
		}
		return
	}
	if n == 1 && o.host != nil && CheckID(string(b)) == nil {
		o.hostPanic.Store(true)
		o.host(b)
		o.hostPanic.Store(false)
	}
}

// seal ends the opening: a later callback quarantines late.
func (o *observer) seal(late *ValidatedSession) (calls int, first Binding) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sealed, o.late = true, late
	return o.calls, o.first
}

// delegate calls a provider's opening, recovering a panic. A panic in the
// host's own OnBinding is re-raised: it is not the provider's fault.
func (v *Validated) delegate(op string, obs *observer, fn func() (Session, error)) (Session, error) {
	var s Session
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				if obs != nil && obs.hostPanic.Load() {
					panic(r)
				}
				err = &PanicError{Where: "the provider's " + op, Value: r}
			}
		}()
		s, err = fn()
		return err
	}()
	if err != nil {
		if s != nil {
			// A provider that returns both a session and an error has
			// opened something; close it rather than leak it.
			_ = safely("close", func() error { return s.Close(context.Background(), CloseContractRejected) })
		}
		return nil, &OperationError{Provider: v.caps.ProviderKey, Op: op, Err: err}
	}
	if isNil(s) {
		return nil, violation(v.caps.ProviderKey, CodeInvalidSession, "the provider's %s returned no session and no error", op)
	}
	return s, nil
}

// Create opens a session.
func (v *Validated) Create(ctx context.Context, req CreateRequest) (*ValidatedSession, error) {
	o := opening{mode: "create", sessionID: req.SessionID, workDir: req.WorkingDirectory, config: req.Configuration,
		hostBinding: req.HostBinding, hostTools: req.HostTools}
	if err := v.checkOpening(o); err != nil {
		return nil, err
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return v.withLease(ctx, req.HostBinding, func(l *lease) (*ValidatedSession, error) {
		obs := &observer{host: req.OnBinding}
		ia := v.interactionsFor(req.SessionID, req.Interactions)
		preq := CreateRequest{SessionID: req.SessionID, WorkingDirectory: req.WorkingDirectory,
			Configuration: clone(req.Configuration), OnBinding: obs.report, Interactions: ia.facade()}
		if l != nil {
			preq.HostTools = facade{l}
		}
		cand, err := v.delegate("create", obs, func() (Session, error) { return v.inner.Create(ctx, preq) })
		if err != nil {
			ia.end()
			return nil, err
		}
		return v.adopt(ctx, o, cand, l, ia, obs, "", "")
	})
}

// Resume reopens a session from its binding.
func (v *Validated) Resume(ctx context.Context, req ResumeRequest) (*ValidatedSession, error) {
	key := v.caps.ProviderKey
	r, ok := v.inner.(Resumer)
	if !ok {
		return nil, violation(key, CodeInputCapabilityMismatch, "the provider does not declare resume")
	}
	o := opening{mode: "resume", sessionID: req.SessionID, workDir: req.WorkingDirectory, config: req.Configuration,
		hostBinding: req.HostBinding, hostTools: req.HostTools}
	if err := v.checkOpening(o); err != nil {
		return nil, err
	}
	if err := CheckID(string(req.Binding)); err != nil {
		return nil, &ContractError{Provider: key, Code: CodeInvalidBinding, Message: "the binding to resume is malformed", Err: err}
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return v.withLease(ctx, req.HostBinding, func(l *lease) (*ValidatedSession, error) {
		ia := v.interactionsFor(req.SessionID, req.Interactions)
		preq := ResumeRequest{SessionID: req.SessionID, WorkingDirectory: req.WorkingDirectory,
			Configuration: clone(req.Configuration), Binding: req.Binding, Interactions: ia.facade()}
		if l != nil {
			preq.HostTools = facade{l}
		}
		cand, err := v.delegate("resume", nil, func() (Session, error) { return r.Resume(ctx, preq) })
		if err != nil {
			ia.end()
			return nil, err
		}
		return v.adopt(ctx, o, cand, l, ia, nil, req.Binding, "")
	})
}

// Branch forks a session after one of its turns.
func (v *Validated) Branch(ctx context.Context, req BranchRequest) (*ValidatedSession, error) {
	key := v.caps.ProviderKey
	br, ok := v.inner.(Brancher)
	if !ok {
		return nil, violation(key, CodeInputCapabilityMismatch, "the provider does not declare branch")
	}
	o := opening{mode: "branch", sessionID: req.SessionID, workDir: req.WorkingDirectory, config: req.Configuration,
		hostBinding: req.HostBinding, hostTools: req.HostTools}
	if err := v.checkOpening(o); err != nil {
		return nil, err
	}
	if err := CheckID(string(req.Source.Binding)); err != nil {
		return nil, &ContractError{Provider: key, Code: CodeInvalidBinding, Message: "the source binding is malformed", Err: err}
	}
	if err := CheckID(req.Source.TurnID); err != nil {
		return nil, &ContractError{Provider: key, Code: CodeInvalidInput, Message: "the source turn id is malformed", Err: err}
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return v.withLease(ctx, req.HostBinding, func(l *lease) (*ValidatedSession, error) {
		obs := &observer{host: req.OnBinding}
		ia := v.interactionsFor(req.SessionID, req.Interactions)
		preq := BranchRequest{SessionID: req.SessionID, WorkingDirectory: req.WorkingDirectory,
			Configuration: clone(req.Configuration), Source: req.Source, OnBinding: obs.report, Interactions: ia.facade()}
		if l != nil {
			preq.HostTools = facade{l}
		}
		cand, err := v.delegate("branch", obs, func() (Session, error) { return br.Branch(ctx, preq) })
		if err != nil {
			ia.end()
			return nil, err
		}
		return v.adopt(ctx, o, cand, l, ia, obs, "", req.Source.Binding)
	})
}

// Authenticate runs an authentication step for a declared flow.
func (v *Validated) Authenticate(ctx context.Context, req AuthRequest) (AuthResult, error) {
	key := v.caps.ProviderKey
	a, ok := v.inner.(Authenticator)
	if !ok {
		return AuthResult{}, violation(key, CodeInputCapabilityMismatch, "the provider does not declare authentication")
	}
	if v.opt.gate != nil {
		if err := v.opt.gate(); err != nil {
			return AuthResult{}, err
		}
	}
	if !containsString(v.caps.Authentication.Flows, req.Flow) {
		return AuthResult{}, violation(key, CodeInputCapabilityMismatch, "the provider does not declare that authentication flow")
	}
	var res AuthResult
	err := safely("the provider's authenticate", func() error {
		var err error
		res, err = a.Authenticate(ctx, req)
		return err
	})
	if err != nil {
		return AuthResult{}, &OperationError{Provider: key, Op: "authenticate", Err: err}
	}
	switch res.Status {
	case AuthAuthenticated, AuthFailed:
	case AuthPending:
		if res.URL != "" && CheckID(res.URL) != nil {
			return AuthResult{}, violation(key, CodeInvalidOperationResult, "a pending authentication's URL is malformed")
		}
	default:
		return AuthResult{}, violation(key, CodeInvalidOperationResult, "authentication returned an unknown status")
	}
	return res, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// AsAdapter returns v as an [Adapter] with every port (Resumer, Brancher,
// Authenticator), for code that takes an adapter; its sessions are
// *ValidatedSession. Passing it to [Validate] unwraps it rather than
// wrapping a wrapper.
func (v *Validated) AsAdapter() Adapter { return validatedAdapter{v} }

type validatedAdapter struct{ v *Validated }

var (
	_ Adapter       = validatedAdapter{}
	_ Resumer       = validatedAdapter{}
	_ Brancher      = validatedAdapter{}
	_ Authenticator = validatedAdapter{}
)

func (a validatedAdapter) Create(ctx context.Context, req CreateRequest) (Session, error) {
	return session(a.v.Create(ctx, req))
}

func (a validatedAdapter) Resume(ctx context.Context, req ResumeRequest) (Session, error) {
	return session(a.v.Resume(ctx, req))
}

func (a validatedAdapter) Branch(ctx context.Context, req BranchRequest) (Session, error) {
	return session(a.v.Branch(ctx, req))
}

func (a validatedAdapter) Authenticate(ctx context.Context, req AuthRequest) (AuthResult, error) {
	return a.v.Authenticate(ctx, req)
}

// session keeps a nil *ValidatedSession from becoming a non-nil Session.
func session(s *ValidatedSession, err error) (Session, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

package conformance

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/agentry-dev/agentry/provider"
)

// The spy sits between the validated wrapper and the adapter under test,
// where the provider's side of a host binding can be watched: which
// HostTools the provider received and every invocation it attempted.

type spyState struct {
	disposes atomic.Int32

	mu           sync.Mutex
	tools        []provider.HostTools // the real facades handed to the provider
	attempts     []attempt
	closing      bool
	interactions []provider.Interactions // the facades handed to the provider
	interacted   []provider.Code         // each interaction's refusal code, "" when it went through
}

func (s *spyState) lastInteractions() provider.Interactions {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.interactions) == 0 {
		return nil
	}
	return s.interactions[len(s.interactions)-1]
}

func (s *spyState) interactAttempts() []provider.Code {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]provider.Code(nil), s.interacted...)
}

// spyInteractions records the provider's interactions on their way to
// the real facade.
func (s *spyState) spyInteractions(ia provider.Interactions) provider.Interactions {
	if ia == nil {
		return nil
	}
	s.mu.Lock()
	s.interactions = append(s.interactions, ia)
	s.mu.Unlock()
	return spyInteract{ia, s}
}

type spyInteract struct {
	inner provider.Interactions
	state *spyState
}

func (i spyInteract) Interact(ctx context.Context, sessionID string, in provider.Interaction) (provider.InteractionReply, error) {
	r, err := i.inner.Interact(ctx, sessionID, in)
	code := provider.Code("")
	if err != nil {
		if code = provider.CodeOf(err); code == "" {
			code = "error"
		}
	}
	i.state.mu.Lock()
	i.state.interacted = append(i.state.interacted, code)
	i.state.mu.Unlock()
	return r, err
}

type attempt struct {
	tool, id      string
	code          provider.Code // "" when the invocation went through
	duringClosing bool
}

func (s *spyState) lastTools() provider.HostTools {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tools) == 0 {
		return nil
	}
	return s.tools[len(s.tools)-1]
}

func (s *spyState) markClosing() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
}

func (s *spyState) attemptList() []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attempt(nil), s.attempts...)
}

// spyDriver wraps a driver so every adapter it builds is watched.
type spyDriver struct {
	inner provider.Driver
	state *spyState
}

func (d spyDriver) ProviderKey() string             { return d.inner.ProviderKey() }
func (d spyDriver) SupportsMultipleInstances() bool { return d.inner.SupportsMultipleInstances() }

func (d spyDriver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	m, err := d.inner.Materialize(ctx, def)
	if err != nil || m.Adapter == nil {
		return m, err
	}
	m.Adapter = watch(m.Adapter, d.state)
	if dispose := m.Dispose; dispose != nil {
		m.Dispose = func(ctx context.Context) error {
			d.state.disposes.Add(1)
			return dispose(ctx)
		}
	} else {
		m.Dispose = func(context.Context) error { d.state.disposes.Add(1); return nil }
	}
	return m, nil
}

type spyCreate struct {
	inner provider.Adapter
	state *spyState
}

func (c spyCreate) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	req.HostTools = c.state.spyOn(req.HostTools)
	req.Interactions = c.state.spyInteractions(req.Interactions)
	return c.inner.Create(ctx, req)
}

type spyResume struct {
	inner provider.Resumer
	state *spyState
}

func (r spyResume) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	req.HostTools = r.state.spyOn(req.HostTools)
	req.Interactions = r.state.spyInteractions(req.Interactions)
	return r.inner.Resume(ctx, req)
}

type spyBranch struct {
	inner provider.Brancher
	state *spyState
}

func (b spyBranch) Branch(ctx context.Context, req provider.BranchRequest) (provider.Session, error) {
	req.HostTools = b.state.spyOn(req.HostTools)
	req.Interactions = b.state.spyInteractions(req.Interactions)
	return b.inner.Branch(ctx, req)
}

// watch returns an adapter with exactly a's ports, each watched.
func watch(a provider.Adapter, st *spyState) provider.Adapter {
	c := spyCreate{a, st}
	r, resumes := a.(provider.Resumer)
	b, branches := a.(provider.Brancher)
	au, authenticates := a.(provider.Authenticator)
	sr, sb := spyResume{r, st}, spyBranch{b, st}
	switch {
	case resumes && branches && authenticates:
		return struct {
			spyCreate
			spyResume
			spyBranch
			provider.Authenticator
		}{c, sr, sb, au}
	case resumes && branches:
		return struct {
			spyCreate
			spyResume
			spyBranch
		}{c, sr, sb}
	case resumes && authenticates:
		return struct {
			spyCreate
			spyResume
			provider.Authenticator
		}{c, sr, au}
	case branches && authenticates:
		return struct {
			spyCreate
			spyBranch
			provider.Authenticator
		}{c, sb, au}
	case resumes:
		return struct {
			spyCreate
			spyResume
		}{c, sr}
	case branches:
		return struct {
			spyCreate
			spyBranch
		}{c, sb}
	case authenticates:
		return struct {
			spyCreate
			provider.Authenticator
		}{c, au}
	}
	return c
}

func (s *spyState) spyOn(ht provider.HostTools) provider.HostTools {
	if ht == nil {
		return nil
	}
	s.mu.Lock()
	s.tools = append(s.tools, ht)
	s.mu.Unlock()
	return spyTools{ht, s}
}

// spyTools records the provider's invocations on their way to the real
// facade.
type spyTools struct {
	provider.HostTools
	state *spyState
}

func (t spyTools) Invoke(ctx context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
	t.state.mu.Lock()
	closing := t.state.closing
	t.state.mu.Unlock()
	res, err := t.HostTools.Invoke(ctx, inv)
	a := attempt{tool: inv.Tool, id: inv.ID, duringClosing: closing}
	if err != nil {
		a.code = provider.CodeOf(err)
		if a.code == "" {
			a.code = "error"
		}
	}
	t.state.mu.Lock()
	t.state.attempts = append(t.state.attempts, a)
	t.state.mu.Unlock()
	return res, err
}

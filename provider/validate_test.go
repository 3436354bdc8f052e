package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/agentry-dev/agentry/provider"
)

func TestValidateRefusesBadDeclarations(t *testing.T) {
	t.Parallel()
	p := newTprov()

	_, err := provider.Validate(provider.Capabilities{ProviderKey: "Bad Key"}, p.adapter())
	wantCode(t, err, provider.CodeInvalidCapabilities)

	_, err = provider.Validate(p.caps, nil)
	wantCode(t, err, provider.CodeInvalidAdapter)
	var nilProv *tprov
	_, err = provider.Validate(p.caps, nilProv)
	wantCode(t, err, provider.CodeInvalidAdapter)

	for name, tc := range map[string]struct {
		caps    func(*provider.Capabilities)
		adapter provider.Adapter
	}{
		"resume declared, absent": {func(c *provider.Capabilities) {}, struct {
			createFn
			branchFn
		}{p.Create, p.Branch}},
		"resume present, undeclared": {func(c *provider.Capabilities) { c.Sessions.Resume = false }, p.adapter()},
		"branch declared, absent": {func(c *provider.Capabilities) {}, struct {
			createFn
			resumeFn
		}{p.Create, p.Resume}},
		"branch present, undeclared": {func(c *provider.Capabilities) { c.Sessions.Branch = "" }, p.adapter()},
		"auth declared, absent": {func(c *provider.Capabilities) {
			c.Authentication = provider.AuthenticationSupport{Supported: true, Flows: []string{"oauth"}}
		}, p.adapter()},
		"auth present, undeclared": {func(c *provider.Capabilities) {}, struct {
			*tprov
			authFn
		}{p, func(context.Context, provider.AuthRequest) (provider.AuthResult, error) {
			return provider.AuthResult{}, nil
		}}},
	} {
		caps := fullCaps()
		tc.caps(&caps)
		_, err := provider.Validate(caps, tc.adapter)
		if !provider.HasCode(err, provider.CodeCapabilityPortMismatch) {
			t.Errorf("%s: err = %v; want capability_port_mismatch", name, err)
		}
	}
	sawCode(provider.CodeCapabilityPortMismatch)
}

func TestValidateTwiceIsTheSameWrapper(t *testing.T) {
	t.Parallel()
	p := newTprov()
	v := p.validated(t)
	again, err := provider.Validate(fullCaps(), v.AsAdapter())
	if err != nil || again != v {
		t.Fatalf("validating a wrapper with the same capabilities: %p, %v; want %p", again, err, v)
	}
	// Other capabilities: a new wrapper over the provider, never a
	// wrapper in a wrapper: one call reaches the provider once.
	caps := fullCaps()
	caps.Requests.Elicitation = false
	other, err := provider.Validate(caps, v.AsAdapter())
	if err != nil {
		t.Fatal(err)
	}
	if other == v || other.Capabilities().Requests.Elicitation {
		t.Fatalf("revalidating with new capabilities returned the old wrapper")
	}
	s := open(t, other, "s1")
	defer s.Close(t.Context(), "")
	if got := p.calls.Load(); got != 1 {
		t.Fatalf("the provider saw %d calls; want 1", got)
	}
	if s.Binding() != "native-1" {
		t.Fatalf("binding %q", s.Binding())
	}
}

func TestOpeningRefusedBeforeDelegating(t *testing.T) {
	t.Parallel()
	p := newTprov()
	v := p.validated(t)
	ctx := t.Context()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	for name, tc := range map[string]struct {
		open func() error
		code provider.Code
	}{
		"empty session id": {func() error { _, err := v.Create(ctx, provider.CreateRequest{WorkingDirectory: workDir}); return err }, provider.CodeInvalidInput},
		"spaced session id": {func() error {
			_, err := v.Create(ctx, provider.CreateRequest{SessionID: " s", WorkingDirectory: workDir})
			return err
		}, provider.CodeInvalidInput},
		"relative dir": {func() error {
			_, err := v.Create(ctx, provider.CreateRequest{SessionID: "s", WorkingDirectory: "repo"})
			return err
		}, provider.CodeInvalidInput},
		"unclean dir": {func() error {
			_, err := v.Create(ctx, provider.CreateRequest{SessionID: "s", WorkingDirectory: "/work/../etc"})
			return err
		}, provider.CodeInvalidInput},
		"control in dir": {func() error {
			_, err := v.Create(ctx, provider.CreateRequest{SessionID: "s", WorkingDirectory: "/work/\x1b[2J"})
			return err
		}, provider.CodeInvalidInput},
		"config not an object": {func() error {
			_, err := v.Create(ctx, provider.CreateRequest{SessionID: "s", WorkingDirectory: workDir, Configuration: json.RawMessage(`[1]`)})
			return err
		}, provider.CodeInvalidInput},
		"host passes a facade": {func() error {
			_, err := v.Create(ctx, provider.CreateRequest{SessionID: "s", WorkingDirectory: workDir, HostTools: fakeTools{}})
			return err
		}, provider.CodeInvalidHostBinding},
		"resume bad binding": {func() error {
			_, err := v.Resume(ctx, provider.ResumeRequest{SessionID: "s", WorkingDirectory: workDir, Binding: ""})
			return err
		}, provider.CodeInvalidBinding},
		"resume bad dir": {func() error {
			_, err := v.Resume(ctx, provider.ResumeRequest{SessionID: "s", WorkingDirectory: "/a/", Binding: "b"})
			return err
		}, provider.CodeInvalidInput},
		"branch bad source binding": {func() error {
			_, err := v.Branch(ctx, provider.BranchRequest{SessionID: "s", WorkingDirectory: workDir, Source: provider.BranchSource{Binding: "b\n", TurnID: "t"}})
			return err
		}, provider.CodeInvalidBinding},
		"branch bad source turn": {func() error {
			_, err := v.Branch(ctx, provider.BranchRequest{SessionID: "s", WorkingDirectory: workDir, Source: provider.BranchSource{Binding: "b", TurnID: ""}})
			return err
		}, provider.CodeInvalidInput},
	} {
		err := tc.open()
		if !provider.HasCode(err, tc.code) {
			t.Errorf("%s: err = %v; want %s", name, err, tc.code)
		}
		sawCode(tc.code)
	}
	if _, err := v.Create(cancelled, createReq("s")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled create: %v", err)
	}
	if n := p.calls.Load(); n != 0 {
		t.Fatalf("%d refused openings reached the provider", n)
	}
}

func TestUndeclaredPortsRefuse(t *testing.T) {
	t.Parallel()
	p := newTprov()
	p.caps = provider.Capabilities{ProviderKey: "plain"}
	v := p.validated(t)
	ctx := t.Context()
	_, err := v.Resume(ctx, provider.ResumeRequest{SessionID: "s", WorkingDirectory: workDir, Binding: "b"})
	wantCode(t, err, provider.CodeInputCapabilityMismatch)
	_, err = v.Branch(ctx, provider.BranchRequest{SessionID: "s", WorkingDirectory: workDir, Source: provider.BranchSource{Binding: "b", TurnID: "t"}})
	wantCode(t, err, provider.CodeInputCapabilityMismatch)
	_, err = v.Authenticate(ctx, provider.AuthRequest{Flow: "oauth"})
	wantCode(t, err, provider.CodeInputCapabilityMismatch)

	s := open(t, v, "s")
	defer s.Close(ctx, "")
	wantCode(t, s.Interrupt(ctx, "t"), provider.CodeInputCapabilityMismatch)
	wantCode(t, s.Steer(ctx, provider.SteerRequest{TurnID: "t", Input: "x"}), provider.CodeInputCapabilityMismatch)
	if n := p.calls.Load(); n != 1 {
		t.Fatalf("the provider saw %d openings; want 1", n)
	}
}

func TestBindingCallbackDiscipline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		report func(on func(provider.Binding)) provider.Binding // returns the session's binding
		code   provider.Code
	}{
		{"missing", func(on func(provider.Binding)) provider.Binding { return "b1" }, provider.CodeBindingCallbackMissing},
		{"repeated", func(on func(provider.Binding)) provider.Binding { on("b1"); on("b1"); return "b1" }, provider.CodeBindingCallbackRepeated},
		{"mismatch", func(on func(provider.Binding)) provider.Binding { on("b1"); return "b2" }, provider.CodeBindingCallbackMismatch},
		{"malformed", func(on func(provider.Binding)) provider.Binding { on(" b"); return " b" }, provider.CodeInvalidBinding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newTprov()
			var cand *tsess
			p.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
				b := tc.report(req.OnBinding)
				var s provider.Session
				cand, s = p.newSession(req.SessionID, b, nil)
				return s, nil
			}
			v := p.validated(t)
			var told []provider.Binding
			req := createReq("s")
			req.OnBinding = func(b provider.Binding) { told = append(told, b) }
			s, err := v.Create(t.Context(), req)
			if s != nil {
				t.Fatal("a rejected opening returned a session")
			}
			wantCode(t, err, tc.code)
			if got := cand.closeReasons(); !slices.Equal(got, []provider.CloseReason{provider.CloseContractRejected}) {
				t.Fatalf("the rejected candidate was closed with %v; want [contract_rejected]", got)
			}
			if len(told) > 1 {
				t.Fatalf("the host heard %d bindings", len(told))
			}
			if tc.code == provider.CodeInvalidBinding && len(told) != 0 {
				t.Fatal("the host heard a malformed binding")
			}
		})
	}
}

func TestBranchAndResumeBindings(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	v := p.validated(t)
	src := open(t, v, "src")
	defer src.Close(ctx, "")
	if _, err := drain(src.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "hello"})); err != nil {
		t.Fatal(err)
	}

	// A good branch: a new binding, told to the host once.
	var told []provider.Binding
	br, err := v.Branch(ctx, provider.BranchRequest{SessionID: "br", WorkingDirectory: workDir,
		Source: provider.BranchSource{Binding: src.Binding(), TurnID: "t1"}, OnBinding: func(b provider.Binding) { told = append(told, b) }})
	if err != nil {
		t.Fatal(err)
	}
	if br.Binding() == src.Binding() || !slices.Equal(told, []provider.Binding{br.Binding()}) {
		t.Fatalf("branch binding %q, told %v", br.Binding(), told)
	}
	br.Close(ctx, "")

	// A good resume keeps its binding.
	rs, err := v.Resume(ctx, provider.ResumeRequest{SessionID: "rs", WorkingDirectory: workDir, Binding: src.Binding()})
	if err != nil || rs.Binding() != src.Binding() {
		t.Fatalf("resume: %v, %v", rs, err)
	}
	rs.Close(ctx, "")

	// A branch that reuses its source's binding.
	p.branch = func(ctx context.Context, req provider.BranchRequest) (provider.Session, error) {
		req.OnBinding(req.Source.Binding)
		_, s := p.newSession(req.SessionID, req.Source.Binding, nil)
		return s, nil
	}
	_, err = v.Branch(ctx, provider.BranchRequest{SessionID: "br2", WorkingDirectory: workDir,
		Source: provider.BranchSource{Binding: src.Binding(), TurnID: "t1"}})
	wantCode(t, err, provider.CodeBranchBindingReused)
	if got := p.session(len(p.sessions) - 1).closeReasons(); !slices.Equal(got, []provider.CloseReason{provider.CloseContractRejected}) {
		t.Fatalf("reused-binding branch closed with %v", got)
	}

	// A branch that forgets the callback.
	p.branch = func(ctx context.Context, req provider.BranchRequest) (provider.Session, error) {
		_, s := p.newSession(req.SessionID, "fresh", nil)
		return s, nil
	}
	_, err = v.Branch(ctx, provider.BranchRequest{SessionID: "br3", WorkingDirectory: workDir,
		Source: provider.BranchSource{Binding: src.Binding(), TurnID: "t1"}})
	wantCode(t, err, provider.CodeBindingCallbackMissing)

	// A resume that comes back as another conversation.
	p.resume = func(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
		_, s := p.newSession(req.SessionID, req.Binding+"-other", nil)
		return s, nil
	}
	_, err = v.Resume(ctx, provider.ResumeRequest{SessionID: "rs2", WorkingDirectory: workDir, Binding: src.Binding()})
	wantCode(t, err, provider.CodeResumeBindingMismatch)
	if got := p.session(len(p.sessions) - 1).closeReasons(); !slices.Equal(got, []provider.CloseReason{provider.CloseContractRejected}) {
		t.Fatalf("mismatched resume closed with %v", got)
	}
}

func TestLateBindingCallbackQuarantines(t *testing.T) {
	t.Parallel()
	p := newTprov()
	var keep func(provider.Binding)
	p.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
		req.OnBinding("b")
		keep = req.OnBinding
		_, s := p.newSession(req.SessionID, "b", nil)
		return s, nil
	}
	v := p.validated(t)
	s := open(t, v, "s")
	keep("b")
	_, err := drain(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t", Input: "hello"}))
	wantCode(t, err, provider.CodeSessionUnusable)
	if !provider.HasCode(err, provider.CodeBindingCallbackRepeated) {
		t.Fatalf("the cause is lost: %v", err)
	}
	if err := s.Close(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
}

func TestSessionPortsCheckedAtOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		interrupt, steer bool
	}{{"no interrupt", false, true}, {"no steer", true, false}} {
		p := newTprov()
		var cand *tsess
		p.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
			req.OnBinding("b")
			cand = newTsess(req.SessionID, "b")
			return withPorts(cand, tc.interrupt, tc.steer), nil
		}
		v := p.validated(t)
		_, err := v.Create(t.Context(), createReq("s"))
		wantCode(t, err, provider.CodeCapabilityPortMismatch)
		if got := cand.closeReasons(); !slices.Equal(got, []provider.CloseReason{provider.CloseContractRejected}) {
			t.Fatalf("%s: candidate closed with %v", tc.name, got)
		}
	}
	// Undeclared but present is refused too.
	p := newTprov()
	p.caps.Turns = provider.TurnCapabilities{}
	p.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
		req.OnBinding("b")
		return withPorts(newTsess(req.SessionID, "b"), true, false), nil
	}
	_, err := p.validated(t).Create(t.Context(), createReq("s"))
	wantCode(t, err, provider.CodeCapabilityPortMismatch)
}

func TestProviderOpeningFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("no quota")
	for _, tc := range []struct {
		name  string
		fn    createFn
		check func(t *testing.T, err error)
	}{
		{"error", func(context.Context, provider.CreateRequest) (provider.Session, error) { return nil, boom }, func(t *testing.T, err error) {
			var oe *provider.OperationError
			if !errors.As(err, &oe) || oe.Op != "create" || !errors.Is(err, boom) {
				t.Fatalf("err = %v", err)
			}
		}},
		{"panic", func(context.Context, provider.CreateRequest) (provider.Session, error) { panic("kaboom") }, func(t *testing.T, err error) {
			var pe *provider.PanicError
			if !errors.As(err, &pe) || pe.Value != "kaboom" {
				t.Fatalf("err = %v", err)
			}
		}},
		{"nil session", func(context.Context, provider.CreateRequest) (provider.Session, error) { return nil, nil }, func(t *testing.T, err error) {
			wantCode(t, err, provider.CodeInvalidSession)
		}},
		{"typed nil session", func(context.Context, provider.CreateRequest) (provider.Session, error) { return (*tsess)(nil), nil }, func(t *testing.T, err error) {
			wantCode(t, err, provider.CodeInvalidSession)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTprov()
			p.create = tc.fn
			_, err := p.validated(t).Create(t.Context(), createReq("s"))
			tc.check(t, err)
		})
	}
}

func TestRejectedCandidateCleanupIsRetryable(t *testing.T) {
	t.Parallel()
	p := newTprov()
	closeErr := errors.New("the agent process would not stop")
	var cand *tsess
	p.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
		var s provider.Session
		cand, s = p.newSession(req.SessionID, "b", nil) // and no callback
		cand.closeErr = func(n int) error {
			if n == 1 {
				return closeErr
			}
			return nil
		}
		return s, nil
	}
	v := p.validated(t)
	_, err := v.Create(t.Context(), createReq("s"))
	var ce *provider.CleanupError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v; want *CleanupError", err)
	}
	wantCode(t, err, provider.CodeBindingCallbackMissing)
	if !errors.Is(err, closeErr) {
		t.Fatalf("the close failure is lost: %v", err)
	}
	if err := ce.RetryCleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := ce.RetryCleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := cand.closes.Load(); n != 2 {
		t.Fatalf("the candidate was closed %d times; want 2 (the failure, the retry)", n)
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	p := newTprov()
	p.caps.Authentication = provider.AuthenticationSupport{Supported: true, Flows: []string{"device"}}
	status := provider.AuthPending
	a := struct {
		provider.Adapter
		provider.Resumer
		provider.Brancher
		authFn
	}{p, p, p, func(context.Context, provider.AuthRequest) (provider.AuthResult, error) {
		return provider.AuthResult{Status: status, URL: "https://example.test/device"}, nil
	}}
	v, err := provider.Validate(p.caps, a)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Authenticate(t.Context(), provider.AuthRequest{Flow: "device"})
	if err != nil || res.Status != provider.AuthPending {
		t.Fatalf("%+v, %v", res, err)
	}
	_, err = v.Authenticate(t.Context(), provider.AuthRequest{Flow: "oauth"})
	wantCode(t, err, provider.CodeInputCapabilityMismatch)
	status = "maybe"
	_, err = v.Authenticate(t.Context(), provider.AuthRequest{Flow: "device"})
	wantCode(t, err, provider.CodeInvalidOperationResult)
}

// fakeTools is a HostTools a host must not pass.
type fakeTools struct{}

func (fakeTools) Tools() []provider.HostToolSpec       { return nil }
func (fakeTools) Instructions() *provider.Instructions { return nil }
func (fakeTools) Invoke(context.Context, provider.HostInvocation) (provider.HostToolResult, error) {
	return provider.HostToolResult{}, nil
}
func (fakeTools) Release(context.Context) error { return nil }

func TestHostOnBindingPanicIsTheHosts(t *testing.T) {
	t.Parallel()
	p := newTprov()
	v := p.validated(t)
	req := createReq("s")
	req.OnBinding = func(provider.Binding) { panic("host bug") }
	defer func() {
		if r := recover(); r != "host bug" {
			t.Fatalf("recovered %v; want the host's panic re-raised", r)
		}
	}()
	v.Create(t.Context(), req)
}

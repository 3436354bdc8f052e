package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
)

func hello(turnID string) provider.TurnRequest {
	return provider.TurnRequest{TurnID: turnID, Input: "hello"}
}

func TestTurnHappyPathAndEvents(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	p := newTprov()
	v := p.validated(t, provider.WithEvents(func(e event.Event) { rec.add(string(e.Type)) }), provider.WithInstance("i1"))
	s := open(t, v, "s")
	outs, err := drain(s.RunTurn(t.Context(), hello("t1")))
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.OutputKind{provider.OutputTurnStarted, provider.OutputText, provider.OutputTurnCompleted}
	if !slices.Equal(kinds(outs), want) {
		t.Fatalf("kinds %v; want %v", kinds(outs), want)
	}
	// Turns follow one another.
	if _, err := drain(s.RunTurn(t.Context(), hello("t2"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	wantEv := []string{
		"agentry.provider.session_opened",
		"agentry.provider.turn_start", "agentry.provider.turn_end",
		"agentry.provider.turn_start", "agentry.provider.turn_end",
		"agentry.provider.session_closed",
	}
	if got := rec.types(); !slices.Equal(got, wantEv) {
		t.Fatalf("events %v; want %v", got, wantEv)
	}
}

func TestTurnInputChecks(t *testing.T) {
	t.Parallel()
	p := newTprov()
	p.caps.Limits.MaxInputBytes = 8
	v := p.validated(t)
	s := open(t, v, "s")
	defer s.Close(t.Context(), "")
	ctx := t.Context()
	for name, req := range map[string]provider.TurnRequest{
		"empty turn id": {Input: "hello"},
		"bad turn id":   {TurnID: "t\x00", Input: "hello"},
		"input too big": {TurnID: "t", Input: strings.Repeat("x", 9)},
	} {
		_, err := drain(s.RunTurn(ctx, req))
		if !provider.HasCode(err, provider.CodeInvalidInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := drain(s.RunTurn(ctx, hello("t"))); err != nil {
		t.Fatal(err)
	}
	_, err := drain(s.RunTurn(ctx, hello("t")))
	wantCode(t, err, provider.CodeInvalidInput) // turn ids are not reused
	if n := p.session(0).turns.Load(); n != 1 {
		t.Fatalf("%d turns reached the provider; want 1", n)
	}
}

func TestOneTurnAtATime(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	s := open(t, p.validated(t), "s")
	next, stop := iter.Pull2(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "hold"}))
	if o, err, _ := next(); err != nil || o.Kind != provider.OutputTurnStarted {
		t.Fatalf("first output %v, %v", o, err)
	}
	_, err := drain(s.RunTurn(ctx, hello("t2")))
	wantCode(t, err, provider.CodeConcurrentTurn)
	_, err = drain(s.Resolve(ctx, provider.Resolution{TurnID: "t1", RequestID: "r"}))
	wantCode(t, err, provider.CodeRequestResolutionMismatch)
	wantCode(t, s.Interrupt(ctx, "t2"), provider.CodeActiveTurnMismatch)
	if err := s.Interrupt(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	o, err, _ := next()
	if err != nil || o.Kind != provider.OutputTurnCompleted || o.Outcome != provider.OutcomeInterrupted {
		t.Fatalf("after interrupt: %+v, %v", o, err)
	}
	if _, _, ok := next(); ok {
		t.Fatal("the turn went on after turn.completed")
	}
	stop()
	if err := s.Err(); err != nil {
		t.Fatalf("the session is not usable after an interrupt: %v", err)
	}
	if _, err := drain(s.RunTurn(ctx, hello("t3"))); err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.Interrupt(ctx, "t3"), provider.CodeActiveTurnMismatch) // no turn is active
	s.Close(ctx, "")
}

func TestRequestsAndResolution(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rec := &recorder{}
	p := newTprov()
	s := open(t, p.validated(t, provider.WithEvents(func(e event.Event) { rec.add(string(e.Type)) })), "s")
	defer s.Close(ctx, "")

	outs, err := drain(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "ask"}))
	if err != nil {
		t.Fatal(err)
	}
	last := outs[len(outs)-1]
	if last.Kind != provider.OutputRequest || last.Request.Kind != provider.RequestApproval {
		t.Fatalf("the turn did not stop at the request: %v", kinds(outs))
	}
	reqID := last.Request.ID

	_, err = drain(s.RunTurn(ctx, hello("t2")))
	wantCode(t, err, provider.CodeRequestPending)
	wantCode(t, s.Steer(ctx, provider.SteerRequest{TurnID: "t1", Input: "x"}), provider.CodeRequestPending)
	for name, res := range map[string]provider.Resolution{
		"other request":      {TurnID: "t1", RequestID: "nope", Approve: true},
		"other turn":         {TurnID: "t9", RequestID: reqID, Approve: true},
		"approval with data": {TurnID: "t1", RequestID: reqID, Approve: true, Response: json.RawMessage(`{}`)},
	} {
		_, err := drain(s.Resolve(ctx, res))
		if !provider.HasCode(err, provider.CodeRequestResolutionMismatch) {
			t.Errorf("%s: %v", name, err)
		}
	}
	outs, err = drain(s.Resolve(ctx, provider.Resolution{TurnID: "t1", RequestID: reqID, Approve: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kinds(outs), []provider.OutputKind{provider.OutputText, provider.OutputTurnCompleted}) || outs[0].Text != "approved=true" {
		t.Fatalf("continuation %v", outs)
	}
	_, err = drain(s.Resolve(ctx, provider.Resolution{TurnID: "t1", RequestID: reqID, Approve: true}))
	wantCode(t, err, provider.CodeRequestResolutionMismatch) // nothing pending now

	// Elicitation answers are checked against the kind.
	outs, err = drain(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t3", Input: "elicit"}))
	if err != nil {
		t.Fatal(err)
	}
	eid := outs[len(outs)-1].Request.ID
	for name, res := range map[string]provider.Resolution{
		"accept without answer":  {TurnID: "t3", RequestID: eid, Approve: true},
		"accept with non-object": {TurnID: "t3", RequestID: eid, Approve: true, Response: json.RawMessage(`[1]`)},
		"decline with answer":    {TurnID: "t3", RequestID: eid, Response: json.RawMessage(`{}`)},
	} {
		_, err := drain(s.Resolve(ctx, res))
		if !provider.HasCode(err, provider.CodeRequestResolutionMismatch) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := drain(s.Resolve(ctx, provider.Resolution{TurnID: "t3", RequestID: eid, Approve: true, Response: json.RawMessage(`{"name":"x"}`)})); err != nil {
		t.Fatal(err)
	}
	if got := len(p.session(0).resolved); got != 2 {
		t.Fatalf("%d resolutions reached the provider; want 2", got)
	}

	// Interrupting a waiting turn ends it.
	outs, _ = drain(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t4", Input: "ask"}))
	if outs[len(outs)-1].Kind != provider.OutputRequest {
		t.Fatal("no request")
	}
	if err := s.Interrupt(ctx, "t4"); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(s.RunTurn(ctx, hello("t5"))); err != nil {
		t.Fatalf("a new turn after interrupting a waiting one: %v", err)
	}
	if n := strings.Count(strings.Join(rec.types(), " "), "agentry.provider.request"); n != 3 {
		t.Fatalf("%d request events; want 3", n)
	}
}

// script builds a session whose turn yields exactly outs (with ids filled
// in unless set), then ends.
func scripted(outs ...provider.Output) turnScript {
	return func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
		return func(yield func(provider.Output, error) bool) {
			for _, o := range outs {
				if o.SessionID == "" {
					o.SessionID = s.id
				}
				if o.TurnID == "" {
					o.TurnID = req.TurnID
				}
				if !yield(o, nil) {
					return
				}
			}
		}
	}
}

var (
	started   = provider.Output{Kind: provider.OutputTurnStarted}
	text      = provider.Output{Kind: provider.OutputText, Text: "x"}
	completed = provider.Output{Kind: provider.OutputTurnCompleted, Outcome: provider.OutcomeCompleted}
)

func request(id string, kind provider.RequestKind) provider.Output {
	return provider.Output{Kind: provider.OutputRequest, Request: &provider.Request{ID: id, Kind: kind}}
}

func TestOutputViolationsQuarantine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		caps   func(*provider.Capabilities)
		script turnScript
		code   provider.Code
	}{
		{"other session", nil, scripted(started, provider.Output{Kind: provider.OutputText, SessionID: "other"}), provider.CodeOutputSessionMismatch},
		{"other turn", nil, scripted(started, provider.Output{Kind: provider.OutputText, TurnID: "other"}), provider.CodeOutputTurnMismatch},
		{"undeclared approval", func(c *provider.Capabilities) { c.Requests.Approval = false }, scripted(started, request("r", provider.RequestApproval)), provider.CodeOutputCapabilityMismatch},
		{"undeclared elicitation", func(c *provider.Capabilities) { c.Requests.Elicitation = false }, scripted(started, request("r", provider.RequestElicitation)), provider.CodeOutputCapabilityMismatch},
		{"unknown request kind", nil, scripted(started, request("r", "vote")), provider.CodeOutputCapabilityMismatch},
		{"unknown output kind", nil, scripted(started, provider.Output{Kind: "thought"}), provider.CodeOutputCapabilityMismatch},
		{"not started first", nil, scripted(text, completed), provider.CodeInvalidTurnSequence},
		{"started twice", nil, scripted(started, started, completed), provider.CodeInvalidTurnSequence},
		{"after completed", nil, scripted(started, completed, text), provider.CodeInvalidTurnSequence},
		{"after request", nil, scripted(started, request("r", provider.RequestApproval), text), provider.CodeInvalidTurnSequence},
		{"two requests", nil, scripted(started, request("r1", provider.RequestApproval), request("r2", provider.RequestApproval)), provider.CodeInvalidTurnSequence},
		{"no boundary", nil, scripted(started, text), provider.CodeInvalidTurnSequence},
		{"nothing at all", nil, scripted(), provider.CodeInvalidTurnSequence},
		{"nil sequence", nil, func(context.Context, *tsess, provider.TurnRequest) iter.Seq2[provider.Output, error] { return nil }, provider.CodeInvalidTurnSequence},
		{"request without request", nil, scripted(started, provider.Output{Kind: provider.OutputRequest}), provider.CodeInvalidOperationResult},
		{"malformed request id", nil, scripted(started, request(" r", provider.RequestApproval)), provider.CodeInvalidOperationResult},
		{"unknown outcome", nil, scripted(started, provider.Output{Kind: provider.OutputTurnCompleted, Outcome: "meh"}), provider.CodeInvalidOperationResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			rec := &recorder{}
			p := newTprov()
			if tc.caps != nil {
				tc.caps(&p.caps)
			}
			p.setup = func(s *tsess) { s.turn = tc.script }
			s := open(t, p.validated(t, provider.WithEvents(func(e event.Event) { rec.add(string(e.Type)) })), "s")
			_, err := drain(s.RunTurn(ctx, hello("t1")))
			wantCode(t, err, tc.code)
			// Quarantined: only Close is left.
			_, err = drain(s.RunTurn(ctx, hello("t2")))
			wantCode(t, err, provider.CodeSessionUnusable)
			if !provider.HasCode(err, tc.code) {
				t.Fatalf("the quarantine lost its cause: %v", err)
			}
			wantCode(t, s.Err(), provider.CodeSessionUnusable)
			wantCode(t, s.Interrupt(ctx, "t1"), provider.CodeSessionUnusable)
			if n := p.session(0).turns.Load(); n != 1 {
				t.Fatalf("%d turns reached the provider; want 1", n)
			}
			if err := s.Close(ctx, ""); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(rec.types(), "agentry.provider.quarantined") {
				t.Fatalf("no quarantined event: %v", rec.types())
			}
		})
	}
}

func TestRequestIDsAreNeverReused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	p.setup = func(s *tsess) { s.turn = scripted(started, request("same", provider.RequestApproval)) }
	s := open(t, p.validated(t), "s")
	defer s.Close(ctx, "")
	if _, err := drain(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "x"})); err != nil {
		t.Fatal(err)
	}
	if err := s.Interrupt(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	_, err := drain(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t2", Input: "x"}))
	wantCode(t, err, provider.CodeInvalidTurnSequence)
}

func TestContinuationMustNotRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	p.setup = func(s *tsess) {
		s.resolve = func(ctx context.Context, s *tsess, res provider.Resolution) iter.Seq2[provider.Output, error] {
			return scripted(started, completed)(ctx, s, provider.TurnRequest{TurnID: res.TurnID})
		}
	}
	s := open(t, p.validated(t), "s")
	defer s.Close(ctx, "")
	outs, _ := drain(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "ask"}))
	_, err := drain(s.Resolve(ctx, provider.Resolution{TurnID: "t1", RequestID: outs[len(outs)-1].Request.ID, Approve: true}))
	wantCode(t, err, provider.CodeInvalidTurnSequence)
}

func TestAbandonedTurnQuarantines(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	s := open(t, p.validated(t), "s")
	for range s.RunTurn(ctx, hello("t1")) {
		break // the host walks away after turn.started
	}
	_, err := drain(s.RunTurn(ctx, hello("t2")))
	wantCode(t, err, provider.CodeSessionUnusable)
	if err := s.Close(ctx, ""); err != nil {
		t.Fatal(err)
	}
}

func TestProviderTurnFailures(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	boom := errors.New("model overloaded")

	// Before anything happened, a failure that says so leaves the session
	// usable and the turn id free.
	p := newTprov()
	fail := true
	p.setup = func(s *tsess) {
		s.turn = func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
			if fail {
				return func(yield func(provider.Output, error) bool) {
					yield(provider.Output{}, errors.Join(provider.ErrNotStarted, boom))
				}
			}
			return s.defaultTurn(ctx, req)
		}
	}
	s := open(t, p.validated(t), "s")
	_, err := drain(s.RunTurn(ctx, hello("t1")))
	var oe *provider.OperationError
	if !errors.As(err, &oe) || oe.Started || !errors.Is(err, boom) {
		t.Fatalf("err = %v; want a not-started OperationError", err)
	}
	fail = false
	if _, err := drain(s.RunTurn(ctx, hello("t1"))); err != nil {
		t.Fatalf("retrying the turn: %v", err)
	}
	s.Close(ctx, "")

	// Mid-turn, any failure makes the session unusable.
	for name, script := range map[string]turnScript{
		"error": func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
			return func(yield func(provider.Output, error) bool) {
				if yield(provider.Output{Kind: provider.OutputTurnStarted, SessionID: s.id, TurnID: req.TurnID}, nil) {
					yield(provider.Output{}, boom)
				}
			}
		},
		"not-started after output": func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
			return func(yield func(provider.Output, error) bool) {
				if yield(provider.Output{Kind: provider.OutputTurnStarted, SessionID: s.id, TurnID: req.TurnID}, nil) {
					yield(provider.Output{}, provider.ErrNotStarted)
				}
			}
		},
		"panic": func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
			return func(yield func(provider.Output, error) bool) { panic("turn exploded") }
		},
		"panic opening": func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
			panic("no iterator for you")
		},
	} {
		p := newTprov()
		p.setup = func(s *tsess) { s.turn = script }
		s := open(t, p.validated(t), "s")
		_, err := drain(s.RunTurn(ctx, hello("t1")))
		var oe *provider.OperationError
		if !errors.As(err, &oe) || !oe.Started {
			t.Errorf("%s: err = %v; want a started OperationError", name, err)
		}
		_, err = drain(s.RunTurn(ctx, hello("t2")))
		if !provider.HasCode(err, provider.CodeSessionUnusable) {
			t.Errorf("%s: after the failure: %v", name, err)
		}
		s.Close(ctx, "")
	}
}

func TestProviderThatIgnoresStopIsContained(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	p.setup = func(s *tsess) {
		s.turn = func(ctx context.Context, s *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
			return func(yield func(provider.Output, error) bool) {
				yield(provider.Output{Kind: provider.OutputTurnStarted, SessionID: "wrong", TurnID: req.TurnID}, nil)
				yield(provider.Output{Kind: provider.OutputText, SessionID: s.id, TurnID: req.TurnID}, nil) // told to stop
			}
		}
	}
	s := open(t, p.validated(t), "s")
	_, err := drain(s.RunTurn(ctx, hello("t1")))
	wantCode(t, err, provider.CodeOutputSessionMismatch)
	s.Close(ctx, "")
}

func TestHostPanicIsNotSwallowed(t *testing.T) {
	t.Parallel()
	p := newTprov()
	s := open(t, p.validated(t), "s")
	defer s.Close(t.Context(), "")
	defer func() {
		if r := recover(); r != "host bug" {
			t.Fatalf("recovered %v; want the host's own panic", r)
		}
	}()
	for range s.RunTurn(t.Context(), hello("t1")) {
		panic("host bug")
	}
}

func TestSteer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	p.caps.Limits.MaxInputBytes = 16
	s := open(t, p.validated(t), "s")
	defer s.Close(ctx, "")
	wantCode(t, s.Steer(ctx, provider.SteerRequest{TurnID: "t1", Input: "x"}), provider.CodeActiveTurnMismatch)
	next, stop := iter.Pull2(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "steer"}))
	defer stop()
	if o, err, _ := next(); err != nil || o.Kind != provider.OutputTurnStarted {
		t.Fatal(o, err)
	}
	wantCode(t, s.Steer(ctx, provider.SteerRequest{TurnID: "t2", Input: "x"}), provider.CodeActiveTurnMismatch)
	wantCode(t, s.Steer(ctx, provider.SteerRequest{TurnID: "t1", Input: strings.Repeat("x", 17)}), provider.CodeInvalidInput)
	if err := s.Steer(ctx, provider.SteerRequest{TurnID: "t1", Input: "left"}); err != nil {
		t.Fatal(err)
	}
	o, err, _ := next()
	if err != nil || o.Text != "steered: left" {
		t.Fatalf("%+v, %v", o, err)
	}
	if o, err, _ := next(); err != nil || o.Kind != provider.OutputTurnCompleted {
		t.Fatal(o, err)
	}
}

func TestDelegatedFailuresQuarantine(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	boom := errors.New("lost the agent")
	for _, tc := range []struct {
		name    string
		err     error
		started bool
	}{{"failure", boom, true}, {"not started", provider.ErrNotStarted, false}} {
		p := newTprov()
		p.setup = func(s *tsess) {
			s.intErr = func() error { return tc.err }
			s.steerErr = func() error { return tc.err }
		}
		// Interrupt.
		s := open(t, p.validated(t), "s")
		outs, _ := drain(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "ask"}))
		err := s.Interrupt(ctx, "t1")
		var oe *provider.OperationError
		if !errors.As(err, &oe) || oe.Started != tc.started {
			t.Fatalf("%s: interrupt: %v", tc.name, err)
		}
		if tc.started {
			wantCode(t, s.Err(), provider.CodeSessionUnusable)
		} else {
			// Still waiting on the same request.
			if _, err := drain(s.Resolve(ctx, provider.Resolution{TurnID: "t1", RequestID: outs[len(outs)-1].Request.ID, Approve: true})); err != nil {
				t.Fatalf("%s: resolve after a not-started interrupt: %v", tc.name, err)
			}
		}
		s.Close(ctx, "")

		// Steer.
		s = open(t, p.validated(t), "s2")
		next, stop := iter.Pull2(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "hold"}))
		next()
		err = s.Steer(ctx, provider.SteerRequest{TurnID: "t1", Input: "x"})
		if !errors.As(err, &oe) || oe.Started != tc.started {
			t.Fatalf("%s: steer: %v", tc.name, err)
		}
		if (s.Err() != nil) != tc.started {
			t.Fatalf("%s: after steer, Err = %v", tc.name, s.Err())
		}
		stop()
		s.Close(ctx, "")
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	s := open(t, p.validated(t), "s")
	if err := s.Close(ctx, provider.CloseShutdown); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got := p.session(0).closeReasons(); !slices.Equal(got, []provider.CloseReason{provider.CloseShutdown}) {
		t.Fatalf("the provider was closed %v", got)
	}
	_, err := drain(s.RunTurn(ctx, hello("t")))
	wantCode(t, err, provider.CodeSessionClosed)
	_, err = drain(s.Resolve(ctx, provider.Resolution{TurnID: "t", RequestID: "r"}))
	wantCode(t, err, provider.CodeSessionClosed)
	wantCode(t, s.Interrupt(ctx, "t"), provider.CodeSessionClosed)
	wantCode(t, s.Steer(ctx, provider.SteerRequest{TurnID: "t"}), provider.CodeSessionClosed)
	wantCode(t, s.Err(), provider.CodeSessionClosed)
}

func TestFailedCloseQuarantinesAndRetries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	boom := errors.New("the process is wedged")
	p := newTprov()
	p.setup = func(s *tsess) {
		s.closeErr = func(n int) error {
			if n < 3 {
				return boom
			}
			return nil
		}
	}
	rec := &recorder{}
	s := open(t, p.validated(t, provider.WithEvents(func(e event.Event) { rec.add(string(e.Type)) })), "s")
	err := s.Close(ctx, "")
	if !slices.Contains(rec.types(), string(provider.TypeCleanupFailed)) {
		t.Fatalf("no cleanup_failed event: %v", rec.types())
	}
	var ce *provider.CleanupError
	if !errors.As(err, &ce) || !errors.Is(err, boom) {
		t.Fatalf("err = %v; want a *CleanupError wrapping the failure", err)
	}
	var hb *provider.HostBindingCleanupError
	if errors.As(err, &hb) {
		t.Fatal("a provider close failure is not a host-binding failure")
	}
	_, err = drain(s.RunTurn(ctx, hello("t")))
	wantCode(t, err, provider.CodeSessionUnusable)
	if err := s.Close(ctx, ""); !errors.Is(err, boom) { // a second attempt, still failing
		t.Fatalf("second close: %v", err)
	}
	if err := ce.RetryCleanup(ctx); err != nil { // the third succeeds
		t.Fatal(err)
	}
	if err := ce.RetryCleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if n := p.session(0).closes.Load(); n != 3 {
		t.Fatalf("the provider was closed %d times; want 3", n)
	}
	wantCode(t, s.Err(), provider.CodeSessionClosed)
}

func TestConcurrentClosesShareOneAttempt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	gate := make(chan struct{})
	entered := make(chan struct{})
	p := newTprov()
	p.setup = func(s *tsess) {
		s.closeErr = func(n int) error {
			close(entered)
			<-gate
			return nil
		}
	}
	s := open(t, p.validated(t), "s")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	wg.Go(func() { errs[0] = s.Close(ctx, "") })
	<-entered
	for i := 1; i < len(errs); i++ {
		wg.Go(func() { errs[i] = s.Close(ctx, "") })
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	if n := p.session(0).closes.Load(); n != 1 {
		t.Fatalf("the provider was closed %d times; want 1", n)
	}
}

func TestCloseDuringTurn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := newTprov()
	s := open(t, p.validated(t), "s")
	next, stop := iter.Pull2(s.RunTurn(ctx, provider.TurnRequest{TurnID: "t1", Input: "hold"}))
	defer stop()
	next()
	// The provider's hold ends when interrupted; Close first, then let it
	// produce its last output.
	if err := s.Close(ctx, ""); err != nil {
		t.Fatal(err)
	}
	p.session(0).interrupts <- "t1"
	_, err, _ := next()
	wantCode(t, err, provider.CodeSessionClosed)
}

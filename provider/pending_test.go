package provider_test

import (
	"context"
	"iter"
	"slices"
	"testing"

	"github.com/agentry-dev/agentry/provider"
)

// penderPort reports a waiting turn for a resumed session.
type penderPort struct {
	turnID string
	req    provider.Request
	ok     bool
}

func (p penderPort) Pending() (string, provider.Request, bool) { return p.turnID, p.req, p.ok }

// pendingProv is a provider that declares resume pending; its resumed
// sessions report p.
func pendingProv(p penderPort) *tprov {
	tp := newTprov()
	tp.caps.Sessions.ResumePending = true
	tp.caps.Turns.Steer = false
	wrap := func(s *tsess) provider.Session {
		return struct {
			*tsess
			interruptPort
			penderPort
		}{s, interruptPort{s}, p}
	}
	tp.create = func(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
		b := provider.Binding("native-created")
		req.OnBinding(b)
		s, _ := tp.newSession(req.SessionID, b, req.HostTools)
		return wrap(s), nil
	}
	tp.resume = func(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
		s, _ := tp.newSession(req.SessionID, req.Binding, req.HostTools)
		return wrap(s), nil
	}
	return tp
}

func resumeReq(id string) provider.ResumeRequest {
	return provider.ResumeRequest{SessionID: id, WorkingDirectory: workDir, Binding: "native-stored"}
}

var askedBefore = penderPort{turnID: "t7", ok: true,
	req: provider.Request{ID: "req-t7", Kind: provider.RequestApproval, Prompt: "may I deploy?", Tool: "deploy"}}

// A resumed session whose turn was waiting comes back waiting on that
// request: new turns are refused, Resolve continues the turn, and the
// request's id stays used.
func TestResumeComesBackWaiting(t *testing.T) {
	t.Parallel()
	tp := pendingProv(askedBefore)
	v := tp.validated(t)
	s, err := v.Resume(t.Context(), resumeReq("s1"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context(), "")
	turnID, req, ok := s.Pending()
	if !ok || turnID != "t7" || req.ID != "req-t7" || req.Kind != provider.RequestApproval || req.Tool != "deploy" {
		t.Fatalf("pending after resume: %q %+v %v", turnID, req, ok)
	}
	_, err = drain(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t8", Input: "hi"}))
	wantCode(t, err, provider.CodeRequestPending)
	outs, err := drain(s.Resolve(t.Context(), provider.Resolution{TurnID: "t7", RequestID: "req-t7", Approve: true}))
	if err != nil || !slices.Equal(kinds(outs), []provider.OutputKind{provider.OutputText, provider.OutputTurnCompleted}) {
		t.Fatalf("resolving the restored request: %v %v", kinds(outs), err)
	}
	if _, _, ok := s.Pending(); ok {
		t.Fatal("still pending after the resolution")
	}
	// The turn id and the request id were used before the resume.
	_, err = drain(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t7", Input: "hi"}))
	wantCode(t, err, provider.CodeInvalidInput)
	tp.session(0).turn = func(ctx context.Context, ts *tsess, req provider.TurnRequest) iter.Seq2[provider.Output, error] {
		return func(yield func(provider.Output, error) bool) {
			if !yield(ts.out(provider.OutputTurnStarted, req.TurnID), nil) {
				return
			}
			o := ts.out(provider.OutputRequest, req.TurnID)
			o.Request = &provider.Request{ID: "req-t7", Kind: provider.RequestApproval}
			yield(o, nil)
		}
	}
	_, err = drain(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t9", Input: "ask"}))
	wantCode(t, err, provider.CodeInvalidTurnSequence)
}

// The restored waiting turn can be interrupted like any waiting turn.
func TestResumedWaitingTurnInterrupts(t *testing.T) {
	t.Parallel()
	v := pendingProv(askedBefore).validated(t)
	s, err := v.Resume(t.Context(), resumeReq("s1"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context(), "")
	if err := s.Interrupt(t.Context(), "t7"); err != nil {
		t.Fatal(err)
	}
	outs, err := drain(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: "t8", Input: "hi"}))
	if err != nil || outs[len(outs)-1].Kind != provider.OutputTurnCompleted {
		t.Fatalf("a turn after interrupting the restored one: %v %v", kinds(outs), err)
	}
}

// Only a resume consults the port, and nothing pending is nothing.
func TestPendingIsConsultedOnResumeOnly(t *testing.T) {
	t.Parallel()
	v := pendingProv(askedBefore).validated(t)
	c := open(t, v, "s1")
	defer c.Close(t.Context(), "")
	if _, _, ok := c.Pending(); ok {
		t.Fatal("a created session is waiting")
	}
	r, err := pendingProv(penderPort{}).validated(t).Resume(t.Context(), resumeReq("s2"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(t.Context(), "")
	if _, _, ok := r.Pending(); ok || r.Err() != nil {
		t.Fatalf("a resume with nothing pending: %v", r.Err())
	}
}

// A pending request the provider reports is checked like one a turn
// raised; a bad one rejects the resumed session, which is closed.
func TestBadPendingRejectsTheResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    penderPort
		code provider.Code
	}{
		{"bad turn id", penderPort{turnID: " t", ok: true, req: askedBefore.req}, provider.CodeInvalidOperationResult},
		{"bad request id", penderPort{turnID: "t", ok: true, req: provider.Request{ID: "", Kind: provider.RequestApproval}}, provider.CodeInvalidOperationResult},
		{"unknown kind", penderPort{turnID: "t", ok: true, req: provider.Request{ID: "r", Kind: "vote"}}, provider.CodeOutputCapabilityMismatch},
		{"undeclared kind", penderPort{turnID: "t", ok: true, req: provider.Request{ID: "r", Kind: provider.RequestElicitation}}, provider.CodeOutputCapabilityMismatch},
		{"bad schema", penderPort{turnID: "t", ok: true, req: provider.Request{ID: "r", Kind: provider.RequestApproval, Schema: []byte(`[1]`)}}, provider.CodeInvalidOperationResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp := pendingProv(tc.p)
			tp.caps.Requests.Elicitation = false
			_, err := tp.validated(t).Resume(t.Context(), resumeReq("s1"))
			wantCode(t, err, tc.code)
			if r := tp.session(0).closeReasons(); !slices.Equal(r, []provider.CloseReason{provider.CloseContractRejected}) {
				t.Fatalf("the rejected session was closed %v", r)
			}
		})
	}
}

// The port is the declaration's: declared and absent, or present and
// undeclared, is a mismatch at opening.
func TestPenderPortMatchesTheDeclaration(t *testing.T) {
	t.Parallel()
	tp := newTprov()
	tp.caps.Sessions.ResumePending = true
	_, err := tp.validated(t).Create(t.Context(), createReq("s1"))
	wantCode(t, err, provider.CodeCapabilityPortMismatch)

	tp = pendingProv(askedBefore)
	tp.caps.Sessions.ResumePending = false
	_, err = tp.validated(t).Create(t.Context(), createReq("s2"))
	wantCode(t, err, provider.CodeCapabilityPortMismatch)

	caps := fullCaps()
	caps.Sessions.Resume, caps.Sessions.ResumePending = false, true
	_, err = provider.CheckCapabilities(caps)
	wantCode(t, err, provider.CodeInvalidCapabilities)
}

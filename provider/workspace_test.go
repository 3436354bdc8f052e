package provider_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentry-dev/agentry/provider"
)

// wsPort is a Workspacer answering dir (or err, or a panic).
type wsPort struct {
	dir   string
	err   error
	panic bool
}

func (p wsPort) Workspace(context.Context) (string, error) {
	if p.panic {
		panic("boom")
	}
	return p.dir, p.err
}

func workspaceProvider(t *testing.T, port *wsPort) (*provider.Validated, *tsess) {
	t.Helper()
	caps := fullCaps()
	caps.Turns = provider.TurnCapabilities{}
	caps.Sessions = provider.SessionCapabilities{}
	var made *tsess
	create := createFn(func(_ context.Context, req provider.CreateRequest) (provider.Session, error) {
		req.OnBinding("b-" + provider.Binding(req.SessionID))
		made = newTsess(req.SessionID, "b-"+provider.Binding(req.SessionID))
		if port == nil {
			return made, nil
		}
		return struct {
			*tsess
			wsPort
		}{made, *port}, nil
	})
	v, err := provider.Validate(caps, create)
	if err != nil {
		t.Fatal(err)
	}
	return v, made
}

func TestWorkspaceThroughTheContract(t *testing.T) {
	t.Parallel()
	v, _ := workspaceProvider(t, &wsPort{dir: "/srv/ws/s1"})
	s := open(t, v, "s1")
	if !s.HasWorkspace() {
		t.Fatal("HasWorkspace = false for a Workspacer")
	}
	dir, err := s.Workspace(t.Context())
	if err != nil || dir != "/srv/ws/s1" {
		t.Fatalf("Workspace = %q, %v", dir, err)
	}
	// Turns still run after it.
	if _, err := drain(s.RunTurn(t.Context(), hello("t1"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	_, err = s.Workspace(t.Context())
	wantCode(t, err, provider.CodeSessionClosed)
}

func TestWorkspaceRefusals(t *testing.T) {
	t.Parallel()
	v, _ := workspaceProvider(t, nil)
	s := open(t, v, "s1")
	if s.HasWorkspace() {
		t.Fatal("HasWorkspace = true without the port")
	}
	_, err := s.Workspace(t.Context())
	wantCode(t, err, provider.CodeWorkspaceUnsupported)

	for _, p := range []wsPort{{dir: "relative/dir"}, {dir: "/srv/../etc"}, {dir: ""}} {
		v, _ := workspaceProvider(t, &p)
		_, err := open(t, v, "s2").Workspace(t.Context())
		wantCode(t, err, provider.CodeInvalidOperationResult)
	}

	boom := errors.New("boom")
	v, _ = workspaceProvider(t, &wsPort{err: boom})
	s = open(t, v, "s3")
	_, err = s.Workspace(t.Context())
	var oe *provider.OperationError
	if !errors.As(err, &oe) || !errors.Is(err, boom) {
		t.Fatalf("failure = %v, want an OperationError carrying it", err)
	}
	if s.Err() != nil {
		t.Fatalf("a failed workspace made the session unusable: %v", s.Err())
	}

	v, _ = workspaceProvider(t, &wsPort{panic: true})
	if _, err := open(t, v, "s4").Workspace(t.Context()); !errors.As(err, &oe) {
		t.Fatalf("panic = %v, want an OperationError", err)
	}
}

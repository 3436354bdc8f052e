package provider

import (
	"context"
	"errors"
	"path/filepath"
)

// ErrNoWorkspace is for providers: a Workspace error that wraps it says
// this session keeps no files after all (an agent without a tool that
// keeps them); the wrapper answers workspace_unsupported.
var ErrNoWorkspace = errors.New("provider: the session keeps no workspace")

// HasWorkspace reports whether the session keeps files the host can move
// in and out ([Workspacer]).
func (s *ValidatedSession) HasWorkspace() bool {
	_, ok := s.inner.(Workspacer)
	return ok
}

// Workspace returns the directory holding the session's files, through
// the provider's [Workspacer]. It is refused with workspace_unsupported
// when the provider keeps none, with session_closed or session_unusable
// when the session cannot be used, and with concurrent_turn while a turn's
// outputs are being pulled (a paused turn's session may be asked). The
// provider must answer an absolute, clean path; a failure leaves the
// session usable (moving files is not a turn).
func (s *ValidatedSession) Workspace(ctx context.Context) (string, error) {
	key := s.v.caps.ProviderKey
	ws, ok := s.inner.(Workspacer)
	if !ok {
		return "", violation(key, CodeWorkspaceUnsupported, "the provider's sessions keep no workspace")
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return "", err
	}
	if s.phase == running {
		s.mu.Unlock()
		return "", violation(key, CodeConcurrentTurn, "a turn is running; its workspace is the agent's until it ends")
	}
	s.busy++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy--
		s.mu.Unlock()
	}()
	var dir string
	err := safely("the provider's workspace", func() error {
		var err error
		dir, err = ws.Workspace(ctx)
		return err
	})
	if errors.Is(err, ErrNoWorkspace) {
		return "", &ContractError{Provider: key, Code: CodeWorkspaceUnsupported, Message: "the provider's session keeps no workspace", Err: err}
	}
	if err != nil {
		var pe *PanicError
		return "", &OperationError{Provider: key, Op: "workspace", Started: errors.As(err, &pe), Err: err}
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return "", violation(key, CodeInvalidOperationResult, "the provider's workspace is not an absolute, clean path")
	}
	return dir, nil
}

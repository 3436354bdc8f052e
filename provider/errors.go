package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Code is the stable name of a contract violation or refusal. Codes never
// change meaning; match them with [CodeOf] or errors.Is against a
// *ContractError carrying only the code.
type Code string

// The codes. Each names what failed; ContractError.Error adds the fix.
const (
	// Declarations and inputs.
	CodeInvalidCapabilities    Code = "invalid_capabilities"
	CodeInvalidAdapter         Code = "invalid_adapter"
	CodeCapabilityPortMismatch Code = "capability_port_mismatch"
	CodeInvalidInput           Code = "invalid_input"

	// Session opening.
	CodeInvalidSession          Code = "invalid_session"
	CodeInvalidBinding          Code = "invalid_binding"
	CodeBindingCallbackMissing  Code = "binding_callback_missing"
	CodeBindingCallbackRepeated Code = "binding_callback_repeated"
	CodeBindingCallbackMismatch Code = "binding_callback_mismatch"
	CodeResumeBindingMismatch   Code = "resume_binding_mismatch"
	CodeBranchBindingReused     Code = "branch_binding_reused"

	// Session use.
	CodeSessionClosed             Code = "session_closed"
	CodeSessionUnusable           Code = "session_unusable"
	CodeConcurrentTurn            Code = "concurrent_turn"
	CodeRequestPending            Code = "request_pending"
	CodeActiveTurnMismatch        Code = "active_turn_mismatch"
	CodeOutputSessionMismatch     Code = "output_session_mismatch"
	CodeOutputTurnMismatch        Code = "output_turn_mismatch"
	CodeOutputCapabilityMismatch  Code = "output_capability_mismatch"
	CodeInputCapabilityMismatch   Code = "input_capability_mismatch"
	CodeInvalidTurnSequence       Code = "invalid_turn_sequence"
	CodeRequestResolutionMismatch Code = "request_resolution_mismatch"
	CodeInvalidOperationResult    Code = "invalid_operation_result"

	// Host bindings.
	CodeInvalidHostBinding        Code = "invalid_host_binding"
	CodeHostBindingUnsupported    Code = "host_binding_unsupported"
	CodeHostBindingReused         Code = "host_binding_reused"
	CodeHostBindingClosed         Code = "host_binding_closed"
	CodeHostToolNameConflict      Code = "host_tool_name_conflict"
	CodeHostToolInputInvalid      Code = "host_tool_input_invalid"
	CodeHostToolResultInvalid     Code = "host_tool_result_invalid"
	CodeHostToolCapacityExhausted Code = "host_tool_capacity_exhausted"
	// CodeHostToolFailed is never returned as an error: it is the code of
	// the error result a provider receives when a host tool failed or
	// panicked (HostToolResult.Error.Code).
	CodeHostToolFailed Code = "host_tool_failed"

	// Session interactions.
	CodeInvalidSessionInteraction      Code = "invalid_session_interaction"
	CodeSessionInteractionsUnsupported Code = "session_interactions_unsupported"

	// Workspaces.
	CodeWorkspaceUnsupported Code = "workspace_unsupported"

	// Registry.
	CodeInvalidDriver                Code = "invalid_driver"
	CodeDuplicateProvider            Code = "duplicate_provider"
	CodeDuplicateInstance            Code = "duplicate_instance"
	CodeProviderNotRegistered        Code = "provider_not_registered"
	CodeMultipleInstancesUnsupported Code = "multiple_instances_unsupported"
	CodeInstanceNotFound             Code = "instance_not_found"
	CodeInstanceDisposed             Code = "instance_disposed"
	CodeRegistryDisposed             Code = "registry_disposed"
	CodeInstanceCleanupFailed        Code = "instance_cleanup_failed"
)

// fixes holds the one-line fix each code's message ends with.
var fixes = map[Code]string{
	CodeInvalidCapabilities:            "correct the capability declaration",
	CodeInvalidAdapter:                 "pass a non-nil adapter",
	CodeCapabilityPortMismatch:         "implement exactly the ports the capabilities declare",
	CodeInvalidInput:                   "correct the input named above",
	CodeInvalidSession:                 "return a session, or an error",
	CodeInvalidBinding:                 "use a binding of 1 to 256 characters with no control characters and no surrounding space",
	CodeBindingCallbackMissing:         "report the native conversation identity through OnBinding before returning",
	CodeBindingCallbackRepeated:        "call OnBinding exactly once",
	CodeBindingCallbackMismatch:        "return a session whose Binding is the one reported through OnBinding",
	CodeResumeBindingMismatch:          "a resumed session must keep the binding it was resumed with",
	CodeBranchBindingReused:            "give the branch a new native identity",
	CodeSessionClosed:                  "open a new session",
	CodeSessionUnusable:                "close the session and open a new one",
	CodeConcurrentTurn:                 "wait for the active turn to finish, or interrupt it",
	CodeRequestPending:                 "resolve the pending request, or interrupt the turn",
	CodeActiveTurnMismatch:             "name the session's active turn",
	CodeOutputSessionMismatch:          "stamp every output with the session's id",
	CodeOutputTurnMismatch:             "stamp every output with the active turn's id",
	CodeOutputCapabilityMismatch:       "emit only outputs the capabilities declare",
	CodeInputCapabilityMismatch:        "use only operations the capabilities declare",
	CodeInvalidTurnSequence:            "start with turn.started and end at turn.completed or exactly one open request",
	CodeRequestResolutionMismatch:      "resolve the pending request of the active turn, with an answer of its kind",
	CodeInvalidOperationResult:         "return a result of the documented shape",
	CodeInvalidHostBinding:             "correct the host binding",
	CodeHostBindingUnsupported:         "open the session without the binding, or use a provider that supports it",
	CodeHostBindingReused:              "build a new host binding for every session opening",
	CodeHostBindingClosed:              "stop using the binding once its session is closing",
	CodeHostToolNameConflict:           "give every host tool a distinct name",
	CodeHostToolInputInvalid:           "call a listed tool with arguments its schema accepts and an id not already in flight",
	CodeHostToolResultInvalid:          "return exactly one of output or error, at most 32 KiB of JSON",
	CodeHostToolCapacityExhausted:      "wait for an invocation to finish; at most 16 run at once",
	CodeHostToolFailed:                 "see the host's logs",
	CodeInvalidSessionInteraction:      "send a well-formed interaction with a new id while the session is open, and answer a question with one of its options",
	CodeSessionInteractionsUnsupported: "use only the interaction kinds the capabilities declare",
	CodeWorkspaceUnsupported:           "use a provider whose sessions keep files (its Session implements Workspacer)",
	CodeInvalidDriver:                  "register a driver with a valid provider key whose materialisation declares matching capabilities",
	CodeDuplicateProvider:              "register one driver per provider key",
	CodeDuplicateInstance:              "give every instance a distinct id",
	CodeProviderNotRegistered:          "register a driver for the provider key",
	CodeMultipleInstancesUnsupported:   "define at most one instance of this provider",
	CodeInstanceNotFound:               "look up an id the registry defines",
	CodeInstanceDisposed:               "the instance is gone; open a new registry",
	CodeRegistryDisposed:               "the registry is gone; open a new one",
	CodeInstanceCleanupFailed:          "call Dispose again to retry the listed instances",
}

// Codes lists every code, in a stable order.
func Codes() []Code {
	return []Code{
		CodeInvalidCapabilities, CodeInvalidAdapter, CodeCapabilityPortMismatch, CodeInvalidInput,
		CodeInvalidSession, CodeInvalidBinding, CodeBindingCallbackMissing, CodeBindingCallbackRepeated,
		CodeBindingCallbackMismatch, CodeResumeBindingMismatch, CodeBranchBindingReused,
		CodeSessionClosed, CodeSessionUnusable, CodeConcurrentTurn, CodeRequestPending, CodeActiveTurnMismatch,
		CodeOutputSessionMismatch, CodeOutputTurnMismatch, CodeOutputCapabilityMismatch, CodeInputCapabilityMismatch,
		CodeInvalidTurnSequence, CodeRequestResolutionMismatch, CodeInvalidOperationResult,
		CodeInvalidHostBinding, CodeHostBindingUnsupported, CodeHostBindingReused, CodeHostBindingClosed,
		CodeHostToolNameConflict, CodeHostToolInputInvalid, CodeHostToolResultInvalid,
		CodeHostToolCapacityExhausted, CodeHostToolFailed,
		CodeInvalidSessionInteraction, CodeSessionInteractionsUnsupported, CodeWorkspaceUnsupported,
		CodeInvalidDriver, CodeDuplicateProvider, CodeDuplicateInstance, CodeProviderNotRegistered,
		CodeMultipleInstancesUnsupported, CodeInstanceNotFound, CodeInstanceDisposed, CodeRegistryDisposed,
		CodeInstanceCleanupFailed,
	}
}

// ContractError is a refusal or a violation of the provider contract,
// named by a stable Code. It never carries an isolation key or a user's
// data; values that failed a check are described, not quoted.
type ContractError struct {
	// Provider is the provider key, or "" when none is known yet.
	Provider string
	Code     Code
	// Message says what failed.
	Message string
	// Instances lists instance ids, for registry codes that concern some.
	Instances []string
	// Err is the underlying cause, if any.
	Err error
}

func (e *ContractError) Error() string {
	var b strings.Builder
	if e.Provider != "" {
		b.WriteString("provider " + e.Provider + ": ")
	} else {
		b.WriteString("provider: ")
	}
	b.WriteString(string(e.Code))
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if len(e.Instances) > 0 {
		fmt.Fprintf(&b, " (instances %s)", strings.Join(e.Instances, ", "))
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	if fix := fixes[e.Code]; fix != "" {
		b.WriteString("; " + fix)
	}
	return b.String()
}

func (e *ContractError) Unwrap() error { return e.Err }

// Is matches a target *ContractError by code (and by provider when the
// target names one), so errors.Is(err, &ContractError{Code: c}) works.
func (e *ContractError) Is(target error) bool {
	t, ok := target.(*ContractError)
	if !ok || t.Code != e.Code {
		return false
	}
	return t.Provider == "" || t.Provider == e.Provider
}

// CodeOf returns the code of the first *ContractError in err's tree, or "".
func CodeOf(err error) Code {
	var ce *ContractError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return ""
}

// HasCode reports whether any *ContractError in err's tree has code c.
func HasCode(err error, c Code) bool {
	return errors.Is(err, &ContractError{Code: c})
}

func violation(provider string, code Code, format string, args ...any) *ContractError {
	return &ContractError{Provider: provider, Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrNotStarted is for providers: an operation error that wraps it says
// the provider did nothing, so the session stays usable. Any other error
// from a turn, a resolution, an interrupt or a steer is taken to have
// happened after the provider started executing, and makes the session
// unusable.
var ErrNotStarted = errors.New("provider: the operation did not start")

// OperationError is a provider's own failure of a delegated operation
// (create, resume, branch, turn, resolve, interrupt, steer, authenticate,
// close), or a panic the wrapper recovered from one.
type OperationError struct {
	Provider string
	// Op names the operation.
	Op string
	// Started is true when the provider had started executing; the
	// session (if any) is then unusable.
	Started bool
	Err     error
}

func (e *OperationError) Error() string {
	msg := fmt.Sprintf("provider %s: %s failed: %v", e.Provider, e.Op, e.Err)
	if e.Started && e.Op != "close" {
		msg += "; it had started, so the session is unusable: close it and open a new one"
	}
	return msg
}

func (e *OperationError) Unwrap() error { return e.Err }

// PanicError is a recovered panic from provider or host code.
type PanicError struct {
	// Where names the code that panicked.
	Where string
	Value any
}

func (e *PanicError) Error() string { return fmt.Sprintf("%s panicked: %v", e.Where, e.Value) }

// CleanupError says cleanup is incomplete: a provider session did not
// close, or the instances of a failed registry opening were not all
// disposed. It unwraps to every cause, including the error that made the
// cleanup necessary. RetryCleanup retries what is left.
type CleanupError struct {
	Provider string
	Errs     []error
	retry    *retrier
	what     string
}

func (e *CleanupError) Error() string {
	what := e.what
	if what == "" {
		what = "cleanup"
	}
	var b strings.Builder
	if e.Provider != "" {
		b.WriteString("provider " + e.Provider + ": ")
	} else {
		b.WriteString("provider: ")
	}
	fmt.Fprintf(&b, "%s is incomplete", what)
	for _, err := range e.Errs {
		b.WriteString("; " + err.Error())
	}
	b.WriteString("; call RetryCleanup to finish it")
	return b.String()
}

func (e *CleanupError) Unwrap() []error { return e.Errs }

// RetryCleanup retries the cleanup that is left. It completes at most
// once: after a success it is a no-op, and concurrent calls share one
// attempt. ctx bounds the attempt (or the wait for a shared one).
func (e *CleanupError) RetryCleanup(ctx context.Context) error {
	if e.retry == nil {
		return nil
	}
	return e.retry.do(ctx)
}

// HostBindingCleanupError is a CleanupError whose incomplete part is the
// release of a host binding. errors.As also finds it as a *CleanupError.
type HostBindingCleanupError struct {
	CleanupError
}

func (e *HostBindingCleanupError) Error() string {
	c := e.CleanupError
	c.what = "host binding release"
	return c.Error()
}

// As lets errors.As(err, **CleanupError) find the embedded CleanupError.
func (e *HostBindingCleanupError) As(target any) bool {
	if t, ok := target.(**CleanupError); ok {
		*t = &e.CleanupError
		return true
	}
	return false
}

// retrier runs a cleanup until it succeeds once. Concurrent callers share
// the attempt in flight; after a success every call returns nil.
type retrier struct {
	fn func(context.Context) error

	mu      sync.Mutex
	done    bool
	running bool
	// shared is made by the first caller that waits for an attempt in
	// flight; the attempt closes it when it ends.
	shared *attempt
}

type attempt struct {
	finished chan struct{}
	err      error
}

func newRetrier(fn func(context.Context) error) *retrier { return &retrier{fn: fn} }

func (r *retrier) do(ctx context.Context) error {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return nil
	}
	if r.running {
		a := r.shared
		if a == nil {
			a = &attempt{finished: make(chan struct{})}
			r.shared = a
		}
		r.mu.Unlock()
		select {
		case <-a.finished:
			return a.err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	r.running = true
	r.mu.Unlock()

	err := safely("cleanup", func() error { return r.fn(ctx) })

	r.mu.Lock()
	r.running = false
	if err == nil {
		r.done = true
	}
	if a := r.shared; a != nil {
		r.shared = nil
		a.err = err
		close(a.finished)
	}
	r.mu.Unlock()
	return err
}

func (r *retrier) completed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// safely runs fn, turning a panic into a *PanicError.
func safely(where string, fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Where: where, Value: v}
		}
	}()
	return fn()
}

// errList is the error of a cleanup step list: every failure, in order.
type errList []error

func (l errList) Error() string {
	parts := make([]string, len(l))
	for i, err := range l {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (l errList) Unwrap() []error { return l }

// orNil returns nil for an empty list, so a list is only an error when it
// holds one.
func (l errList) orNil() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// flatten expands our own error lists and cleanup errors, so a
// CleanupError lists causes rather than nested cleanup errors.
func flatten(errs ...error) []error {
	var out []error
	for _, err := range errs {
		switch e := err.(type) {
		case nil:
		case errList:
			out = append(out, flatten(e...)...)
		case *CleanupError:
			out = append(out, flatten(e.Errs...)...)
		case *HostBindingCleanupError:
			out = append(out, flatten(e.Errs...)...)
		default:
			out = append(out, err)
		}
	}
	return out
}

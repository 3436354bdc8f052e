package agentcore

import (
	"errors"
	"fmt"
	"slices"

	"github.com/aws/smithy-go"

	"github.com/agentry-dev/agentry/code"
)

var (
	// ErrNoRegion: no AWS region was configured.
	ErrNoRegion = errors.New("agentcore: no AWS region: set AWS_REGION, or Options.Region")
	// ErrNoCredentials: the AWS credential chain found nothing usable.
	ErrNoCredentials = errors.New("agentcore: no AWS credentials")
	// ErrSessionTimeout: Options.SessionTimeout is outside what the service
	// accepts.
	ErrSessionTimeout = errors.New("agentcore: invalid session timeout")
	// ErrUnsupportedLanguage: the service runs python, javascript and
	// typescript only.
	ErrUnsupportedLanguage = errors.New("agentcore: unsupported language")
	// ErrStopped: the session was stopped; start a new one.
	// It wraps code.ErrStopped, so the run_code tool recognises it.
	ErrStopped = fmt.Errorf("agentcore: %w", code.ErrStopped)
	// ErrBroken: an execute was abandoned mid-run (timed out, cancelled, or
	// its stream was cut), or the service no longer knows the session, so
	// the session's state is unknown. Stop it and start a new one.
	// It wraps code.ErrBroken, so the run_code tool opens a fresh session
	// and tells the model its state was lost.
	ErrBroken = fmt.Errorf("agentcore: %w", code.ErrBroken)
	// ErrExecTimeout: an execute outran its timeout. It also matches
	// ErrBroken.
	// It wraps code.ErrTimeout.
	ErrExecTimeout = fmt.Errorf("agentcore: %w", code.ErrTimeout)
)

// failure is an error in its own words that matches the given sentinels
// and unwraps to its cause.
type failure struct {
	msg string
	is  []error
	err error
}

func (f *failure) Error() string { return f.msg }
func (f *failure) Is(target error) bool {
	return slices.ContainsFunc(f.is, func(e error) bool { return errors.Is(e, target) })
}
func (f *failure) Unwrap() error { return f.err }

// APIError is an exception the service returned, as an HTTP error or as an
// exception event inside the InvokeCodeInterpreter stream. Code is the
// exception's name ("ThrottlingException", "AccessDeniedException", ...);
// Unwrap gives the SDK's error, so errors.As with the SDK's exception types
// also works.
type APIError struct {
	Op      string // "start", "execute" or "stop"
	Session string // the remote session id; empty for start
	Code    string
	Message string
	Err     error
}

func (e *APIError) Error() string {
	where := "agentcore: " + e.Op
	switch {
	case e.Session != "" && e.Op == opExecute:
		where += " in session " + e.Session
	case e.Session != "":
		where += " session " + e.Session
	}
	msg := e.Code
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if fix := fixFor(e.Op, e.Code); fix != "" {
		msg += " (" + fix + ")"
	}
	return where + ": " + msg
}

func (e *APIError) Unwrap() error { return e.Err }

const (
	opStart   = "start"
	opExecute = "execute"
	opStop    = "stop"
)

// iamAction is the permission each operation needs.
var iamAction = map[string]string{
	opStart:   "bedrock-agentcore:StartCodeInterpreterSession",
	opExecute: "bedrock-agentcore:InvokeCodeInterpreter",
	opStop:    "bedrock-agentcore:StopCodeInterpreterSession",
}

func fixFor(op, code string) string {
	switch code {
	case "AccessDeniedException":
		return "grant the caller " + iamAction[op] + " on the code interpreter"
	case "ThrottlingException":
		return "requests are coming too fast: retry later or ask AWS for a higher quota"
	case "ServiceQuotaExceededException":
		return "too many live sessions: stop idle ones or ask AWS for a higher quota"
	case "ResourceNotFoundException":
		if op == opStart {
			return "check the code interpreter identifier and the region"
		}
		return "the session expired or was stopped: start a new one"
	case "ValidationException":
		return "the service rejected the request: check the identifier, the session timeout and the code"
	case "ConflictException":
		return "the session is busy or changing state: retry when the running execute ends"
	case "InternalServerException":
		return "a fault on the service's side: retry"
	}
	return ""
}

// maxMessage bounds how much of a service message an error repeats.
const maxMessage = 300

// wrapErr names a failed call after the service's exception when there
// is one.
func wrapErr(op, session string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		msg := ae.ErrorMessage()
		if cut, n := prefixRunes(msg, maxMessage); n > maxMessage {
			msg = cut + "…"
		}
		return &APIError{Op: op, Session: session, Code: ae.ErrorCode(), Message: msg, Err: err}
	}
	if session != "" {
		return fmt.Errorf("agentcore: %s session %s: %w", op, session, err)
	}
	return fmt.Errorf("agentcore: %s: %w", op, err)
}

// isCode reports whether err is the service exception named code.
func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

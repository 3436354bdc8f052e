package llm

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// What went wrong talking to a model server, matched with errors.Is. The
// adapters (llm/anthropic, llm/openai) return these wrapped in an
// [*APIError] whose text names the fix.
var (
	// ErrNoAPIKey: no key was given and the server needs one.
	ErrNoAPIKey = errors.New("llm: no API key")
	// ErrAuth: the server refused the key (HTTP 401 or 403).
	ErrAuth = errors.New("llm: the API key was refused")
	// ErrModelNotFound: the server does not know the model (HTTP 404).
	ErrModelNotFound = errors.New("llm: model not found")
	// ErrUnreachable: no connection could be made (refused, unknown host).
	ErrUnreachable = errors.New("llm: model server unreachable")
	// ErrRateLimited: HTTP 429 after every retry, or a wait longer than
	// the client is willing to honour.
	ErrRateLimited = errors.New("llm: rate limited")
	// ErrServer: HTTP 5xx (or an overload) after every retry, or a
	// connection that broke.
	ErrServer = errors.New("llm: model server failed")
	// ErrBadRequest: the server refused the request as malformed (4xx).
	ErrBadRequest = errors.New("llm: request refused")
	// ErrBadToolCall: the model asked for a tool call that cannot be
	// run: no name, or arguments that are not JSON.
	ErrBadToolCall = errors.New("llm: the model sent a malformed tool call")
	// ErrProtocol: the server answered something that is not the API the
	// adapter speaks (a wrong base URL, a proxy's error page).
	ErrProtocol = errors.New("llm: the server's answer could not be understood")
	// ErrIncomplete: the response ended before the server said it was done.
	ErrIncomplete = errors.New("llm: response ended early")
)

// APIError is a failed call to a model server. Its text says what failed
// and what to do; it never carries an API key.
type APIError struct {
	// Provider is who was called: "anthropic", "openai", "ollama", ...
	Provider string
	Model    string
	// Kind is one of the Err* sentinels of this package; errors.Is
	// matches it.
	Kind error
	// Status is the HTTP status, 0 when no response arrived.
	Status int
	// Message is the server's own explanation, shortened, with the key
	// removed.
	Message string
	// Fix is the one-line remedy.
	Fix string
	// Attempts counts the requests made, retries included.
	Attempts int
	// RetryAfter is the wait the server last asked for, if it said.
	RetryAfter time.Duration
	// Cause is the underlying transport error, when there was one.
	Cause error
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	b.WriteString(": ")
	b.WriteString(strings.TrimPrefix(e.Kind.Error(), "llm: "))
	if e.Model != "" {
		fmt.Fprintf(&b, " (model %q)", e.Model)
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	} else if e.Cause != nil {
		b.WriteString(": ")
		b.WriteString(e.Cause.Error())
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Unwrap exposes the kind (and the transport cause) to errors.Is/As.
func (e *APIError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Kind, e.Cause}
	}
	return []error{e.Kind}
}

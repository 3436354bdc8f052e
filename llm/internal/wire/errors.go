package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/llm"
)

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// maxMessage bounds the server's explanation kept in an error.
const maxMessage = 300

// Capture records what the server answered to one request, for the error
// mapping: the status, the headers, and (for an error status) the start of
// the body. Its Middleware is installed on the SDK's request; one Capture
// serves one request.
type Capture struct {
	Status int
	Header http.Header
	Body   []byte
}

// Middleware has the shape both official SDKs accept as a middleware.
func (c *Capture) Middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	res, err := next(req)
	if res == nil {
		return res, err
	}
	c.Status, c.Header = res.StatusCode, res.Header
	if res.StatusCode >= 400 && res.Body != nil {
		head, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		c.Body = head
		res.Body = readCloser{io.MultiReader(bytes.NewReader(head), res.Body), res.Body}
	}
	return res, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Target names what was called, for the errors about it.
type Target struct {
	Provider string // "anthropic", "openai", "ollama", ...
	Model    string
	BaseURL  string // shown without credentials
	Key      string // never shown: removed from anything the server says
	// Fixes for the failures whose remedy depends on the provider.
	AuthFix   string // the key was refused
	ModelsFix string // the model is unknown: how to list or get models
	StartFix  string // the connection was refused: how to start the server
}

func (t Target) apiError(kind error, status int, msg, fix string) *llm.APIError {
	return &llm.APIError{Provider: t.Provider, Model: t.Model, Kind: kind, Status: status, Message: msg, Fix: fix, Attempts: 1}
}

// FromHTTP maps an error status and what came with it.
func (t Target) FromHTTP(status int, header http.Header, body []byte, now time.Time) *llm.APIError {
	msg := t.Clean(Message(body))
	var e *llm.APIError
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e = t.apiError(llm.ErrAuth, status, msg, t.AuthFix)
	case status == http.StatusNotFound:
		fix := t.ModelsFix
		if !strings.Contains(strings.ToLower(msg), "model") {
			fix = fmt.Sprintf("check the base URL %s (an OpenAI-compatible one usually ends in /v1); %s", RedactURL(t.BaseURL), t.ModelsFix)
		}
		e = t.apiError(llm.ErrModelNotFound, status, msg, fix)
	case status == http.StatusTooManyRequests:
		e = t.apiError(llm.ErrRateLimited, status, msg, "wait and try again, or lower the request rate")
	case status == http.StatusRequestTimeout || status >= 500:
		e = t.apiError(llm.ErrServer, status, msg, "try again later")
	default:
		e = t.apiError(llm.ErrBadRequest, status, msg, "")
	}
	e.RetryAfter = RetryAfter(header, now)
	return e
}

// FromStream maps an error the server reported inside a stream that had
// begun with HTTP 200, by the error type it named.
func (t Target) FromStream(errType, message string) *llm.APIError {
	msg := t.Clean(message)
	switch {
	case strings.Contains(errType, "rate_limit"):
		return t.apiError(llm.ErrRateLimited, 0, msg, "wait and try again, or lower the request rate")
	case strings.Contains(errType, "overloaded"), strings.Contains(errType, "api_error"),
		strings.Contains(errType, "server_error"), errType == "":
		return t.apiError(llm.ErrServer, 0, msg, "try again later")
	}
	return t.apiError(llm.ErrBadRequest, 0, msg, "")
}

// FromTransport maps an error where no HTTP response arrived (or the body
// broke off). It returns nil when err is not a transport failure.
func (t Target) FromTransport(err error) *llm.APIError {
	base := RedactURL(t.BaseURL)
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		e := t.apiError(llm.ErrUnreachable, 0, "", fmt.Sprintf("is the server at %s running? %s", base, t.StartFix))
		e.Cause = errors.New("connection refused")
		return e
	case errors.As(err, &dnsErr):
		e := t.apiError(llm.ErrUnreachable, 0, "", fmt.Sprintf("check the host name in %s", base))
		e.Cause = fmt.Errorf("cannot resolve %q", dnsErr.Name)
		return e
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		e := t.apiError(llm.ErrServer, 0, "the connection broke off", "try again later")
		e.Cause = err
		return e
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		e := t.apiError(llm.ErrServer, 0, "", "try again later")
		e.Cause = netErr
		return e
	}
	return nil
}

// Protocol maps an answer the adapter could not read.
func (t Target) Protocol(err error) *llm.APIError {
	return t.apiError(llm.ErrProtocol, 0, t.Clean(err.Error()),
		fmt.Sprintf("check that %s serves the %s API", RedactURL(t.BaseURL), t.Provider))
}

// Clean makes server-supplied text safe to show: the key removed, control
// characters and runs of space folded, at most a few hundred characters.
func (t Target) Clean(s string) string {
	if len(t.Key) >= 4 {
		s = strings.ReplaceAll(s, t.Key, "[redacted]")
	}
	var b strings.Builder
	space := false
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.IsSpace(r) {
			if !space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = true
			continue
		}
		space = false
		b.WriteRune(r)
	}
	out := strings.TrimSpace(b.String())
	if utf8.RuneCountInString(out) > maxMessage {
		out = string([]rune(out)[:maxMessage]) + "…"
	}
	return out
}

// Message pulls the explanation out of an error body in the shapes model
// servers use: {"error":{"message":…}}, {"error":"…"}, {"message":…},
// {"detail":…}; any other body is taken as text.
func Message(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) != nil {
		if s, ok := str(body); ok {
			return s
		}
		if json.Valid(body) {
			return ""
		}
		return string(body)
	}
	if s, ok := str(v.Error); ok {
		return s
	}
	var inner struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(v.Error, &inner) == nil {
		if s, ok := str(inner.Message); ok {
			return s
		}
	}
	if s, ok := str(v.Message); ok {
		return s
	}
	if s, ok := str(v.Detail); ok {
		return s
	}
	return ""
}

func str(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// maxRetryAfter keeps absurd values from overflowing a Duration.
const maxRetryAfter = 24 * time.Hour

// RetryAfter reads how long the server asks to wait: Retry-After-Ms (the
// vendors' millisecond form) or Retry-After in seconds or as an HTTP date.
// 0 means it did not say, or said "now".
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return clampWait(f * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return clampWait(f * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil {
		return clampWait(float64(at.Sub(now)))
	}
	return 0
}

func clampWait(ns float64) time.Duration {
	switch {
	case math.IsNaN(ns) || ns <= 0:
		return 0
	case ns >= float64(maxRetryAfter):
		return maxRetryAfter
	}
	return time.Duration(ns)
}

// RedactURL shows a base URL without user info or query, which may hold
// credentials.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the configured base URL"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}

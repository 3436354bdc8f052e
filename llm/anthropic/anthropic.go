// Package anthropic is the [llm.Model] for Anthropic's Messages API, built
// on the official Go SDK (github.com/anthropics/anthropic-sdk-go).
//
// A *Model generates with [Model.Generate] and streams with [Model.Stream]
// (text deltas as they arrive, each tool call once its arguments are
// complete). It sends the system prompt, the conversation (tool calls and
// their results, parallel ones too, error results marked as such) and the
// tools' JSON Schemas, and reports usage and the stop reason.
//
// It promises: rate limits (429) and server failures (5xx, overloaded) are
// retried a bounded number of times, honouring Retry-After up to a limit;
// a cancelled context stops the request at once; every failure is an
// [*llm.APIError] whose text says the fix; the API key never appears in an
// error. It reads no environment variable: the caller passes the key.
package anthropic

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/internal/wire"
)

// DefaultBaseURL is Anthropic's API.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens bounds an answer when neither the request nor the
// options say.
const DefaultMaxTokens = 4096

// Options configure a [Model].
type Options struct {
	// Model is the model to call, e.g. "claude-sonnet-4-5". Required.
	Model string
	// APIKey is sent as x-api-key. Required; the agentry command reads it
	// from ANTHROPIC_API_KEY.
	APIKey string
	// BaseURL replaces DefaultBaseURL (a proxy, a gateway, a test server).
	BaseURL string
	// MaxTokens is the answer bound for requests that set none; 0 means
	// DefaultMaxTokens.
	MaxTokens int
	// Timeout bounds one non-streaming request; 0 means 10 minutes.
	// Streams are bounded by the caller's context only.
	Timeout time.Duration
	// HTTPClient sends the requests; nil means the SDK's own.
	HTTPClient *http.Client
	// MaxRetries is how often a rate-limited or failed request is
	// repeated: 0 means 3, negative means never.
	MaxRetries int
	// MaxRetryWait is the longest Retry-After honoured; a longer one fails
	// the request at once. 0 means one minute.
	MaxRetryWait time.Duration
	// Sleep waits between attempts; nil uses a timer. It must return
	// early, with an error, when ctx ends.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Model calls one Anthropic model. It is safe for concurrent use.
type Model struct {
	client    anthropic.Client
	model     string
	maxTokens int
	timeout   time.Duration
	target    wire.Target
	policy    wire.Policy
}

var (
	_ llm.Model    = (*Model)(nil)
	_ llm.Streamer = (*Model)(nil)
	_ llm.Namer    = (*Model)(nil)
)

// New checks opts and returns the model. A missing key is an error that
// names ANTHROPIC_API_KEY; nothing is sent until the first request.
func New(opts Options) (*Model, error) {
	base := strings.TrimRight(opts.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &llm.APIError{Provider: "anthropic", Model: opts.Model, Kind: llm.ErrBadRequest,
			Message: "the base URL is not an http(s) URL", Fix: "use one like " + DefaultBaseURL}
	}
	t := wire.Target{
		Provider:  "anthropic",
		Model:     opts.Model,
		BaseURL:   base,
		Key:       opts.APIKey,
		AuthFix:   "check ANTHROPIC_API_KEY: it must be a current key from the Anthropic Console",
		ModelsFix: fmt.Sprintf(`list the models your key can use: curl %s/v1/models -H "x-api-key: $ANTHROPIC_API_KEY" -H "anthropic-version: 2023-06-01"`, wire.RedactURL(base)),
		StartFix:  "check ANTHROPIC_BASE_URL and your network connection",
	}
	if opts.Model == "" {
		return nil, &llm.APIError{Provider: "anthropic", Kind: llm.ErrBadRequest,
			Message: "no model named", Fix: "name one, e.g. anthropic:claude-sonnet-4-5"}
	}
	if opts.APIKey == "" {
		return nil, &llm.APIError{Provider: "anthropic", Model: opts.Model, Kind: llm.ErrNoAPIKey,
			Fix: "set ANTHROPIC_API_KEY to a key from the Anthropic Console"}
	}
	ro := []option.RequestOption{
		option.WithoutEnvironmentDefaults(), // the caller decides; nothing leaks in from the environment
		option.WithAPIKey(opts.APIKey),
		option.WithBaseURL(base),
		option.WithMaxRetries(0), // retries are ours: bounded, injectable, and mapped to errors with a fix
	}
	if opts.HTTPClient != nil {
		ro = append(ro, option.WithHTTPClient(opts.HTTPClient))
	}
	m := &Model{
		client:    anthropic.NewClient(ro...),
		model:     opts.Model,
		maxTokens: opts.MaxTokens,
		timeout:   opts.Timeout,
		target:    t,
		policy:    wire.Policy{MaxRetries: opts.MaxRetries, MaxWait: opts.MaxRetryWait, Sleep: opts.Sleep},
	}
	if m.maxTokens <= 0 {
		m.maxTokens = DefaultMaxTokens
	}
	if m.timeout <= 0 {
		m.timeout = 10 * time.Minute
	}
	return m, nil
}

// Name is "anthropic:" and the model, for events.
func (m *Model) Name() string { return "anthropic:" + m.model }

// Generate sends req and returns the whole answer.
func (m *Model) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	params, err := m.params(req)
	if err != nil {
		return llm.Response{}, err
	}
	for n := 1; ; n++ {
		resp, err := m.generateOnce(ctx, params)
		if err == nil {
			return resp, nil
		}
		if err = m.policy.Retry(ctx, n, err); err != nil {
			return llm.Response{}, err
		}
	}
}

func (m *Model) generateOnce(ctx context.Context, params anthropic.MessageNewParams) (llm.Response, error) {
	var c wire.Capture
	msg, err := m.client.Messages.New(ctx, params,
		option.WithMiddleware(c.Middleware),
		option.WithRequestTimeout(m.timeout))
	if err != nil {
		return llm.Response{}, m.fail(ctx, &c, err)
	}
	resp, err := response(msg)
	if err != nil {
		return llm.Response{}, m.target.BadCall(err)
	}
	return resp, nil
}

// Stream sends req and yields text deltas as they arrive, each tool call
// when its arguments are complete, and last the whole response. A failure
// before anything was yielded is retried like Generate's; breaking out of
// the loop cancels the request.
func (m *Model) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		params, err := m.params(req)
		if err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		m.policy.Stream(ctx, func(ctx context.Context) (bool, error) { return m.streamOnce(ctx, params, yield) }, yield)
	}
}

func (m *Model) streamOnce(ctx context.Context, params anthropic.MessageNewParams, yield func(llm.Chunk, error) bool) (yielded bool, err error) {
	var c wire.Capture
	s := m.client.Messages.NewStreaming(ctx, params, option.WithMiddleware(c.Middleware))
	defer s.Close()
	var st streamState
	for s.Next() {
		ch, err := st.event(s.Current())
		if err != nil {
			return yielded, m.target.BadCall(err)
		}
		if ch == nil {
			continue
		}
		yielded = true
		if !yield(*ch, nil) {
			return true, nil
		}
		if ch.Done != nil {
			return true, nil
		}
	}
	if err := s.Err(); err != nil {
		return yielded, m.fail(ctx, &c, err)
	}
	if ctx.Err() != nil {
		return yielded, wire.Stopped(ctx)
	}
	return yielded, &llm.APIError{Provider: "anthropic", Model: m.model, Kind: llm.ErrIncomplete,
		Message: "the stream ended before message_stop", Fix: "try again", Attempts: 1}
}

// fail maps an error from the SDK to one a user can act on.
func (m *Model) fail(ctx context.Context, c *wire.Capture, err error) error {
	if ctx.Err() != nil {
		return wire.Stopped(ctx)
	}
	if c.Status >= 400 {
		return m.target.FromHTTP(c.Status, c.Header, c.Body, time.Now())
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) { // an error event inside a stream that began well
		return m.target.FromStream(string(ae.Type()), ae.Message)
	}
	if te := m.target.FromTransport(err); te != nil {
		return te
	}
	return m.target.Protocol(err)
}

// Package openai is the [llm.Model] for OpenAI's Chat Completions API,
// built on the official Go SDK (github.com/openai/openai-go). With a base
// URL it talks to any server that speaks that API: Ollama, vLLM,
// llama.cpp's llama-server, LM Studio, gateways.
//
// A *Model generates with [Model.Generate] and streams with [Model.Stream]
// (text deltas as they arrive, each tool call once its arguments, which
// arrive in pieces, are complete). It sends the system prompt, the
// conversation (tool calls and their results, parallel ones too) and the
// tools' JSON Schemas, and reports usage and the stop reason.
//
// It promises: rate limits (429) and server failures (5xx) are retried a
// bounded number of times, honouring Retry-After up to a limit; a
// cancelled context stops the request at once; every failure is an
// [*llm.APIError] whose text says the fix (a refused connection says to
// start the server); the API key never appears in an error and is never
// read from the environment: the caller passes it.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/internal/wire"
)

// DefaultBaseURL is OpenAI's API.
const DefaultBaseURL = "https://api.openai.com/v1"

// Options configure a [Model].
type Options struct {
	// Model is the model to call, e.g. "gpt-4o-mini" or, on Ollama,
	// "llama3.2". Required.
	Model string
	// APIKey is sent as a bearer token. Required for OpenAI's own API;
	// local servers (Ollama, llama-server, vLLM) usually need none.
	APIKey string
	// BaseURL is the API root, ending in /v1 for most servers, e.g.
	// http://localhost:11434/v1 for Ollama. "" means DefaultBaseURL.
	BaseURL string
	// Provider names the server in Name() and in errors: "openai" when
	// empty, "ollama" gives Ollama's own advice (ollama serve, ollama pull).
	Provider string
	// MaxTokens is the answer bound for requests that set none; 0 leaves
	// it to the server. OpenAI's API gets max_completion_tokens, others
	// max_tokens, which is what they understand.
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

// Model calls one model on an OpenAI-compatible server. It is safe for
// concurrent use.
type Model struct {
	chat      openai.ChatCompletionService
	model     string
	provider  string
	official  bool // OpenAI's own API
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

// New checks opts and returns the model. Nothing is sent until the first
// request.
func New(opts Options) (*Model, error) {
	provider := opts.Provider
	if provider == "" {
		provider = "openai"
	}
	base := strings.TrimRight(opts.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &llm.APIError{Provider: provider, Model: opts.Model, Kind: llm.ErrBadRequest,
			Message: "the base URL is not an http(s) URL", Fix: "use one like http://localhost:11434/v1"}
	}
	official := u.Hostname() == "api.openai.com"
	if opts.Model == "" {
		return nil, &llm.APIError{Provider: provider, Kind: llm.ErrBadRequest,
			Message: "no model named", Fix: fmt.Sprintf("name one, e.g. %s:<model>", provider)}
	}
	if opts.APIKey == "" && official {
		return nil, &llm.APIError{Provider: provider, Model: opts.Model, Kind: llm.ErrNoAPIKey,
			Fix: "set OPENAI_API_KEY, or set OPENAI_BASE_URL to a server that needs no key (Ollama, vLLM, llama-server)"}
	}
	ro := []option.RequestOption{
		// Built from the service rather than openai.NewClient, which would
		// add OPENAI_* variables from the environment: a local server must
		// never receive an OpenAI key or header it was not given.
		option.WithBaseURL(base + "/"),
		option.WithAPIKey(opts.APIKey),
		option.WithMaxRetries(0), // retries are ours: bounded, injectable, and mapped to errors with a fix
	}
	if opts.HTTPClient != nil {
		ro = append(ro, option.WithHTTPClient(opts.HTTPClient))
	}
	m := &Model{
		chat:      openai.NewChatCompletionService(ro...),
		model:     opts.Model,
		provider:  provider,
		official:  official,
		maxTokens: opts.MaxTokens,
		timeout:   opts.Timeout,
		target:    target(provider, opts.Model, base, opts.APIKey, official),
		policy:    wire.Policy{MaxRetries: opts.MaxRetries, MaxWait: opts.MaxRetryWait, Sleep: opts.Sleep},
	}
	if m.timeout <= 0 {
		m.timeout = 10 * time.Minute
	}
	return m, nil
}

// target holds the advice that fits the server.
func target(provider, model, base, key string, official bool) wire.Target {
	shown := wire.RedactURL(base)
	t := wire.Target{
		Provider:  provider,
		Model:     model,
		BaseURL:   base,
		Key:       key,
		AuthFix:   fmt.Sprintf("check OPENAI_API_KEY: the server at %s refused it", shown),
		ModelsFix: fmt.Sprintf("list the models the server offers: curl %s/models", shown),
		StartFix:  "start it (ollama serve; vllm serve MODEL; llama-server -m MODEL.gguf) or fix OPENAI_BASE_URL",
	}
	switch {
	case provider == "ollama":
		t.AuthFix = fmt.Sprintf("the Ollama server at %s wants a key; agentry sends none to Ollama", shown)
		t.ModelsFix = fmt.Sprintf("pull it with `ollama pull %s`; `ollama list` shows the models you have", model)
		t.StartFix = "start it with `ollama serve` (or set OLLAMA_HOST to where it listens)"
	case official:
		t.AuthFix = "check OPENAI_API_KEY: it must be a current key from platform.openai.com"
		t.ModelsFix = fmt.Sprintf(`list the models your key can use: curl %s/models -H "Authorization: Bearer $OPENAI_API_KEY"`, shown)
		t.StartFix = "check your network connection and OPENAI_BASE_URL"
	}
	return t
}

// Name is the provider and the model, e.g. "ollama:llama3.2", for events.
func (m *Model) Name() string { return m.provider + ":" + m.model }

// Generate sends req and returns the whole answer.
func (m *Model) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	params, err := m.params(req, false)
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

func (m *Model) generateOnce(ctx context.Context, params openai.ChatCompletionNewParams) (llm.Response, error) {
	var c wire.Capture
	cc, err := m.chat.New(ctx, params,
		option.WithMiddleware(c.Middleware),
		option.WithRequestTimeout(m.timeout))
	if err != nil {
		return llm.Response{}, m.fail(ctx, &c, err)
	}
	if len(cc.Choices) == 0 {
		return llm.Response{}, m.target.Protocol(errors.New("the answer has no choices"))
	}
	resp, err := response(cc)
	if err != nil {
		return llm.Response{}, m.target.BadCall(err)
	}
	return resp, nil
}

// Stream sends req and yields text deltas as they arrive, each tool call
// when the server says the message is finished, and last the whole
// response. A failure before anything was yielded is retried like
// Generate's; breaking out of the loop cancels the request.
func (m *Model) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		params, err := m.params(req, true)
		if err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		m.policy.Stream(ctx, func(ctx context.Context) (bool, error) { return m.streamOnce(ctx, params, yield) }, yield)
	}
}

func (m *Model) streamOnce(ctx context.Context, params openai.ChatCompletionNewParams, yield func(llm.Chunk, error) bool) (yielded bool, err error) {
	var c wire.Capture
	s := m.chat.NewStreaming(ctx, params, option.WithMiddleware(c.Middleware))
	defer s.Close()
	var st streamState
	for s.Next() {
		chunks, err := st.chunk(s.Current())
		if err != nil {
			return yielded, m.target.BadCall(err)
		}
		for _, ch := range chunks {
			yielded = true
			if !yield(ch, nil) {
				return true, nil
			}
		}
	}
	if err := s.Err(); err != nil {
		return yielded, m.fail(ctx, &c, err)
	}
	if ctx.Err() != nil {
		return yielded, wire.Stopped(ctx)
	}
	done, err := st.done()
	if err != nil {
		return yielded, m.target.BadCall(err)
	}
	if done == nil {
		return yielded, &llm.APIError{Provider: m.provider, Model: m.model, Kind: llm.ErrIncomplete,
			Message: "the stream ended without a finish_reason", Fix: "try again", Attempts: 1}
	}
	for _, call := range done.ToolCalls[st.sent:] {
		yielded = true
		if !yield(llm.Chunk{ToolCall: &call}, nil) {
			return true, nil
		}
	}
	yield(llm.Chunk{Done: done}, nil)
	return true, nil
}

// fail maps an error from the SDK to one a user can act on.
func (m *Model) fail(ctx context.Context, c *wire.Capture, err error) error {
	if ctx.Err() != nil {
		return wire.Stopped(ctx)
	}
	if c.Status >= 400 {
		return m.target.FromHTTP(c.Status, c.Header, c.Body, time.Now())
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) { // an error event inside a stream that began well
		var body struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(se.Event.Data, &body)
		return m.target.FromStream(body.Error.Type, body.Error.Message)
	}
	if te := m.target.FromTransport(err); te != nil {
		return te
	}
	return m.target.Protocol(err)
}

package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/anthropic"
	"github.com/agentry-dev/agentry/llm/internal/wiretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const key = "sk-ant-api03-TESTKEY-0123456789abcdefghij"

// vendorRules refuses what the Messages API refuses, with its error shape.
func vendorRules(r wiretest.Request) (int, string) {
	if r.Method != http.MethodPost || r.Path != "/v1/messages" {
		return http.StatusNotFound, apiError("not_found_error", "Not Found")
	}
	// The API takes the key as x-api-key or, as this SDK sends it, a bearer token.
	if r.Header.Get("X-Api-Key") != key && r.Header.Get("Authorization") != "Bearer "+key {
		return http.StatusUnauthorized, apiError("authentication_error", "invalid x-api-key")
	}
	if r.Header.Get("Anthropic-Version") == "" {
		return http.StatusBadRequest, apiError("invalid_request_error", "anthropic-version: header is required")
	}
	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Messages  []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
				Text      *string
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return http.StatusBadRequest, apiError("invalid_request_error", "invalid JSON")
	}
	if body.Model == "" || body.MaxTokens <= 0 || len(body.Messages) == 0 {
		return http.StatusBadRequest, apiError("invalid_request_error", "model, max_tokens and messages are required")
	}
	for i, m := range body.Messages {
		var uses []string
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				uses = append(uses, b.ID)
			}
		}
		if len(uses) == 0 {
			continue
		}
		var results []string
		if i+1 < len(body.Messages) && body.Messages[i+1].Role == "user" {
			for _, b := range body.Messages[i+1].Content {
				if b.Type == "tool_result" {
					results = append(results, b.ToolUseID)
				}
			}
		}
		for _, id := range uses {
			if !slices.Contains(results, id) {
				return http.StatusBadRequest, apiError("invalid_request_error",
					fmt.Sprintf("messages.%d: tool_use ids were found without tool_result blocks immediately after: %s", i, id))
			}
		}
	}
	return 0, ""
}

func sentKey(h http.Header) string {
	if k := h.Get("X-Api-Key"); k != "" {
		return k
	}
	return strings.TrimPrefix(h.Get("Authorization"), "Bearer ")
}

func apiError(typ, msg string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, typ, msg)
}

func message(content string, stop string) string {
	return fmt.Sprintf(`{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":%s,"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":5,"cache_read_input_tokens":0,"output_tokens":503}}`, content, stop)
}

func server(t *testing.T) *wiretest.Server {
	srv := wiretest.New(t)
	srv.Check = vendorRules
	return srv
}

func model(t *testing.T, srv *wiretest.Server, edit ...func(*anthropic.Options)) (*anthropic.Model, *wiretest.Sleeper) {
	t.Helper()
	var sl wiretest.Sleeper
	o := anthropic.Options{Model: "claude-sonnet-4-5", APIKey: key, BaseURL: srv.URL, HTTPClient: srv.Client(), Sleep: sl.Sleep}
	for _, e := range edit {
		e(&o)
	}
	m, err := anthropic.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m, &sl
}

var runCode = llm.ToolDef{
	Name:        "run_code",
	Description: "Runs Python in a sandbox and returns what it printed.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string","description":"the program"},"language":{"type":"string","enum":["python"]}},"required":["code"],"additionalProperties":false}`),
}

func ask(text string) llm.Request {
	return llm.Request{
		System:   "You are a careful assistant.",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: text}},
		Tools:    []llm.ToolDef{runCode},
	}
}

func noKey(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), key) {
		t.Fatalf("the API key leaked into an error: %v", err)
	}
}

func TestGenerateText(t *testing.T) {
	t.Parallel()
	srv := server(t)
	srv.Queue(wiretest.Reply{Body: message(`[{"type":"text","text":"Hi! "},{"type":"text","text":"I'm Claude."}]`, "end_turn")})
	m, _ := model(t, srv)
	resp, err := m.Generate(context.Background(), ask("hello"))
	if err != nil {
		t.Fatal(err)
	}
	want := llm.Response{Text: "Hi! I'm Claude.", StopReason: llm.StopEnd, Model: "claude-sonnet-4-5-20250929",
		Usage: llm.Usage{InputTokens: 2100, OutputTokens: 503, CacheWriteTokens: 5}}
	if resp.Text != want.Text || resp.StopReason != want.StopReason || resp.Model != want.Model || resp.Usage != want.Usage || resp.ToolCalls != nil {
		t.Fatalf("got %+v\nwant %+v", resp, want)
	}
	req := srv.Requests()[0]
	if sentKey(req.Header) != key || req.Header.Get("Anthropic-Version") == "" {
		t.Fatalf("headers: %v", req.Header)
	}
	wiretest.Golden(t, "generate_text", req.Body)
	if m.Name() != "anthropic:claude-sonnet-4-5" || llm.NameOf(m) != m.Name() {
		t.Fatalf("name %q", m.Name())
	}
}

func TestGenerateParallelToolCalls(t *testing.T) {
	t.Parallel()
	srv := server(t)
	srv.Queue(wiretest.Reply{Body: message(`[
		{"type":"text","text":"Running both."},
		{"type":"tool_use","id":"toolu_01A","name":"run_code","input":{"code":"print(1)"}},
		{"type":"tool_use","id":"toolu_01B","name":"run_code","input":{ "code" : "print(2)" }}]`, "tool_use")})
	m, _ := model(t, srv)
	resp, err := m.Generate(context.Background(), ask("print 1 and 2"))
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{
		{ID: "toolu_01A", Name: "run_code", Args: json.RawMessage(`{"code":"print(1)"}`)},
		{ID: "toolu_01B", Name: "run_code", Args: json.RawMessage(`{"code":"print(2)"}`)},
	}
	if resp.StopReason != llm.StopToolUse || resp.Text != "Running both." || !sameCalls(resp.ToolCalls, want) {
		t.Fatalf("got %+v", resp)
	}
}

func sameCalls(a, b []llm.ToolCall) bool {
	return slices.EqualFunc(a, b, func(x, y llm.ToolCall) bool {
		return x.ID == y.ID && x.Name == y.Name && string(x.Args) == string(y.Args)
	})
}

// A conversation with parallel calls, an error result and a follow-up
// question: results go back in one user message, before the text.
func TestConversationRequestShape(t *testing.T) {
	t.Parallel()
	srv := server(t)
	srv.Queue(wiretest.Reply{Body: message(`[{"type":"text","text":"Done."}]`, "end_turn")})
	m, _ := model(t, srv)
	req := llm.Request{
		System: "Be brief.",
		Tools:  []llm.ToolDef{runCode, {Name: "clock", Description: "the time"}},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "run two programs"},
			{Role: llm.RoleAssistant, Content: "Running.", ToolCalls: []llm.ToolCall{
				{ID: "toolu_01A", Name: "run_code", Args: json.RawMessage(`{"code":"print(1)"}`)},
				{ID: "toolu_01B", Name: "run_code", Args: json.RawMessage(`{"code":"1/0"}`)},
				{ID: "toolu_01C", Name: "clock"},
			}},
			{Role: llm.RoleTool, ToolCallID: "toolu_01A", ToolName: "run_code", Content: "1\n"},
			{Role: llm.RoleTool, ToolCallID: "toolu_01B", ToolName: "run_code", Content: "ZeroDivisionError: division by zero", IsError: true},
			{Role: llm.RoleTool, ToolCallID: "toolu_01C", ToolName: "clock"},
			{Role: llm.RoleUser, Content: "and now?"},
		},
		MaxTokens: 512,
	}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	wiretest.Golden(t, "conversation", srv.Requests()[0].Body)
}

func TestStreamTextAndSplitToolArguments(t *testing.T) {
	t.Parallel()
	for _, split := range []int{0, 7} { // whole events, and events cut every 7 bytes
		t.Run(fmt.Sprint("split", split), func(t *testing.T) {
			t.Parallel()
			srv := server(t)
			srv.Queue(wiretest.Reply{Stream: true, Split: split, Body: wiretest.Fixture(t, "stream_tool_use.sse")})
			m, _ := model(t, srv)
			var text []string
			var calls []llm.ToolCall
			var done *llm.Response
			for ch, err := range m.Stream(context.Background(), ask("say hi, then 6*7")) {
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case ch.Done != nil:
					done = ch.Done
				case ch.ToolCall != nil:
					calls = append(calls, *ch.ToolCall)
				default:
					text = append(text, ch.Text)
				}
			}
			want := []llm.ToolCall{
				{ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "run_code", Args: json.RawMessage(`{"code":"print(\"hi\")","language":"python"}`)},
				{ID: "toolu_01B8mPSwYqt7YwjxkPrXXV2L", Name: "run_code", Args: json.RawMessage(`{"code":"print(6*7)"}`)},
			}
			if !slices.Equal(text, []string{"I'll run ", "both."}) || !sameCalls(calls, want) {
				t.Fatalf("text %q calls %s", text, calls)
			}
			if done == nil || done.Text != "I'll run both." || !sameCalls(done.ToolCalls, want) ||
				done.StopReason != llm.StopToolUse || done.Usage != (llm.Usage{InputTokens: 500, OutputTokens: 89, CacheReadTokens: 28}) ||
				done.Model != "claude-sonnet-4-5-20250929" {
				t.Fatalf("done %+v", done)
			}
			body := srv.Requests()[0].JSON(t)
			if body["stream"] != true {
				t.Fatalf("stream flag not sent: %v", body["stream"])
			}
		})
	}
}

func TestCollectEqualsGenerate(t *testing.T) {
	t.Parallel()
	srv := server(t)
	srv.Queue(wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_text.sse")})
	m, _ := model(t, srv)
	resp, err := llm.Collect(m.Stream(context.Background(), ask("6*7?")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "The answer is 42." || resp.StopReason != llm.StopEnd || resp.Usage != (llm.Usage{InputTokens: 25, OutputTokens: 15}) {
		t.Fatalf("got %+v", resp)
	}
	wiretest.Golden(t, "stream_text", srv.Requests()[0].Body)
}

// The exchange the agent makes: the model asks for run_code, gets the
// result, and answers; through Generate and through Stream.
func TestTwoStepRunCode(t *testing.T) {
	t.Parallel()
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", streaming), func(t *testing.T) {
			t.Parallel()
			srv := server(t)
			if streaming {
				srv.Queue(
					wiretest.Reply{Stream: true, Body: toolUseStream("toolu_01R", `{\"code\": \"print(6*7)\"}`)},
					wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_text.sse")})
			} else {
				srv.Queue(
					wiretest.Reply{Body: message(`[{"type":"tool_use","id":"toolu_01R","name":"run_code","input":{"code":"print(6*7)"}}]`, "tool_use")},
					wiretest.Reply{Body: message(`[{"type":"text","text":"The answer is 42."}]`, "end_turn")})
			}
			m, _ := model(t, srv)
			gen := func(req llm.Request) (llm.Response, error) {
				if streaming {
					return llm.Collect(m.Stream(context.Background(), req))
				}
				return m.Generate(context.Background(), req)
			}
			req := ask("What is 6*7? Use run_code.")
			first, err := gen(req)
			if err != nil {
				t.Fatal(err)
			}
			if first.StopReason != llm.StopToolUse || len(first.ToolCalls) != 1 || first.ToolCalls[0].Name != "run_code" {
				t.Fatalf("first step: %+v", first)
			}
			var args struct{ Code string }
			if err := json.Unmarshal(first.ToolCalls[0].Args, &args); err != nil || args.Code != "print(6*7)" {
				t.Fatalf("args %s: %v", first.ToolCalls[0].Args, err)
			}
			req.Messages = append(req.Messages,
				llm.Message{Role: llm.RoleAssistant, Content: first.Text, ToolCalls: first.ToolCalls},
				llm.Message{Role: llm.RoleTool, ToolCallID: first.ToolCalls[0].ID, ToolName: "run_code", Content: "42\n"})
			second, err := gen(req)
			if err != nil {
				t.Fatal(err)
			}
			if second.Text != "The answer is 42." || second.StopReason != llm.StopEnd {
				t.Fatalf("second step: %+v", second)
			}
			wiretest.Golden(t, "two_step_"+map[bool]string{false: "generate", true: "stream"}[streaming], srv.Requests()[1].Body)
		})
	}
}

func toolUseStream(id, partial string) string {
	return `event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"` + id + `","name":"run_code","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"` + partial + `"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}

event: message_stop
data: {"type":"message_stop"}

`
}

func TestMissingKeyNamesTheVariable(t *testing.T) {
	t.Parallel()
	_, err := anthropic.New(anthropic.Options{Model: "claude-sonnet-4-5"})
	if !errors.Is(err, llm.ErrNoAPIKey) || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Fatalf("got %v", err)
	}
	if _, err := anthropic.New(anthropic.Options{APIKey: key}); err == nil || strings.Contains(err.Error(), key) {
		t.Fatalf("no model: %v", err)
	}
	for _, base := range []string{"api.anthropic.com", "ftp://x", "http://"} {
		if _, err := anthropic.New(anthropic.Options{Model: "m", APIKey: key, BaseURL: base}); !errors.Is(err, llm.ErrBadRequest) {
			t.Errorf("base %q: %v", base, err)
		}
	}
}

// The SDK would read ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL by itself;
// the adapter must use only what it was given.
func TestEnvironmentIsNotRead(t *testing.T) {
	srv := server(t)
	srv.Queue(wiretest.Reply{Body: message(`[{"type":"text","text":"ok"}]`, "end_turn")})
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-environment")
	t.Setenv("ANTHROPIC_BASE_URL", wiretest.ClosedURL(t))
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Leak: yes")
	m, _ := model(t, srv)
	if _, err := m.Generate(context.Background(), ask("hi")); err != nil {
		t.Fatal(err)
	}
	if h := srv.Requests()[0].Header; sentKey(h) != key || h.Get("X-Leak") != "" {
		t.Fatalf("headers %v", h)
	}
}

func TestErrorsSayTheFix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		reply  wiretest.Reply
		key    string
		kind   error
		says   []string
		status int
	}{
		{"refused key", wiretest.Reply{}, "sk-ant-wrong-key-1234", llm.ErrAuth, []string{"ANTHROPIC_API_KEY", "invalid x-api-key"}, 401},
		{"unknown model", wiretest.Reply{Status: 404, Body: apiError("not_found_error", "model: claude-nope")},
			key, llm.ErrModelNotFound, []string{`model "claude-nope"`, "/v1/models"}, 404},
		{"bad request", wiretest.Reply{Status: 400, Body: apiError("invalid_request_error", "max_tokens: 999999 > 64000")},
			key, llm.ErrBadRequest, []string{"max_tokens: 999999 > 64000"}, 400},
		{"server echoes the key", wiretest.Reply{Status: 400, Body: apiError("invalid_request_error", "bad header x-api-key="+key)},
			key, llm.ErrBadRequest, []string{"[redacted]"}, 400},
		{"not JSON", wiretest.Reply{Status: 400, Header: map[string]string{"Content-Type": "text/html"}, Body: "<html><body>\n<h1>Bad gateway config</h1>\n</body></html>"},
			key, llm.ErrBadRequest, []string{"<h1>Bad gateway config</h1>"}, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t)
			if c.status != 401 {
				srv.Queue(c.reply)
			}
			m, sl := model(t, srv, func(o *anthropic.Options) {
				o.APIKey = c.key
				o.Model = "claude-nope"
			})
			_, err := m.Generate(context.Background(), ask("hi"))
			noKey(t, err)
			if c.key != key && strings.Contains(fmt.Sprint(err), c.key) {
				t.Fatalf("key leaked: %v", err)
			}
			var ae *llm.APIError
			if !errors.Is(err, c.kind) || !errors.As(err, &ae) || ae.Status != c.status || ae.Attempts != 1 {
				t.Fatalf("got %v (%#v)", err, ae)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
			if len(sl.Waits()) != 0 || len(srv.Requests()) != 1 {
				t.Fatalf("a %d was retried", c.status)
			}
		})
	}
}

func TestRateLimitRetriedHonouringRetryAfter(t *testing.T) {
	t.Parallel()
	srv := server(t)
	srv.Queue(
		wiretest.Reply{Status: 429, Header: map[string]string{"Retry-After": "7"}, Body: apiError("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")},
		wiretest.Reply{Status: 529, Body: apiError("overloaded_error", "Overloaded")},
		wiretest.Reply{Body: message(`[{"type":"text","text":"ok"}]`, "end_turn")})
	m, sl := model(t, srv)
	resp, err := m.Generate(context.Background(), ask("hi"))
	if err != nil || resp.Text != "ok" {
		t.Fatalf("%+v %v", resp, err)
	}
	w := sl.Waits()
	if len(w) != 2 || w[0] != 7*time.Second || w[1] < 750*time.Millisecond || w[1] > time.Second {
		t.Fatalf("waits %v: want 7s (Retry-After), then the backoff of the second retry", w)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d requests", n)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	srv := server(t)
	for range 3 {
		srv.Queue(wiretest.Reply{Status: 503, Body: apiError("api_error", "Internal server error")})
	}
	m, sl := model(t, srv, func(o *anthropic.Options) { o.MaxRetries = 2 })
	_, err := m.Generate(context.Background(), ask("hi"))
	var ae *llm.APIError
	if !errors.Is(err, llm.ErrServer) || !errors.As(err, &ae) || ae.Attempts != 3 || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("got %v", err)
	}
	if len(sl.Waits()) != 2 || srv.Pending() != 0 {
		t.Fatalf("waits %v, %d replies unused", sl.Waits(), srv.Pending())
	}
}

func TestRetryAfterBeyondTheLimitFailsAtOnce(t *testing.T) {
	t.Parallel()
	srv := server(t)
	srv.Queue(wiretest.Reply{Status: 429, Header: map[string]string{"Retry-After": "3600"}, Body: apiError("rate_limit_error", "slow down")})
	m, sl := model(t, srv)
	_, err := m.Generate(context.Background(), ask("hi"))
	var ae *llm.APIError
	if !errors.Is(err, llm.ErrRateLimited) || !errors.As(err, &ae) || ae.RetryAfter != time.Hour || !strings.Contains(err.Error(), "wait 1h0m0s") {
		t.Fatalf("got %v", err)
	}
	if len(sl.Waits()) != 0 {
		t.Fatalf("waited %v", sl.Waits())
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	t.Run("overloaded before any output is retried", func(t *testing.T) {
		t.Parallel()
		srv := server(t)
		srv.Queue(
			wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_overloaded.sse")},
			wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_text.sse")})
		m, sl := model(t, srv)
		resp, err := llm.Collect(m.Stream(context.Background(), ask("hi")))
		if err != nil || resp.Text != "The answer is 42." || len(sl.Waits()) != 1 {
			t.Fatalf("%+v %v waits %v", resp, err, sl.Waits())
		}
	})
	t.Run("overloaded after output is returned", func(t *testing.T) {
		t.Parallel()
		srv := server(t)
		srv.Queue(wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_overloaded_late.sse")})
		m, sl := model(t, srv)
		var text string
		var err error
		for ch, e := range m.Stream(context.Background(), ask("hi")) {
			if e != nil {
				err = e
				break
			}
			text += ch.Text
		}
		if text != "Half an ans" || !errors.Is(err, llm.ErrServer) || !strings.Contains(err.Error(), "Overloaded") || len(sl.Waits()) != 0 {
			t.Fatalf("text %q err %v", text, err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		t.Parallel()
		srv := server(t)
		srv.Queue(wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_truncated.sse")})
		m, _ := model(t, srv)
		_, err := llm.Collect(m.Stream(context.Background(), ask("hi")))
		if !errors.Is(err, llm.ErrIncomplete) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("HTTP error", func(t *testing.T) {
		t.Parallel()
		srv := server(t)
		srv.Queue(wiretest.Reply{Status: 404, Body: apiError("not_found_error", "model: claude-nope")})
		m, _ := model(t, srv)
		_, err := llm.Collect(m.Stream(context.Background(), ask("hi")))
		if !errors.Is(err, llm.ErrModelNotFound) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	m, err := anthropic.New(anthropic.Options{Model: "claude-sonnet-4-5", APIKey: key, BaseURL: wiretest.ClosedURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(context.Background(), ask("hi"))
	if !errors.Is(err, llm.ErrUnreachable) || !strings.Contains(err.Error(), "ANTHROPIC_BASE_URL") || !strings.Contains(err.Error(), "running") {
		t.Fatalf("got %v", err)
	}
	noKey(t, err)
}

func TestCancellationStopsAtOnce(t *testing.T) {
	t.Parallel()
	t.Run("generate", func(t *testing.T) {
		t.Parallel()
		srv := server(t)
		srv.Queue(wiretest.Reply{Hold: true})
		m, _ := model(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { _, err := m.Generate(ctx, ask("hi")); errc <- err }()
		wiretest.Wait(t, srv.Held, "the request")
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		wiretest.Wait(t, srv.Gone, "the client to hang up")
	})
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		srv := server(t)
		first := strings.Join(strings.SplitAfter(wiretest.Fixture(t, "stream_text.sse"), "\n\n")[:3], "")
		srv.Queue(wiretest.Reply{Stream: true, Hold: true, Body: first})
		m, _ := model(t, srv)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var err error
		for ch, e := range m.Stream(ctx, ask("hi")) {
			if e != nil {
				err = e
				break
			}
			if ch.Text == "The answer" {
				cancel()
			}
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		wiretest.Wait(t, srv.Gone, "the client to hang up")
	})
	t.Run("breaking out", func(t *testing.T) {
		t.Parallel()
		srv := server(t)
		first := strings.Join(strings.SplitAfter(wiretest.Fixture(t, "stream_text.sse"), "\n\n")[:3], "")
		srv.Queue(wiretest.Reply{Stream: true, Hold: true, Body: first})
		m, _ := model(t, srv)
		for range m.Stream(context.Background(), ask("hi")) {
			break
		}
		wiretest.Wait(t, srv.Gone, "the client to hang up")
	})
	t.Run("during a retry wait", func(t *testing.T) {
		t.Parallel()
		srv := server(t)
		srv.Queue(wiretest.Reply{Status: 503, Body: apiError("api_error", "down")})
		ctx, cancel := context.WithCancel(context.Background())
		m, _ := model(t, srv, func(o *anthropic.Options) {
			o.Sleep = func(ctx context.Context, d time.Duration) error {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			}
		})
		_, err := m.Generate(ctx, ask("hi"))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestBadRequestsAreRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	srv := server(t)
	m, _ := model(t, srv)
	for name, req := range map[string]llm.Request{
		"schema not an object": {Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}},
			Tools: []llm.ToolDef{{Name: "t", InputSchema: json.RawMessage(`{"type":"array"}`)}}},
		"schema not JSON": {Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}},
			Tools: []llm.ToolDef{{Name: "t", InputSchema: json.RawMessage(`{`)}}},
		"result without id": {Messages: []llm.Message{{Role: llm.RoleTool, Content: "x"}}},
		"unknown role":      {Messages: []llm.Message{{Role: "system", Content: "x"}}},
		"empty user":        {Messages: []llm.Message{{Role: llm.RoleUser}}},
		"bad stored args": {Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "t", Args: json.RawMessage(`{"x":`)}}}}},
	} {
		if _, err := m.Generate(context.Background(), req); !errors.Is(err, llm.ErrBadRequest) {
			t.Errorf("%s: got %v", name, err)
		}
		if _, err := llm.Collect(m.Stream(context.Background(), req)); !errors.Is(err, llm.ErrBadRequest) {
			t.Errorf("%s (stream): got %v", name, err)
		}
	}
	if n := len(srv.Requests()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

func TestMalformedToolCallFromTheServer(t *testing.T) {
	t.Parallel()
	srv := server(t)
	srv.Queue(wiretest.Reply{Stream: true, Body: toolUseStream("toolu_X", `{\"code\": \"unterminated`)})
	m, _ := model(t, srv)
	_, err := llm.Collect(m.Stream(context.Background(), ask("hi")))
	if !errors.Is(err, llm.ErrBadToolCall) || !strings.Contains(err.Error(), "run_code") || strings.Contains(err.Error(), "unterminated") {
		t.Fatalf("got %v", err)
	}
}

// A request that withholds tool calls still describes the tools and sets
// the tool choice to none.
func TestNoToolCallsSetsToolChoiceNone(t *testing.T) {
	t.Parallel()
	srv := server(t)
	srv.Queue(wiretest.Reply{Body: message(`[{"type":"text","text":"Done."}]`, "end_turn")})
	m, _ := model(t, srv)
	req := ask("wrap up")
	req.Tools, req.NoToolCalls = []llm.ToolDef{runCode}, true
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Tools      []json.RawMessage `json:"tools"`
		ToolChoice map[string]any    `json:"tool_choice"`
	}
	if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Tools) != 1 || body.ToolChoice["type"] != "none" {
		t.Fatalf("tools %d, tool_choice %v", len(body.Tools), body.ToolChoice)
	}
}

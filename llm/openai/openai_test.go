package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/internal/wiretest"
	"github.com/agentry-dev/agentry/llm/openai"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const key = "sk-proj-TESTKEY-abcdefghijklmnopqrstuvwxyz012345"

// rules refuses what an OpenAI-compatible server refuses, with OpenAI's
// error shape. wantKey "" means the server takes no key (Ollama).
func rules(wantKey string) func(r wiretest.Request) (int, string) {
	return func(r wiretest.Request) (int, string) {
		if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" {
			return http.StatusNotFound, "404 page not found"
		}
		if wantKey != "" && r.Header.Get("Authorization") != "Bearer "+wantKey {
			return http.StatusUnauthorized, oaiError("Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key")
		}
		var body struct {
			Model    string `json:"model"`
			Messages []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
				ToolCalls  []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || body.Model == "" || len(body.Messages) == 0 {
			return http.StatusBadRequest, oaiError("'model' and 'messages' are required", "invalid_request_error", "")
		}
		for i, m := range body.Messages {
			if m.Role == "tool" && (i == 0 || (body.Messages[i-1].Role != "tool" && len(body.Messages[i-1].ToolCalls) == 0)) {
				return http.StatusBadRequest, oaiError("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", "invalid_request_error", "")
			}
			for _, c := range m.ToolCalls {
				answered := false
				for _, n := range body.Messages[i+1:] {
					if n.Role != "tool" {
						break
					}
					answered = answered || n.ToolCallID == c.ID
				}
				if !answered {
					return http.StatusBadRequest, oaiError(fmt.Sprintf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", c.ID), "invalid_request_error", "")
				}
			}
		}
		return 0, ""
	}
}

func oaiError(msg, typ, code string) string {
	c := "null"
	if code != "" {
		c = fmt.Sprintf("%q", code)
	}
	return fmt.Sprintf(`{"error":{"message":%q,"type":%q,"param":null,"code":%s}}`, msg, typ, c)
}

func completion(message string, finish string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"message":%s,"logprobs":null,"finish_reason":%q}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},"service_tier":"default","system_fingerprint":"fp_fc9f1d7035"}`, message, finish)
}

func text(s string) string {
	return fmt.Sprintf(`{"role":"assistant","content":%q,"refusal":null,"annotations":[]}`, s)
}

func server(t *testing.T, wantKey string) *wiretest.Server {
	srv := wiretest.New(t)
	srv.Check = rules(wantKey)
	return srv
}

func model(t *testing.T, srv *wiretest.Server, edit ...func(*openai.Options)) (*openai.Model, *wiretest.Sleeper) {
	t.Helper()
	var sl wiretest.Sleeper
	o := openai.Options{Model: "gpt-4o-mini", APIKey: key, BaseURL: srv.URL + "/v1", HTTPClient: srv.Client(), Sleep: sl.Sleep}
	for _, e := range edit {
		e(&o)
	}
	m, err := openai.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m, &sl
}

// ollama configures the model as the command does for ollama:<model>.
func ollama(o *openai.Options) {
	o.Provider, o.Model, o.APIKey = "ollama", "llama3.2", ""
}

var runCode = llm.ToolDef{
	Name:        "run_code",
	Description: "Runs Python in a sandbox and returns what it printed.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string","description":"the program"}},"required":["code"],"additionalProperties":false}`),
}

func ask(s string) llm.Request {
	return llm.Request{
		System:   "You are a careful assistant.",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: s}},
		Tools:    []llm.ToolDef{runCode},
	}
}

func sameCalls(a, b []llm.ToolCall) bool {
	return slices.EqualFunc(a, b, func(x, y llm.ToolCall) bool {
		return x.ID == y.ID && x.Name == y.Name && string(x.Args) == string(y.Args)
	})
}

func TestGenerateText(t *testing.T) {
	t.Parallel()
	srv := server(t, key)
	srv.Queue(wiretest.Reply{Body: completion(text("Hello there."), "stop")})
	m, _ := model(t, srv, func(o *openai.Options) { o.MaxTokens = 300 })
	resp, err := m.Generate(context.Background(), ask("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "Hello there." || resp.StopReason != llm.StopEnd || resp.Model != "gpt-4o-mini-2024-07-18" ||
		resp.Usage != (llm.Usage{InputTokens: 1117, OutputTokens: 46, CacheReadTokens: 1024}) || resp.ToolCalls != nil {
		t.Fatalf("got %+v", resp)
	}
	wiretest.Golden(t, "generate_text", srv.Requests()[0].Body)
	if m.Name() != "openai:gpt-4o-mini" {
		t.Fatalf("name %q", m.Name())
	}
}

// OpenAI's own API wants max_completion_tokens; the client reaches it
// here through a dialer that sends api.openai.com to the local server.
func TestOfficialAPIGetsMaxCompletionTokens(t *testing.T) {
	t.Parallel()
	srv := server(t, key)
	srv.Queue(wiretest.Reply{Body: completion(text("ok"), "stop")})
	addr := srv.Listener.Addr().String()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	m, _ := model(t, srv, func(o *openai.Options) {
		o.BaseURL = "http://api.openai.com/v1"
		o.HTTPClient = &http.Client{Transport: tr}
	})
	if _, err := m.Generate(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, MaxTokens: 64}); err != nil {
		t.Fatal(err)
	}
	body := srv.Requests()[0].JSON(t)
	if body["max_completion_tokens"] != 64.0 || body["max_tokens"] != nil {
		t.Fatalf("body %v", body)
	}
}

func TestStopReasons(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		message, finish string
		want            llm.StopReason
	}{
		{text("a"), "stop", llm.StopEnd},
		{text("a"), "length", llm.StopMaxTokens},
		{text("a"), "content_filter", llm.StopRefusal},
		{`{"role":"assistant","content":null,"refusal":"I can't help with that."}`, "stop", llm.StopRefusal},
		{`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"run_code","arguments":"{}"}}]}`, "tool_calls", llm.StopToolUse},
		// Older Ollama finished a message holding tool calls with "stop".
		{`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"run_code","arguments":"{}"}}]}`, "stop", llm.StopToolUse},
		{text("a"), "something_new", llm.StopOther},
	} {
		srv := server(t, key)
		srv.Queue(wiretest.Reply{Body: completion(c.message, c.finish)})
		m, _ := model(t, srv)
		resp, err := m.Generate(context.Background(), ask("x"))
		if err != nil || resp.StopReason != c.want {
			t.Errorf("%s/%s: got %q, %v; want %q", c.message, c.finish, resp.StopReason, err, c.want)
		}
		if c.want == llm.StopRefusal && !strings.Contains(c.message, `"a"`) && resp.Text != "I can't help with that." {
			t.Errorf("refusal text lost: %q", resp.Text)
		}
	}
}

func TestGenerateParallelToolCalls(t *testing.T) {
	t.Parallel()
	srv := server(t, key)
	srv.Queue(wiretest.Reply{Body: completion(`{"role":"assistant","content":null,"tool_calls":[
		{"id":"call_A","type":"function","function":{"name":"run_code","arguments":"{\"code\": \"print(1)\"}"}},
		{"id":"call_B","type":"function","function":{"name":"run_code","arguments":"{\"code\":\"print(2)\"}"}}],"refusal":null}`, "tool_calls")})
	m, _ := model(t, srv)
	resp, err := m.Generate(context.Background(), ask("1 and 2"))
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{
		{ID: "call_A", Name: "run_code", Args: json.RawMessage(`{"code":"print(1)"}`)},
		{ID: "call_B", Name: "run_code", Args: json.RawMessage(`{"code":"print(2)"}`)},
	}
	if resp.StopReason != llm.StopToolUse || !sameCalls(resp.ToolCalls, want) || resp.Text != "" {
		t.Fatalf("got %+v", resp)
	}
}

func TestConversationRequestShape(t *testing.T) {
	t.Parallel()
	srv := server(t, key)
	srv.Queue(wiretest.Reply{Body: completion(text("Done."), "stop")})
	m, _ := model(t, srv)
	req := llm.Request{
		System: "Be brief.",
		Tools:  []llm.ToolDef{runCode, {Name: "clock", Description: "the time"}},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "run two programs"},
			{Role: llm.RoleAssistant, Content: "Running.", ToolCalls: []llm.ToolCall{
				{ID: "call_A", Name: "run_code", Args: json.RawMessage(`{"code":"print(1)"}`)},
				{ID: "call_B", Name: "run_code", Args: json.RawMessage(`{"code":"1/0"}`)},
				{ID: "call_C", Name: "clock"},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_A", ToolName: "run_code", Content: "1\n"},
			{Role: llm.RoleTool, ToolCallID: "call_B", ToolName: "run_code", Content: "ZeroDivisionError: division by zero", IsError: true},
			{Role: llm.RoleTool, ToolCallID: "call_C", ToolName: "clock", Content: "12:00"},
			{Role: llm.RoleUser, Content: "and now?"},
		},
		MaxTokens: 512,
	}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	wiretest.Golden(t, "conversation", srv.Requests()[0].Body)
}

type streamed struct {
	text  []string
	calls []llm.ToolCall
	done  *llm.Response
}

func drain(t *testing.T, seq func(func(llm.Chunk, error) bool)) streamed {
	t.Helper()
	var s streamed
	for ch, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ch.Done != nil:
			s.done = ch.Done
		case ch.ToolCall != nil:
			s.calls = append(s.calls, *ch.ToolCall)
		default:
			s.text = append(s.text, ch.Text)
		}
	}
	if s.done == nil {
		t.Fatal("no Done chunk")
	}
	return s
}

func TestStreamSplitToolCalls(t *testing.T) {
	t.Parallel()
	for _, split := range []int{0, 5} {
		t.Run(fmt.Sprint("split", split), func(t *testing.T) {
			t.Parallel()
			srv := server(t, key)
			srv.Queue(wiretest.Reply{Stream: true, Split: split, Body: wiretest.Fixture(t, "stream_tool_calls.sse")})
			m, _ := model(t, srv)
			s := drain(t, m.Stream(context.Background(), ask("say hi, then 6*7")))
			want := []llm.ToolCall{
				{ID: "call_DdmO9pD3xa9XTPNJ32zg2hcA", Name: "run_code", Args: json.RawMessage(`{"code":"print(\"hi\")"}`)},
				{ID: "call_Kq8UnaN2i7vZxIVvn7bWR4wd", Name: "run_code", Args: json.RawMessage(`{"code":"print(6*7)"}`)},
			}
			if !slices.Equal(s.text, []string{"Running both."}) || !sameCalls(s.calls, want) || !sameCalls(s.done.ToolCalls, want) {
				t.Fatalf("text %q calls %s done %+v", s.text, s.calls, s.done)
			}
			if s.done.StopReason != llm.StopToolUse || s.done.Usage != (llm.Usage{InputTokens: 82, OutputTokens: 41}) || s.done.Text != "Running both." {
				t.Fatalf("done %+v", s.done)
			}
			body := srv.Requests()[0].JSON(t)
			if body["stream"] != true || body["stream_options"].(map[string]any)["include_usage"] != true {
				t.Fatalf("body %v", body)
			}
		})
	}
}

func TestStreamFromOllamaAndLlamaCpp(t *testing.T) {
	t.Parallel()
	t.Run("ollama: whole calls, all at index 0", func(t *testing.T) {
		t.Parallel()
		srv := server(t, "")
		srv.Queue(wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "ollama_stream_tool_calls.sse")})
		m, _ := model(t, srv, ollama)
		s := drain(t, m.Stream(context.Background(), ask("1 and 2")))
		want := []llm.ToolCall{
			{ID: "call_a1b2c3d4", Name: "run_code", Args: json.RawMessage(`{"code":"print(1)"}`)},
			{ID: "call_e5f6g7h8", Name: "run_code", Args: json.RawMessage(`{"code":"print(2)"}`)},
		}
		if !sameCalls(s.calls, want) || s.done.StopReason != llm.StopToolUse || s.done.Model != "llama3.2" ||
			s.done.Usage != (llm.Usage{InputTokens: 150, OutputTokens: 30}) {
			t.Fatalf("calls %s done %+v", s.calls, s.done)
		}
		if h := srv.Requests()[0].Header.Get("Authorization"); h != "" {
			t.Fatalf("a key was sent to Ollama: %q", h)
		}
		if m.Name() != "ollama:llama3.2" {
			t.Fatalf("name %q", m.Name())
		}
	})
	t.Run("llama-server: arguments in small pieces", func(t *testing.T) {
		t.Parallel()
		srv := server(t, "")
		srv.Queue(wiretest.Reply{Stream: true, Split: 3, Body: wiretest.Fixture(t, "llamacpp_stream_tool_call.sse")})
		m, _ := model(t, srv, func(o *openai.Options) { o.APIKey, o.Model = "", "qwen2.5" })
		s := drain(t, m.Stream(context.Background(), ask("6*7")))
		want := []llm.ToolCall{{ID: "Ab3xYz9QrT", Name: "run_code", Args: json.RawMessage(`{"code":"print(6*7)"}`)}}
		if !sameCalls(s.calls, want) || s.done.StopReason != llm.StopToolUse || s.done.Usage != (llm.Usage{InputTokens: 210, OutputTokens: 18}) {
			t.Fatalf("calls %s done %+v", s.calls, s.done)
		}
	})
}

func TestCollectEqualsGenerate(t *testing.T) {
	t.Parallel()
	srv := server(t, key)
	srv.Queue(wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_text.sse")})
	m, _ := model(t, srv)
	resp, err := llm.Collect(m.Stream(context.Background(), ask("6*7?")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "The answer is 42." || resp.StopReason != llm.StopEnd || resp.Usage != (llm.Usage{InputTokens: 30, OutputTokens: 7}) {
		t.Fatalf("got %+v", resp)
	}
	wiretest.Golden(t, "stream_text", srv.Requests()[0].Body)
}

// The exchange the agent makes, against OpenAI and Ollama, through
// Generate and through Stream.
func TestTwoStepRunCode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		wantKey   string
		edit      func(*openai.Options)
		streaming bool
	}{
		{"openai/generate", key, func(*openai.Options) {}, false},
		{"openai/stream", key, func(*openai.Options) {}, true},
		{"ollama/generate", "", ollama, false},
		{"ollama/stream", "", ollama, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t, c.wantKey)
			if c.streaming {
				srv.Queue(
					wiretest.Reply{Stream: true, Body: toolCallStream("call_R", `{\"code\": \"print(6*7)\"}`)},
					wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_text.sse")})
			} else {
				srv.Queue(
					wiretest.Reply{Body: completion(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_R","type":"function","function":{"name":"run_code","arguments":"{\"code\": \"print(6*7)\"}"}}]}`, "tool_calls")},
					wiretest.Reply{Body: completion(text("The answer is 42."), "stop")})
			}
			m, _ := model(t, srv, c.edit)
			gen := func(req llm.Request) (llm.Response, error) {
				if c.streaming {
					return llm.Collect(m.Stream(context.Background(), req))
				}
				return m.Generate(context.Background(), req)
			}
			req := ask("What is 6*7? Use run_code.")
			first, err := gen(req)
			if err != nil {
				t.Fatal(err)
			}
			if first.StopReason != llm.StopToolUse || len(first.ToolCalls) != 1 || first.ToolCalls[0].Name != "run_code" ||
				string(first.ToolCalls[0].Args) != `{"code":"print(6*7)"}` {
				t.Fatalf("first step: %+v", first)
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
			wiretest.Golden(t, "two_step_"+strings.ReplaceAll(c.name, "/", "_"), srv.Requests()[1].Body)
		})
	}
}

func toolCallStream(id, args string) string {
	head := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1726000000,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":`
	return head + `{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"` + id + `","type":"function","function":{"name":"run_code","arguments":""}}]},"finish_reason":null}]}

` + head + `{"tool_calls":[{"index":0,"function":{"arguments":"` + args + `"}}]},"finish_reason":null}]}

` + head + `{},"finish_reason":"tool_calls"}]}

data: [DONE]

`
}

func TestKeys(t *testing.T) {
	t.Parallel()
	_, err := openai.New(openai.Options{Model: "gpt-4o-mini"})
	if !errors.Is(err, llm.ErrNoAPIKey) || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Fatalf("OpenAI without a key: %v", err)
	}
	if _, err := openai.New(openai.Options{Model: "llama3.2", BaseURL: "http://localhost:11434/v1", Provider: "ollama"}); err != nil {
		t.Fatalf("a local server needs no key: %v", err)
	}
	for _, base := range []string{"localhost:11434", "ftp://x/v1", "http://"} {
		if _, err := openai.New(openai.Options{Model: "m", BaseURL: base}); !errors.Is(err, llm.ErrBadRequest) {
			t.Errorf("base %q: %v", base, err)
		}
	}
	if _, err := openai.New(openai.Options{BaseURL: "http://localhost:8000/v1"}); !errors.Is(err, llm.ErrBadRequest) {
		t.Errorf("no model: %v", err)
	}
}

// The SDK's NewClient would pick up OPENAI_* variables; a local server
// must get neither the key nor the organisation from the environment.
func TestEnvironmentIsNotRead(t *testing.T) {
	srv := server(t, "")
	srv.Queue(wiretest.Reply{Body: completion(text("ok"), "stop")})
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_ORG_ID", "org-secret")
	t.Setenv("OPENAI_BASE_URL", wiretest.ClosedURL(t))
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Leak: yes")
	m, _ := model(t, srv, ollama)
	if _, err := m.Generate(context.Background(), ask("hi")); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	if h.Get("Authorization") != "" || h.Get("OpenAI-Organization") != "" || h.Get("X-Leak") != "" {
		t.Fatalf("headers %v", h)
	}
}

func TestErrorsSayTheFix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		edit   func(*openai.Options)
		reply  *wiretest.Reply
		kind   error
		says   []string
		status int
	}{
		{"refused key", func(o *openai.Options) { o.APIKey = "sk-wrong-0000" }, nil,
			llm.ErrAuth, []string{"OPENAI_API_KEY", "Incorrect API key"}, 401},
		{"openai unknown model", func(o *openai.Options) { o.Model = "gpt-nope" },
			&wiretest.Reply{Status: 404, Body: oaiError("The model `gpt-nope` does not exist or you do not have access to it.", "invalid_request_error", "model_not_found")},
			llm.ErrModelNotFound, []string{`model "gpt-nope"`, "/v1/models"}, 404},
		{"ollama unknown model", func(o *openai.Options) { ollama(o); o.Model = "llama9" },
			&wiretest.Reply{Status: 404, Body: `{"error":{"message":"model \"llama9\" not found, try pulling it first","type":"api_error","param":null,"code":null}}`},
			llm.ErrModelNotFound, []string{"ollama pull llama9", "ollama list"}, 404},
		{"vllm unknown model (top-level error)", func(o *openai.Options) { o.APIKey, o.Provider, o.Model = "", "vllm", "qwen" },
			&wiretest.Reply{Status: 404, Body: `{"object":"error","message":"The model ` + "`qwen`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`},
			llm.ErrModelNotFound, []string{"The model `qwen` does not exist.", "/models"}, 404},
		{"wrong base path", func(o *openai.Options) { o.BaseURL = strings.TrimSuffix(o.BaseURL, "/v1") },
			nil, llm.ErrModelNotFound, []string{"check the base URL", "/v1"}, 404},
		{"server echoes the key", nil,
			&wiretest.Reply{Status: 400, Body: oaiError("bad token "+key, "invalid_request_error", "")},
			llm.ErrBadRequest, []string{"[redacted]"}, 400},
		{"context too long", nil,
			&wiretest.Reply{Status: 400, Body: oaiError("This model's maximum context length is 128000 tokens.", "invalid_request_error", "context_length_exceeded")},
			llm.ErrBadRequest, []string{"maximum context length"}, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wantKey := key
			if strings.HasPrefix(c.name, "ollama") || strings.HasPrefix(c.name, "vllm") {
				wantKey = "" // local servers take no key
			}
			srv := server(t, wantKey)
			if c.reply != nil {
				srv.Queue(*c.reply)
			}
			edits := []func(*openai.Options){}
			if c.edit != nil {
				edits = append(edits, c.edit)
			}
			m, sl := model(t, srv, edits...)
			_, err := m.Generate(context.Background(), ask("hi"))
			if err != nil && (strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "sk-wrong-0000")) {
				t.Fatalf("a key leaked: %v", err)
			}
			var ae *llm.APIError
			if !errors.Is(err, c.kind) || !errors.As(err, &ae) || ae.Status != c.status {
				t.Fatalf("got %v", err)
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

func TestConnectionRefusedSaysStartTheServer(t *testing.T) {
	t.Parallel()
	m, err := openai.New(openai.Options{Model: "llama3.2", Provider: "ollama", BaseURL: wiretest.ClosedURL(t) + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(context.Background(), ask("hi"))
	if !errors.Is(err, llm.ErrUnreachable) || !strings.Contains(err.Error(), "ollama serve") {
		t.Fatalf("got %v", err)
	}
	_, err = llm.Collect(m.Stream(context.Background(), ask("hi")))
	if !errors.Is(err, llm.ErrUnreachable) {
		t.Fatalf("stream: got %v", err)
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	t.Run("429 and 500 then success", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		srv.Queue(
			wiretest.Reply{Status: 429, Header: map[string]string{"Retry-After-Ms": "1500"}, Body: oaiError("Rate limit reached for gpt-4o-mini", "requests", "rate_limit_exceeded")},
			wiretest.Reply{Status: 429, Header: map[string]string{"Retry-After": "2"}, Body: oaiError("Rate limit reached", "requests", "rate_limit_exceeded")},
			wiretest.Reply{Status: 500, Body: oaiError("The server had an error", "server_error", "")},
			wiretest.Reply{Body: completion(text("ok"), "stop")})
		m, sl := model(t, srv)
		resp, err := m.Generate(context.Background(), ask("hi"))
		if err != nil || resp.Text != "ok" {
			t.Fatalf("%+v %v", resp, err)
		}
		w := sl.Waits()
		if len(w) != 3 || w[0] != 1500*time.Millisecond || w[1] != 2*time.Second || w[2] < 1500*time.Millisecond || w[2] > 2*time.Second {
			t.Fatalf("waits %v", w)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		for range 4 {
			srv.Queue(wiretest.Reply{Status: 429, Body: oaiError("Rate limit reached", "requests", "rate_limit_exceeded")})
		}
		m, sl := model(t, srv)
		_, err := m.Generate(context.Background(), ask("hi"))
		var ae *llm.APIError
		if !errors.Is(err, llm.ErrRateLimited) || !errors.As(err, &ae) || ae.Attempts != 4 || len(sl.Waits()) != 3 || srv.Pending() != 0 {
			t.Fatalf("got %v, waits %v", err, sl.Waits())
		}
	})
	t.Run("never", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		srv.Queue(wiretest.Reply{Status: 503, Body: "upstream connect error"})
		m, sl := model(t, srv, func(o *openai.Options) { o.MaxRetries = -1 })
		_, err := m.Generate(context.Background(), ask("hi"))
		if !errors.Is(err, llm.ErrServer) || len(sl.Waits()) != 0 || !strings.Contains(err.Error(), "upstream connect error") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("wait too long", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		srv.Queue(wiretest.Reply{Status: 429, Header: map[string]string{"Retry-After": "90"}, Body: oaiError("quota", "requests", "")})
		m, sl := model(t, srv)
		_, err := m.Generate(context.Background(), ask("hi"))
		if !errors.Is(err, llm.ErrRateLimited) || len(sl.Waits()) != 0 || !strings.Contains(err.Error(), "1m30s") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	t.Run("error event before output is retried", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		srv.Queue(
			wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_error.sse")},
			wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_text.sse")})
		m, sl := model(t, srv)
		resp, err := llm.Collect(m.Stream(context.Background(), ask("hi")))
		if err != nil || resp.Text != "The answer is 42." || len(sl.Waits()) != 1 {
			t.Fatalf("%+v %v", resp, err)
		}
	})
	t.Run("error event after output is returned", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		body := strings.Join(strings.SplitAfter(wiretest.Fixture(t, "stream_text.sse"), "\n\n")[:2], "") +
			"data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n"
		srv.Queue(wiretest.Reply{Stream: true, Body: body})
		m, sl := model(t, srv)
		var got string
		var err error
		for ch, e := range m.Stream(context.Background(), ask("hi")) {
			if e != nil {
				err = e
				break
			}
			got += ch.Text
		}
		if got != "The answer" || !errors.Is(err, llm.ErrServer) || len(sl.Waits()) != 0 {
			t.Fatalf("text %q err %v", got, err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		srv.Queue(wiretest.Reply{Stream: true, Body: wiretest.Fixture(t, "stream_truncated.sse")})
		m, _ := model(t, srv)
		if _, err := llm.Collect(m.Stream(context.Background(), ask("hi"))); !errors.Is(err, llm.ErrIncomplete) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("malformed arguments", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		srv.Queue(wiretest.Reply{Stream: true, Body: toolCallStream("call_X", `{\"code\": \"oops`)})
		m, _ := model(t, srv)
		_, err := llm.Collect(m.Stream(context.Background(), ask("hi")))
		if !errors.Is(err, llm.ErrBadToolCall) || !strings.Contains(err.Error(), "run_code") || strings.Contains(err.Error(), "oops") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("not an OpenAI server", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
		srv.Queue(wiretest.Reply{Header: map[string]string{"Content-Type": "text/html"}, Body: "<html>hello</html>"})
		m, _ := model(t, srv)
		_, err := m.Generate(context.Background(), ask("hi"))
		if !errors.Is(err, llm.ErrProtocol) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestCancellationStopsAtOnce(t *testing.T) {
	t.Parallel()
	t.Run("generate", func(t *testing.T) {
		t.Parallel()
		srv := server(t, key)
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
		srv := server(t, key)
		first := strings.Join(strings.SplitAfter(wiretest.Fixture(t, "stream_text.sse"), "\n\n")[:2], "")
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
		srv := server(t, key)
		first := strings.Join(strings.SplitAfter(wiretest.Fixture(t, "stream_text.sse"), "\n\n")[:2], "")
		srv.Queue(wiretest.Reply{Stream: true, Hold: true, Body: first})
		m, _ := model(t, srv)
		for range m.Stream(context.Background(), ask("hi")) {
			break
		}
		wiretest.Wait(t, srv.Gone, "the client to hang up")
	})
}

func TestBadRequestsAreRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	srv := server(t, key)
	m, _ := model(t, srv)
	for name, req := range map[string]llm.Request{
		"schema not an object": {Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}},
			Tools: []llm.ToolDef{{Name: "t", InputSchema: json.RawMessage(`[]`)}}},
		"result without id": {Messages: []llm.Message{{Role: llm.RoleTool, Content: "x"}}},
		"unknown role":      {Messages: []llm.Message{{Role: "developer", Content: "x"}}},
		"bad stored args": {Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "a", Name: "t", Args: json.RawMessage(`nope`)}}}}},
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

// A request that withholds tool calls still describes the tools and sets
// the tool choice to none.
func TestNoToolCallsSetsToolChoiceNone(t *testing.T) {
	t.Parallel()
	srv := server(t, key)
	srv.Queue(wiretest.Reply{Body: completion(text("Done."), "stop")})
	m, _ := model(t, srv)
	req := ask("wrap up")
	req.Tools, req.NoToolCalls = []llm.ToolDef{runCode}, true
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	body := srv.Requests()[0].JSON(t)
	if tools, _ := body["tools"].([]any); len(tools) != 1 || body["tool_choice"] != "none" {
		t.Fatalf("tools %v, tool_choice %v", body["tools"], body["tool_choice"])
	}
}

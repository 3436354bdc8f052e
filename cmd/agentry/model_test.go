package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/llm"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseModel(t *testing.T) {
	t.Parallel()
	full := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-k3y-secret", "OPENAI_API_KEY": "sk-openai-k3y-secret"}
	cases := []struct {
		spec string
		env  map[string]string
		name string   // the model's Name(); "" with no error: scripted
		errs []string // the usage error says these
		kind error
	}{
		{spec: "scripted"},
		{spec: "anthropic:claude-sonnet-4-5", env: full, name: "anthropic:claude-sonnet-4-5"},
		{spec: "Anthropic:claude-sonnet-4-5", env: full, name: "anthropic:claude-sonnet-4-5"},
		{spec: "openai:gpt-4o-mini", env: full, name: "openai:gpt-4o-mini"},
		{spec: "openai:Qwen/Qwen2.5-7B-Instruct", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:8000/v1"}, name: "openai:Qwen/Qwen2.5-7B-Instruct"},
		{spec: "ollama:llama3.2", name: "ollama:llama3.2"},
		{spec: "ollama:qwen2.5-coder:7b", name: "ollama:qwen2.5-coder:7b"},
		{spec: "ollama:llama3.2", env: map[string]string{"OLLAMA_HOST": "gpu-box:11434"}, name: "ollama:llama3.2"},

		{spec: "", errs: []string{"use scripted, anthropic:MODEL"}},
		{spec: "gpt-4o", errs: []string{`"gpt-4o"`, "openai:MODEL"}},
		{spec: "anthropic:", errs: []string{"names no model", "anthropic:MODEL"}},
		{spec: "gemini:pro", errs: []string{`unknown provider "gemini"`}},
		{spec: "scripted:calc", errs: []string{"takes no model name"}},
		{spec: "openai:gpt 4o", errs: []string{"no spaces"}},
		{spec: "openai:gpt\x1b[2J", errs: []string{"control characters"}},
		{spec: "anthropic:claude-sonnet-4-5", errs: []string{"ANTHROPIC_API_KEY"}, kind: llm.ErrNoAPIKey},
		{spec: "openai:gpt-4o-mini", errs: []string{"OPENAI_API_KEY", "OPENAI_BASE_URL"}, kind: llm.ErrNoAPIKey},
		{spec: "openai:m", env: map[string]string{"OPENAI_BASE_URL": "localhost:8000"}, errs: []string{"base URL"}, kind: llm.ErrBadRequest},
		{spec: "anthropic:m", env: map[string]string{"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "nope"}, errs: []string{"base URL"}, kind: llm.ErrBadRequest},
		{spec: "ollama:m", env: map[string]string{"OLLAMA_HOST": "ftp://x"}, errs: []string{"OLLAMA_HOST"}},
	}
	for _, c := range cases {
		m, err := parseModel(c.spec, envOf(c.env))
		if c.errs != nil {
			if exitCode(err) != 2 || m != nil {
				t.Errorf("%q: want a usage error, got %v, %v", c.spec, m, err)
				continue
			}
			for _, s := range c.errs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q: %q does not say %q", c.spec, err, s)
				}
			}
			if c.kind != nil && !errors.Is(err, c.kind) {
				t.Errorf("%q: %v is not %v", c.spec, err, c.kind)
			}
			if strings.Contains(err.Error(), "secret") || strings.ContainsRune(err.Error(), '\x1b') {
				t.Errorf("%q: error shows too much: %q", c.spec, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if got := llm.NameOf(m); got != c.name {
			t.Errorf("%q: model %q, want %q", c.spec, got, c.name)
		}
	}
}

func TestOllamaBaseURL(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]string{
		"":                        "http://localhost:11434/v1",
		"127.0.0.1":               "http://127.0.0.1:11434/v1",
		"0.0.0.0":                 "http://localhost:11434/v1",
		"0.0.0.0:12345":           "http://localhost:12345/v1",
		":11500":                  "http://localhost:11500/v1",
		"gpu-box:11434":           "http://gpu-box:11434/v1",
		"[::1]:9000":              "http://[::1]:9000/v1",
		"[::]":                    "http://localhost:11434/v1",
		"http://gpu-box":          "http://gpu-box:80/v1",
		"https://ollama.example":  "https://ollama.example:443/v1",
		"https://h.example/proxy": "https://h.example:443/proxy/v1",
		"http://h:8080/ollama/v1": "http://h:8080/ollama/v1",
		"  localhost:11434/  ":    "http://localhost:11434/v1",
	} {
		got, err := ollamaBaseURL(host)
		if err != nil || got != want {
			t.Errorf("OLLAMA_HOST=%q: got %q, %v; want %q", host, got, err, want)
		}
	}
	for _, host := range []string{"ftp://h", "h:99999", "h:0", "h:port", "http://u:p@h", "h?x=1", "mailto:x", "http://h#f"} {
		if got, err := ollamaBaseURL(host); err == nil {
			t.Errorf("OLLAMA_HOST=%q accepted as %q", host, got)
		}
	}
}

// recorder is a minimal server of each wire format, enough to show where
// a parsed model sends its requests and with which credentials.
type recorder struct {
	mu   sync.Mutex
	seen []*http.Request
}

func (rc *recorder) handler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	rc.mu.Lock()
	rc.seen = append(rc.seen, r)
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if strings.HasSuffix(r.URL.Path, "/v1/messages") {
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
		return
	}
	_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
}

func TestParsedModelsReachTheirEndpoints(t *testing.T) {
	t.Parallel()
	var rc recorder
	srv := httptest.NewServer(http.HandlerFunc(rc.handler))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	cases := []struct {
		spec     string
		env      map[string]string
		path     string
		wantAuth bool
	}{
		{"anthropic:claude-x", map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "ANTHROPIC_BASE_URL": srv.URL}, "/v1/messages", true},
		{"openai:qwen", map[string]string{"OPENAI_API_KEY": "sk-2", "OPENAI_BASE_URL": srv.URL + "/v1"}, "/v1/chat/completions", true},
		{"openai:qwen", map[string]string{"OPENAI_BASE_URL": srv.URL + "/v1"}, "/v1/chat/completions", false},
		// OPENAI_API_KEY is set, and Ollama must not get it.
		{"ollama:llama3.2", map[string]string{"OPENAI_API_KEY": "sk-3", "OLLAMA_HOST": u.Host}, "/v1/chat/completions", false},
	}
	for i, c := range cases {
		m, err := parseModel(c.spec, envOf(c.env))
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		resp, err := m.Generate(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
		if err != nil || resp.Text != "ok" {
			t.Fatalf("%s: %+v %v", c.spec, resp, err)
		}
		rc.mu.Lock()
		r := rc.seen[i]
		rc.mu.Unlock()
		auth := r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != ""
		if r.URL.Path != c.path || auth != c.wantAuth {
			t.Errorf("%s: %s, credentials sent: %v", c.spec, r.URL.Path, auth)
		}
	}
}

func TestModelHelpNamesTheVariables(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"scripted", "anthropic:MODEL", "openai:MODEL", "ollama:MODEL",
		"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OLLAMA_HOST"} {
		if !strings.Contains(modelHelp, v) {
			t.Errorf("modelHelp does not mention %s", v)
		}
	}
}

// Any spec gives a model named after it, the scripted default, or a usage
// error; no spec makes it panic or echo a key.
func FuzzParseModel(f *testing.F) {
	for _, s := range []string{"scripted", "anthropic:claude-sonnet-4-5", "openai:gpt-4o", "ollama:llama3.2:3b",
		"", ":", "ollama:", "x:y", "openai:a b", "OLLAMA:Q", "anthropic:\u00e9\u2028"} {
		f.Add(s, "gpu:11434")
	}
	f.Add("ollama:m", "http://[::1")
	f.Add("ollama:m", "https://h:65536/p")
	f.Fuzz(func(t *testing.T, spec, host string) {
		env := envOf(map[string]string{"ANTHROPIC_API_KEY": "sk-ant-FUZZKEY", "OPENAI_API_KEY": "sk-FUZZKEY", "OLLAMA_HOST": host})
		m, err := parseModel(spec, env)
		switch {
		case err != nil:
			if exitCode(err) != 2 || m != nil {
				t.Fatalf("%q: %v (exit %d)", spec, err, exitCode(err))
			}
			if strings.Contains(err.Error(), "FUZZKEY") {
				t.Fatalf("key in %q", err)
			}
		case m == nil:
			if spec != "scripted" {
				t.Fatalf("%q: nil model", spec)
			}
		default:
			provider, name, _ := strings.Cut(spec, ":")
			if want := strings.ToLower(strings.TrimSpace(provider)) + ":" + name; llm.NameOf(m) != want {
				t.Fatalf("%q: named %q", spec, llm.NameOf(m))
			}
		}
	})
}

// OLLAMA_HOST always becomes an http(s) URL ending in /v1, or is refused.
func FuzzOllamaBaseURL(f *testing.F) {
	for _, s := range []string{"", "0.0.0.0", ":1", "[::1]:9", "http://h", "https://h/p/", "h:99999", "http://[::1", "h/v1/v1", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got, err := ollamaBaseURL(host)
		if err != nil {
			if !utf8.ValidString(err.Error()) && utf8.ValidString(host) {
				t.Fatalf("message mangled: %q", err)
			}
			return
		}
		u, perr := url.Parse(got)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" || !strings.HasSuffix(u.Path, "/v1") {
			t.Fatalf("OLLAMA_HOST=%q gave %q", host, got)
		}
	})
}

package main

import (
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// TestServeTwoAgentProfiles starts the built binary from docs/acp.md's
// two-profile file as written (its model server's address put in place
// of the recipe's): Claude Code (claude-agent-acp from npm, jailed) and
// agentry's own agent answer a turn each, side by side, and a person
// picks the agent and the model when opening a conversation.
func TestServeTwoAgentProfiles(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	agentCmd := claudeAgentACP(t)
	bin := binary(t)
	dir, events := agentDir(t)

	var mu sync.Mutex
	var models []string // the model each request named
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-offline", Script: func(turn modelwire.Turn) modelwire.Reply {
		mu.Lock()
		models = append(models, turn.Model)
		mu.Unlock()
		return modelwire.Reply{Text: "Claude Code answers."}
	}})
	defer model.Close()
	u, _ := url.Parse(model.URL)

	var block string
	for _, b := range tomlBlocks(t, filepath.Join("..", "..", "docs", "acp.md")) {
		if strings.Contains(b, "[agents.claude]") && strings.Contains(b, "[agents.native]") {
			block = b
		}
	}
	if block == "" {
		t.Fatal("docs/acp.md holds no file with the claude and native profiles")
	}
	block = strings.ReplaceAll(block, "http://127.0.0.1:8081", model.URL)
	block = strings.ReplaceAll(block, "127.0.0.1:8081", u.Host)
	block = strings.ReplaceAll(block, "/var/cache/agentry/claude-agent-acp/node_modules/.bin/claude-agent-acp", agentCmd)
	block = strings.ReplaceAll(block, "/srv/agentry/workspaces", filepath.Join(dir, "workspaces"))
	conf := writeFile(t, dir, "agentry.toml", block)
	if out, err := execute(t, "config", "check", conf); err != nil {
		t.Fatalf("config check: %v\n%s", err, out)
	}

	p := startServeBinary(t, bin, []string{"ANTHROPIC_API_KEY=sk-ant-offline"}, "--config", conf, "--runner", "jail",
		"--store", filepath.Join(dir, "agentry.db"), "--events", events)

	code, body := p.call(t, "GET", "/v1/agents", "")
	if code != 200 || !strings.Contains(string(body), `{"name":"claude","provider":"acp","default":true,"models":["sonnet","opus","haiku"]}`) ||
		!strings.Contains(string(body), `{"name":"native","provider":"agentry-native","models":[]}`) {
		t.Fatalf("GET /v1/agents: %d %s", code, body)
	}
	open := func(req string) string {
		t.Helper()
		code, body := p.call(t, "POST", "/v1/sessions", req)
		if code != 201 {
			t.Fatalf("open %s: %d %s\n%s", req, code, body, p.stderr)
		}
		var s struct{ SessionID, Agent, Model string }
		_ = json.Unmarshal(body, &s)
		return s.SessionID
	}
	say := func(id, msg string) string {
		t.Helper()
		m, _ := json.Marshal(map[string]string{"message": msg})
		code, body := p.call(t, "POST", "/v1/sessions/"+id+"/turns", string(m))
		if code != 200 {
			t.Fatalf("turn: %d %s\n%s", code, body, p.stderr)
		}
		var out struct{ Output string }
		_ = json.Unmarshal(body, &out)
		return out.Output
	}

	// The default agent is Claude Code; the person chose opus.
	claude := open(`{"model":"opus"}`)
	if out := say(claude, "Hello there."); !strings.Contains(out, "Claude Code answers.") {
		t.Fatalf("claude's answer: %q\n%s", out, p.stderr)
	}
	mu.Lock()
	asked := strings.Join(models, " ")
	mu.Unlock()
	if !strings.Contains(asked, "opus") {
		t.Fatalf("the chosen model did not reach the model server: %q", asked)
	}
	// agentry's own agent, beside it, runs its code in the jail.
	native := open(`{"agent":"native"}`)
	if out := say(native, "print(6*7)"); out != "42" {
		t.Fatalf("native's answer: %q", out)
	}
	for req, want := range map[string]string{
		`{"agent":"codex"}`:                  `"code":"unknown_agent"`,
		`{"agent":"claude","model":"gpt-5"}`: `"code":"model_not_offered"`,
		`{"agent":"native","model":"opus"}`:  `offers no choice of model`,
	} {
		code, body := p.call(t, "POST", "/v1/sessions", req)
		if code != 400 || !strings.Contains(string(body), want) {
			t.Fatalf("open %s: %d %s", req, code, body)
		}
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, p.stderr)
	}
	if out, err := execute(t, "events", "audit", events); err != nil {
		t.Fatalf("events audit: %v\n%s", err, out)
	}
}

//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// The standing-rules bar with a real agent: claude-agent-acp, jailed,
// served by the built binary. A person approves Claude Code's Bash
// permission request with a command rule; the next turn's identical
// request is answered by the host (the agent's allow_once, a turn-log
// entry naming the rule); once revoked, the question comes back.
func TestServeClaudeAgentACPRule(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	agentCmd := claudeAgentACP(t)
	bin := binary(t)
	dir, events := agentDir(t)

	agent := &scriptedAgent{marker: "Bash", steps: []func(modelwire.Turn) modelwire.Reply{
		func(modelwire.Turn) modelwire.Reply {
			return callTool("Bash", map[string]any{"command": "touch made-by-rule.txt", "description": "make a file"})
		},
	}}
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-offline", Script: agent.script})
	defer model.Close()
	p := startServeBinary(t, bin, claudeOfflineEnv(model.URL), claudeServeArgs(agentCmd, model.URL, dir,
		"--store", filepath.Join(dir, "agentry.db"), "--events", events)...)

	code, body := p.call(t, "POST", "/v1/sessions", "")
	if code != 201 {
		t.Fatalf("open: %d %s\n%s", code, body, p.stderr)
	}
	var s struct{ SessionID string }
	_ = json.Unmarshal(body, &s)
	turn := func() (int, map[string]any) {
		t.Helper()
		code, body := p.call(t, "POST", "/v1/sessions/"+s.SessionID+"/turns", `{"message":"make the file"}`)
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		return code, m
	}
	decide := func(d string) map[string]any {
		t.Helper()
		code, body := p.call(t, "POST", "/v1/sessions/"+s.SessionID+"/decision", d)
		if code != 200 {
			t.Fatalf("decision %s: %d %s\n%s", d, code, body, p.stderr)
		}
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		return m
	}

	code, m := turn()
	if code != 202 {
		t.Fatalf("first turn: %d %v\n%s", code, m, p.stderr)
	}
	t.Logf("asked: %v", m["awaiting"])
	m = decide(`{"approve":true,"rule":{"scope":"everywhere","match":"command","pattern":"touch *"}}`)
	rule, _ := m["rule"].(map[string]any)
	id, _ := rule["id"].(string)
	if id == "" || !strings.Contains(m["output"].(string), "All done.") {
		t.Fatalf("the approval with a rule: %v", m)
	}

	// The second identical request: no person.
	code, m = turn()
	if code != 200 || !strings.Contains(m["output"].(string), "All done.") {
		t.Fatalf("second turn, answered by the rule: %d %v\n%s", code, m, p.stderr)
	}
	_, body = p.call(t, "GET", "/v1/sessions/"+s.SessionID+"/turns", "")
	if !strings.Contains(string(body), `"rule":"`+id+`"`) {
		t.Fatalf("the turn log does not name the rule: %s", body)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*", "made-by-rule.txt")); len(matches) != 1 {
		t.Fatalf("the approved command's file: %v", matches)
	}

	// Revoked: asked again.
	if code, body := p.call(t, "DELETE", "/v1/rules/"+id, ""); code != 204 {
		t.Fatalf("revoking: %d %s", code, body)
	}
	if code, m = turn(); code != 202 {
		t.Fatalf("after revoking: %d %v", code, m)
	}
	decide(`{"approve":false}`)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, p.stderr)
	}
	b, _ := os.ReadFile(events)
	if !strings.Contains(string(b), `"agentry.host.rule_applied"`) {
		t.Error("no rule_applied event in the events file")
	}
}

//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// The warm pool when the host lends tools, through the built binary:
// with `--agent-pool 1 --lend run_code`, the pooled Claude Code session is
// opened ahead with the host-tools server listing run_code (its
// agent_pooled event names it); a new conversation takes that session as
// it is (agent_taken, nothing reopened) and its run_code call over MCP
// answers 42 through the server given ahead; the events file audits clean.
func TestServeClaudeAgentACPPooledLending(t *testing.T) {
	agentCmd := claudeAgentACP(t)
	bin := binary(t)
	dir, events := agentDir(t)
	agent := &scriptedAgent{marker: "Write", steps: []func(modelwire.Turn) modelwire.Reply{
		func(modelwire.Turn) modelwire.Reply {
			return callTool("mcp__agentry__run_code", map[string]any{"code": "print(6*7)"})
		},
	}}
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-offline", Script: agent.script})
	defer model.Close()
	host := strings.TrimPrefix(model.URL, "http://")
	p := startServeBinary(t, bin, append(claudeOfflineEnv(model.URL), "CLAUDE_CODE_EXECUTABLE="+claudeRecipeCLI),
		"--agent", "acp", "--agent-cmd", agentCmd, "--agent-home", claudeHome(t, agentCmd),
		"--agent-env", "ANTHROPIC_BASE_URL", "--agent-env", "ANTHROPIC_API_KEY",
		"--agent-env", "DISABLE_TELEMETRY", "--agent-env", "DISABLE_AUTOUPDATER",
		"--agent-env", "DISABLE_ERROR_REPORTING", "--agent-env", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
		"--agent-env", "CLAUDE_CODE_EXECUTABLE", "--agent-allow-host", host, "--agent-mode", "default",
		"--agent-pool", "1", "--lend", "run_code", "--runner", "jail",
		"--workspaces", filepath.Join(dir, "workspaces"),
		"--store", filepath.Join(dir, "agentry.db"), "--events", events)

	// An agent waits in the pool, its session listing run_code.
	deadline := time.Now().Add(3 * time.Minute)
	for !eventLine(events, `"agentry.acp.agent_pooled"`, `"hostTools":["run_code"]`) {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(events)
			t.Fatalf("no pooled agent lists run_code:\n%s\n%s", b, p.stderr)
		}
		time.Sleep(200 * time.Millisecond) // polling a file another process writes
	}

	body, _ := approvedTurn(t, p, "Run the code.")
	if !strings.Contains(string(body), "All done.") {
		t.Fatalf("the turn did not end with the model's answer: %s\nmodel saw: %q\n%s", body, agent.results(), p.stderr)
	}
	if seen := strings.Join(agent.results(), "\n"); !strings.Contains(seen, "42") {
		t.Fatalf("the lent run_code's result did not reach the model: %q", seen)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, p.stderr)
	}
	// The events file is complete once serve has stopped.
	if !eventLine(events, `"agentry.acp.agent_taken"`) || eventLine(events, `"agentry.acp.agent_taken"`, `"reopened"`) {
		b, _ := os.ReadFile(events)
		t.Fatalf("want one agent_taken that kept the session opened ahead:\n%s", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "events", "audit", events).CombinedOutput(); err != nil {
		t.Errorf("agentry events audit: %v\n%s", err, out)
	}
}

// eventLine reports whether a line of the events file holds every one of
// parts.
func eventLine(events string, parts ...string) bool {
	b, _ := os.ReadFile(events)
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(line, part)
		}
		if all {
			return true
		}
	}
	return false
}

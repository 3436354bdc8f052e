//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// A conversation with a real Claude Code (claude-agent-acp) outlives a
// restart of `agentry serve`: after one turn serve stops, a new serve on
// the same store takes the conversation's next turn, reopening the agent's
// session from the stored binding. claude-agent-acp offers session/load,
// but its memory of a session is in its HOME, which the jail keeps in
// memory and drops with the process; so it refuses the load, and the
// conversation goes on in a new agent session: the agent is told its
// memory is new (a note the model sees before the person's words), the
// person too (an activity in the transcript), and the transcript holds
// both turns. (Resuming the agent's own memory across a restart needs its
// HOME to outlive the jail: not done.)
func TestServeClaudeAgentACPSurvivesRestart(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	agentCmd := claudeAgentACP(t)
	bin := binary(t)
	dir, events := agentDir(t)

	var mu sync.Mutex
	var asked [][]string
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-offline", Script: func(turn modelwire.Turn) modelwire.Reply {
		if !strings.Contains(turn.Asked, "turn") {
			return modelwire.Reply{Text: "Offline test"} // a title, a summary
		}
		mu.Lock()
		asked = append(asked, turn.AskedParts)
		mu.Unlock()
		return modelwire.Reply{Text: "Answered: " + turn.AskedParts[len(turn.AskedParts)-1]}
	}})
	defer model.Close()
	args := claudeServeArgs(agentCmd, model.URL, dir, "--store", filepath.Join(dir, "agentry.db"), "--events", events)

	p := startServeBinary(t, bin, claudeOfflineEnv(model.URL), args...)
	code, body := p.call(t, "POST", "/v1/sessions", "")
	if code != 201 {
		t.Fatalf("open: %d %s\n%s", code, body, p.stderr)
	}
	var s struct{ SessionID string }
	_ = json.Unmarshal(body, &s)
	say := func(p *process, msg string) string {
		b, _ := json.Marshal(map[string]string{"message": msg})
		code, body := p.call(t, "POST", "/v1/sessions/"+s.SessionID+"/turns", string(b))
		if code != 200 {
			t.Fatalf("turn %q: %d %s\n%s", msg, code, body, p.stderr)
		}
		return string(body)
	}
	if got := say(p, "first turn"); !strings.Contains(got, "Answered: first turn") {
		t.Fatalf("first turn: %s", got)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, p.stderr)
	}

	p2 := startServeBinary(t, bin, claudeOfflineEnv(model.URL), args...)
	if got := say(p2, "second turn"); !strings.Contains(got, "Answered: second turn") {
		t.Fatalf("second turn, after the restart: %s\n%s", got, p2.stderr)
	}
	mu.Lock()
	last := strings.Join(asked[len(asked)-1], " | ")
	mu.Unlock()
	if !strings.Contains(last, "you do not remember it") {
		t.Errorf("the agent was not told its memory is new; the model was asked %q", last)
	}
	code, body = p2.call(t, "GET", "/v1/sessions/"+s.SessionID+"/messages", "")
	if code != 200 || !strings.Contains(string(body), "first turn") || !strings.Contains(string(body), "second turn") {
		t.Errorf("the transcript after the restart: %d %s", code, body)
	}
	if !strings.Contains(string(body), "memory of this conversation is new") || !strings.Contains(string(body), "transcript is kept") {
		t.Errorf("the person was not told the agent's memory is new: %s", body)
	}
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p2.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, p2.stderr)
	}
	b, _ := os.ReadFile(events)
	if !strings.Contains(string(b), `"agentry.acp.session_afresh"`) {
		t.Errorf("no session_afresh event:\n%s", b)
	}
}

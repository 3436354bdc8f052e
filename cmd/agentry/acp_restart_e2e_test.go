//go:build linux

package main

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// A conversation with a real Claude Code (claude-agent-acp) outlives a
// restart of `agentry serve` with its memory: after one turn serve stops,
// and a new serve on the same store takes the conversation's next turn,
// reopening the agent's session from the stored binding (session/load).
// The agent keeps its record of the session under ~/.claude/projects, and
// its HOME is kept beside the conversation's workspace, so the load finds
// it: the model's request for the second turn holds the first turn, its
// answer included, and nothing says the agent's memory is new. Closing
// the conversation removes the workspace and the HOME.
func TestServeClaudeAgentACPSurvivesRestart(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	claudeSurvivesRestart(t)
}

// The same with a pool (--agent-pool 1): the conversation takes a
// pooled agent, whose HOME lies beside its pool workspace and goes with
// it to the conversation; after the restart the agent, started cold in
// that workspace, loads the session from that HOME.
func TestServePooledClaudeAgentACPSurvivesRestart(t *testing.T) {
	t.Parallel()
	claudeSurvivesRestart(t, "--agent-pool", "1")
}

// claudeSurvivesRestart runs resumesAfterRestart for claude-agent-acp
// on a serve given more arguments, and looks for the agent's record of
// its session under ~/.claude/projects in the kept HOME.
func claudeSurvivesRestart(t *testing.T, more ...string) {
	t.Helper()
	agentCmd := claudeAgentACP(t)
	bin := binary(t)
	dir, events := agentDir(t)
	var rs restartScript
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-offline", Script: rs.script})
	defer model.Close()
	args := claudeServeArgs(agentCmd, model.URL, dir, append(more, "--store", filepath.Join(dir, "agentry.db"), "--events", events)...)
	resumesAfterRestart(t, bin, claudeOfflineEnv(model.URL), args, dir, events, &rs, model.Requests, func(home string) {
		if got, _ := filepath.Glob(filepath.Join(home, ".claude", "projects", "*", "*.jsonl")); len(got) == 0 {
			t.Errorf("the agent kept no record of its session under ~/.claude/projects in its HOME")
		}
	})
}

// The same for Codex (codex-acp offers session/load: Codex keeps its
// threads under ~/.codex/sessions, in the kept HOME).
func TestServeCodexACPSurvivesRestart(t *testing.T) {
	t.Parallel()
	bin := npmAgent(t, codexACPEnv, defaultCodexACP, "codex-acp", codexACPPackage)
	agentCmd := "node " + filepath.Join(filepath.Dir(filepath.Dir(bin)), "@agentclientprotocol", "codex-acp", "dist", "index.js")
	agentry := binary(t)
	dir, events := agentDir(t)
	var rs restartScript
	const key = "sk-offline-codex"
	model := modelwire.NewResponses(modelwire.Options{APIKey: key, Script: rs.script})
	defer model.Close()
	u, _ := url.Parse(model.URL)
	tmpl := filepath.Join(dir, "home")
	writeTemplate(t, tmpl, ".codex/config.toml", codexHome(model.URL+"/v1"))
	args := []string{"--agent", "acp", "--agent-cmd", agentCmd,
		"--agent-env", "OPENAI_API_KEY", "--agent-env", "PATH", "--agent-auth", "api-key",
		"--agent-home", tmpl, "--agent-mode", "read-only", "--agent-allow-host", u.Host,
		"--workspaces", filepath.Join(dir, "workspaces"),
		"--store", filepath.Join(dir, "agentry.db"), "--events", events}
	resumesAfterRestart(t, agentry, []string{"OPENAI_API_KEY=" + key}, args, dir, events, &rs, model.Requests, func(home string) {
		if got, _ := filepath.Glob(filepath.Join(home, ".codex", "sessions", "*")); len(got) == 0 {
			t.Errorf("the agent kept no record of its session under ~/.codex/sessions in its HOME")
		}
	})
}

// restartScript is a model that answers each of the person's turns
// ("… turn") with "Answered: <their words>", and anything else (a title,
// a summary) with a fixed text.
type restartScript struct {
	mu    sync.Mutex
	asked [][]string
}

func (r *restartScript) script(turn modelwire.Turn) modelwire.Reply {
	if !strings.Contains(turn.Asked, "turn") {
		return modelwire.Reply{Text: "Offline test"}
	}
	r.mu.Lock()
	r.asked = append(r.asked, turn.AskedParts)
	r.mu.Unlock()
	return modelwire.Reply{Text: "Answered: " + turn.AskedParts[len(turn.AskedParts)-1]}
}

func (r *restartScript) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.asked) == 0 {
		return ""
	}
	return strings.Join(r.asked[len(r.asked)-1], " | ")
}

// resumesAfterRestart opens a conversation on a serve of the built binary
// bin (env, args; its workspaces under dir/workspaces), takes a turn,
// restarts serve, takes a second turn and checks that the agent resumed
// its session with its memory: the model's request for the second turn
// holds the first turn and its answer, no one is told the agent's memory
// is new, no session_afresh event. The agent's HOME is kept beside the
// conversation's workspace (0700), and closing the conversation removes
// both; checkHome looks into the HOME before the close.
func resumesAfterRestart(t *testing.T, bin string, env, args []string, dir, events string, rs *restartScript, requests func() []modelwire.Request, checkHome func(home string)) {
	t.Helper()
	p := startServeBinary(t, bin, env, args...)
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
	stop := func(p *process) {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.wait(); err != nil {
			t.Fatalf("serve did not stop cleanly: %v\n%s", err, p.stderr)
		}
	}
	if got := say(p, "first turn"); !strings.Contains(got, "Answered: first turn") {
		t.Fatalf("first turn: %s\n%s", got, p.stderr)
	}
	stop(p)

	wsRoot := filepath.Join(dir, "workspaces")
	// The HOME lies beside the workspace the conversation's directory
	// leads to (a pooled agent's workspace, when it took one).
	ws, err := filepath.EvalSymlinks(conversationWorkspace(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if pooled := strings.HasPrefix(filepath.Base(ws), "pool-"); pooled != slices.Contains(args, "--agent-pool") {
		t.Fatalf("the conversation's workspace is %s; a pooled agent's: %v", ws, pooled)
	}
	homes, _ := filepath.Glob(filepath.Join(wsRoot, "*.home"))
	if len(homes) != 1 || homes[0] != ws+".home" {
		t.Fatalf("the agent's kept HOMEs: %v; want the one beside %s", homes, ws)
	}
	if fi, err := os.Stat(homes[0]); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the kept HOME: %v %v; want mode 0700", fi, err)
	}

	p2 := startServeBinary(t, bin, env, args...)
	if got := say(p2, "second turn"); !strings.Contains(got, "Answered: second turn") {
		t.Fatalf("second turn, after the restart: %s\n%s", got, p2.stderr)
	}
	if last := rs.last(); strings.Contains(last, "you do not remember it") {
		t.Errorf("the agent was told its memory is new; the model was asked %q", last)
	}
	// The model's request for the second turn carries the first: the
	// person's words and the agent's answer, from the loaded session.
	var second string
	for _, r := range requests() {
		if strings.Contains(string(r.Body), "second turn") {
			second = string(r.Body)
		}
	}
	if !strings.Contains(second, "first turn") || !strings.Contains(second, "Answered: first turn") {
		t.Errorf("the model's request for the second turn does not hold the first turn: %.3000s", second)
	}
	code, body = p2.call(t, "GET", "/v1/sessions/"+s.SessionID+"/messages", "")
	if code != 200 || !strings.Contains(string(body), "first turn") || !strings.Contains(string(body), "second turn") {
		t.Errorf("the transcript after the restart: %d %s", code, body)
	}
	if strings.Contains(string(body), "memory of this conversation is new") {
		t.Errorf("the person was told the agent's memory is new: %s", body)
	}
	checkHome(homes[0])
	// Closing the conversation removes its workspace and the agent's
	// HOME; stopping serve, the agents left waiting in a pool and theirs.
	if code, body := p2.call(t, "DELETE", "/v1/sessions/"+s.SessionID, ""); code != 204 && code != 200 {
		t.Fatalf("close: %d %s", code, body)
	}
	for _, p := range []string{ws, ws + ".home"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("closing the conversation left %s", p)
		}
	}
	stop(p2)
	if left, _ := os.ReadDir(wsRoot); len(left) != 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("the closed conversation and the stopped serve left %v in the workspaces directory", names)
	}
	b, _ := os.ReadFile(events)
	if strings.Contains(string(b), `"agentry.acp.session_afresh"`) {
		t.Errorf("the conversation went on afresh after the restart:\n%s", b)
	}
}

//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/jail"
)

// scriptedACPAgent is the smallest agent the ACP adapter can open a
// session with: newline-delimited JSON-RPC on stdio, answering
// initialize, session/new and session/prompt, and refusing the rest.
const scriptedACPAgent = `#!/usr/bin/python3
import json, sys
def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    method, rid = msg["method"], msg["id"]
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": msg["params"]["sessionId"],
              "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hello"}}}})
        send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not scripted: " + method}})
`

// The bar (#19, item 2): serve with live jailed ACP agents is
// killed with SIGKILL; the agents die with it, but their cells (each with
// the tmpfs of its disk cap mounted) and their control groups stay. The
// next start of serve sweeps them before it listens, and says so in the
// events file. A SIGTERM then leaves nothing behind.
func TestServeSweepsWhatAKilledServeLeft(t *testing.T) {
	needCappedAgentJail(t)
	bin := binary(t)
	dir, events := agentDir(t)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	// The agent's install directory is mounted at its own path in the
	// jail, where the jail's private /tmp would hide anything under /tmp.
	agentBin := agentInstallDir(t, "agentry-sweep-agent-")
	agentCmd := filepath.Join(agentBin, "agent.py")
	if err := os.WriteFile(agentCmd, []byte(scriptedACPAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	serve := func() *process {
		return startServeBinary(t, bin, []string{"TMPDIR=" + tmp}, "--agent", "acp", "--agent-cmd", agentCmd,
			"--workspaces", filepath.Join(dir, "workspaces"), "--store", filepath.Join(dir, "agentry.db"), "--events", events)
	}

	first := serve()
	openConversation(t, first)
	owner := ownerOf(t, first.cmd.Process.Pid)
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.wait()
	cells := agentCells(t, tmp)
	if len(cells) == 0 || !mountedUnder(t, cells[0]) {
		t.Fatalf("SIGKILL left no cell with a mounted disk cap to sweep: %v", cells)
	}
	if len(groupsOf(t, owner)) == 0 {
		// Any agentry process starting on this machine sweeps dead
		// processes' groups; one did it first. The cell and its mount
		// above still prove this sweep.
		t.Log("another process swept the killed serve's control groups first")
	}

	second := serve()
	if left := agentCells(t, tmp); len(left) != 0 {
		t.Errorf("the next start left the dead serve's cells: %v", left)
	}
	for _, c := range cells {
		if mountedUnder(t, c) {
			t.Errorf("the next start left %s mounted", c)
		}
	}
	if g := groupsOf(t, owner); len(g) != 0 {
		t.Errorf("the next start left the dead serve's control groups: %v", g)
	}
	openConversation(t, second)
	owner = ownerOf(t, second.cmd.Process.Pid)
	if len(agentCells(t, tmp)) == 0 || len(groupsOf(t, owner)) == 0 {
		t.Fatal("the second serve's agent has no cell or no control group: nothing for the graceful stop to prove")
	}
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, second.stderr)
	}
	if left := agentCells(t, tmp); len(left) != 0 {
		t.Errorf("a graceful stop left cells: %v", left)
	}
	if mountedUnder(t, tmp) {
		t.Error("a graceful stop left a tmpfs mounted")
	}
	if g := groupsOf(t, owner); len(g) != 0 {
		t.Errorf("a graceful stop left control groups: %v", g)
	}
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"type":"agentry.runner.swept","payload":{"runnerId":"agent-jail","what":"session-dirs","removed":`+strconv.Itoa(len(cells))) {
		t.Errorf("no agentry.runner.swept event for the %d swept cells in the events file", len(cells))
	}
}

// needCappedAgentJail fails under CI=true (skips elsewhere) when this
// machine cannot jail an agent with every cap.
func needCappedAgentJail(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	a, err := jail.NewAgent(jail.AgentOptions{Caps: &jail.Caps{}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Check(context.Background()); err != nil {
		skip("cannot jail an agent here: %v", err)
	}
	if gaps := a.Gaps(); len(gaps) > 0 {
		skip("the agent jail cannot apply every cap here: %v", gaps)
	}
}

// openConversation opens a conversation and runs a turn, which starts its
// agent (the host opens the agent's session at the first turn); the agent
// stays up for the conversation's next turn.
func openConversation(t *testing.T, p *process) {
	t.Helper()
	answer, _ := approvedTurn(t, p, "hello")
	if !strings.Contains(string(answer), "hello") {
		t.Fatalf("the scripted agent's turn: %s\n%s", answer, p.stderr)
	}
}

// agentCells lists the agent jail's cells in dir.
func agentCells(t *testing.T, dir string) []string {
	t.Helper()
	cells, err := filepath.Glob(filepath.Join(dir, "agentry-agent-*"))
	if err != nil {
		t.Fatal(err)
	}
	return cells
}

// mountedUnder reports whether /proc/self/mountinfo holds a mount at or
// below dir.
func mountedUnder(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return true
		}
	}
	return false
}

// ownerOf is process pid as the jail names its owners: "pid-start".
func ownerOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return strconv.Itoa(pid) + "-" + f[19]
}

// groupsOf lists the control groups the agentry process owner made below
// this process's groups, in every hierarchy: its runner groups
// (agentry-<owner>-N) and their session groups.
func groupsOf(t *testing.T, owner string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		runners, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parts[2], "agentry-"+owner+"-*"))
		for _, r := range runners {
			out = append(out, r)
			sessions, _ := filepath.Glob(filepath.Join(r, "s*"))
			out = append(out, sessions...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

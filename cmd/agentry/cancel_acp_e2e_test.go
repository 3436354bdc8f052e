//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
)

// neverAnswers is an ACP agent whose model cannot be reached: it takes a
// prompt, says it is retrying, and never ends the turn — not even when
// told session/cancel, which it only notes in its working directory.
const neverAnswers = `#!/usr/bin/python3
import json, os, sys

cwd = "."

def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": []}})
    elif method == "session/new":
        cwd = msg["params"]["cwd"]
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "never-1"}})
    elif method == "session/load":
        cwd = msg["params"]["cwd"]
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif method == "session/prompt":
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "never-1",
              "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "retrying the model"}}}})
    elif method == "session/cancel":
        with open(os.path.join(cwd, "cancelled"), "a") as f:
            f.write("session/cancel\n")
    elif mid is not None and "method" in msg:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})
`

// writeNeverAnswers puts the agent where the jail's user can run it:
// outside /tmp (the jail's own /tmp hides the host's), in a directory
// of its own (the jail mounts the command's directory read-only).
func writeNeverAnswers(t *testing.T) string {
	t.Helper()
	needAgentJail(t)
	dir := agentInstallDir(t, "agentry-never-answers-")
	p := filepath.Join(dir, "never-answers")
	if err := os.WriteFile(p, []byte(neverAnswers), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// running reports whether a process on this machine other than serve
// runs the command at path, whatever pid namespace it is in (the jail's
// bubblewrap names it too).
func running(t *testing.T, serve *process, path string) bool {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	self := "/proc/" + strconv.Itoa(serve.cmd.Process.Pid) + "/cmdline"
	for _, p := range procs {
		if p == self {
			continue // serve's own command line names the agent (--agent-cmd)
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(path)) {
			return true
		}
	}
	return false
}

// sseOf reads a turn's event stream as it comes, sending each event's
// name and data on the channel returned; it is closed when the stream
// ends.
func sseOf(t *testing.T, p *process, path, body string) <-chan sseItem {
	t.Helper()
	req, _ := http.NewRequest("POST", p.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		res.Body.Close()
		t.Fatalf("the turn: %d\n%s", res.StatusCode, p.stderr)
	}
	out := make(chan sseItem, 64)
	go func() {
		defer close(out)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var it sseItem
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "event: "):
				it.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				it.data = line[len("data: "):]
			case line == "" && it.name != "":
				out <- it
				it = sseItem{}
			}
		}
	}()
	return out
}

type sseItem struct{ name, data string }

// The finding: an ACP turn against a model that cannot be reached hung
// until serve was shut down. Through the built binary, with a jailed
// agent that never ends its prompt and ignores session/cancel: a cancel
// (202) and, in another serve, --turn-timeout each end the turn — the
// agent is told session/cancel through the contract, and since it does
// not stop, its session is closed and its process is gone by the time
// the turn's stream ends with turn_cancelled or turn_timed_out; the
// turn log records it, and the conversation takes the next turn.
func TestServeStopsAnACPTurnThatNeverAnswers(t *testing.T) {
	agentCmd := writeNeverAnswers(t)
	bin := binary(t)
	for _, c := range []struct {
		name, timeout   string
		cancel          bool
		code, outcome   string
		wantLogContains string
	}{
		{name: "cancel", timeout: "30m", cancel: true, code: string(host.CodeTurnCancelled), outcome: host.TurnCancelled, wantLogContains: "cancelled"},
		{name: "turn-timeout", timeout: "2s", code: string(host.CodeTurnTimedOut), outcome: host.TurnTimedOut, wantLogContains: "turn timeout (2s)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, events := agentDir(t)
			workspaces := filepath.Join(dir, "workspaces")
			p := startBinary(t, bin, "--agent", "acp", "--agent-cmd", agentCmd, "--workspaces", workspaces,
				"--store", filepath.Join(dir, "agentry.db"), "--events", events, "--turn-timeout", c.timeout)
			code, body := p.call(t, "POST", "/v1/sessions", "")
			if code != 201 {
				t.Fatalf("open: %d %s\n%s", code, body, p.stderr)
			}
			var s struct{ SessionID string }
			_ = json.Unmarshal(body, &s)

			stream := sseOf(t, p, "/v1/sessions/"+s.SessionID+"/turns", `{"message":"fix the build"}`)
			for it := range stream {
				if it.name == host.OutputEvent && strings.Contains(it.data, "retrying the model") {
					break // the agent has the prompt
				}
			}
			if !running(t, p, agentCmd) {
				t.Fatal("the agent does not run while its turn does")
			}
			if c.cancel {
				code, body := p.call(t, "POST", "/v1/sessions/"+s.SessionID+"/cancel", "")
				if code != http.StatusAccepted || !strings.Contains(string(body), `"runId":"run-`) {
					t.Fatalf("cancel: %d %s", code, body)
				}
			}
			var result string
			for it := range stream {
				if it.name == host.ResultEvent {
					result = it.data
				}
			}
			if !strings.Contains(result, `"code":"`+c.code+`"`) {
				t.Fatalf("the turn's result: %q\n%s", result, p.stderr)
			}
			if running(t, p, agentCmd) {
				t.Fatalf("the agent of the stopped turn still runs\n%s", p.stderr)
			}
			notes, _ := filepath.Glob(filepath.Join(workspaces, "*", "cancelled"))
			if len(notes) != 1 {
				t.Fatalf("the agent was not told session/cancel: %v", notes)
			}
			// The interrupt's session/cancel, and the adapter's own when the
			// turn it abandoned ended.
			if b, _ := os.ReadFile(notes[0]); !strings.HasPrefix(string(b), "session/cancel\n") {
				t.Fatalf("the agent noted %q", b)
			}
			code, body = p.call(t, "GET", "/v1/sessions/"+s.SessionID+"/turns", "")
			var log struct{ Turns []host.Turn }
			if code != 200 || json.Unmarshal(body, &log) != nil || len(log.Turns) == 0 {
				t.Fatalf("the turn log: %d %s", code, body)
			}
			if last := log.Turns[len(log.Turns)-1]; last.Outcome != c.outcome || !strings.Contains(last.Error, c.wantLogContains) {
				t.Fatalf("the turn log's last entry: %+v", last)
			}
			// The conversation goes on: a new agent (session/load) takes the
			// next turn, which a cancel stops again.
			if c.cancel {
				stream = sseOf(t, p, "/v1/sessions/"+s.SessionID+"/turns", `{"message":"again"}`)
				for it := range stream {
					if it.name == host.OutputEvent && strings.Contains(it.data, "retrying the model") {
						break
					}
				}
				if code, body := p.call(t, "POST", "/v1/sessions/"+s.SessionID+"/cancel", ""); code != http.StatusAccepted {
					t.Fatalf("the second cancel: %d %s", code, body)
				}
				for it := range stream {
					if it.name == host.ResultEvent && !strings.Contains(it.data, c.code) {
						t.Fatalf("the second turn's result: %s", it.data)
					}
				}
			}
		})
	}
}

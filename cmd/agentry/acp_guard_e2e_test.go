//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/jail"
	"github.com/agentry-dev/agentry/tool"
)

// acpAgentBinary builds testdata/acpagent (a scripted ACP agent on the
// Go SDK) where the jail's user can run it: not under /tmp, which the
// jail replaces. Like every test that needs the jail, it fails under
// CI=true and skips elsewhere when this machine cannot jail.
func acpAgentBinary(t *testing.T) string {
	t.Helper()
	needAgentJail(t)
	dir, err := os.MkdirTemp("/var/tmp", "agentry-acpagent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "acpagent")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/acpagent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the scripted agent: %v\n%s", err, out)
	}
	return bin
}

// needAgentJail fails under CI=true, and skips elsewhere, when this
// machine cannot build the agent jail (where ACP agents and git run).
func needAgentJail(t *testing.T) {
	t.Helper()
	a, err := jail.NewAgent(jail.AgentOptions{})
	if err == nil {
		err = a.Check(context.Background())
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot jail the agent here: %v", err)
		}
		t.Skipf("cannot jail the agent here: %v", err)
	}
}

// principals writes a tokens file for the given principals (tenant t1)
// and returns it with their tokens, in order.
func principals(t *testing.T, names ...string) (string, []string) {
	t.Helper()
	var b strings.Builder
	var tokens []string
	for _, n := range names {
		tok, line, err := host.GenerateToken(tool.Identity{Tenant: "t1", Principal: n})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		b.WriteString(line + "\n")
	}
	p := filepath.Join(t.TempDir(), "tokens.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, tokens
}

// callAs sends one request to the serving binary as the holder of token,
// bounded by a watchdog: what these tests guard against is a request
// that never ends.
func callAs(t *testing.T, p *process, token, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, p.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Errorf("%s %s: %v\n%s", method, path, err, p.stderr)
		return 0, nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func openAs(t *testing.T, p *process, token string) string {
	t.Helper()
	code, body := callAs(t, p, token, "POST", "/v1/sessions", "")
	if code != http.StatusCreated {
		t.Fatalf("open: %d %s\n%s", code, body, p.stderr)
	}
	var s struct{ SessionID string }
	_ = json.Unmarshal(body, &s)
	return s.SessionID
}

func message(text string) string {
	b, _ := json.Marshal(map[string]string{"message": text})
	return string(b)
}

// threads is the number of threads of process pid.
func threads(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0 // it is gone; the test says so elsewhere
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// The two findings against agentry serve, from a jailed agent:
// a FIFO it asks the client to read is refused at once (the turn ends,
// the conversation closes); 10,000 requests sent without waiting leave
// serve up with its threads bounded, another principal's turn answers
// meanwhile, and the flooding conversation is quarantined with an event
// and closes.
func TestServeHoldsAgainstAHostileACPAgent(t *testing.T) {
	agentCmd := acpAgentBinary(t)
	bin := binary(t)
	dir, events := agentDir(t)
	tokens, tok := principals(t, "alice", "bob")
	p := startServeBinary(t, bin, nil, "--agent", "acp", "--agent-cmd", agentCmd, "--tokens", tokens,
		"--workspaces", filepath.Join(dir, "workspaces"), "--store", filepath.Join(dir, "agentry.db"), "--events", events)
	alice, bob := tok[0], tok[1]

	t.Run("a FIFO is refused at once", func(t *testing.T) {
		id := openAs(t, p, alice)
		code, body := callAs(t, p, alice, "POST", "/v1/sessions/"+id+"/turns", message("fifo"))
		if code != http.StatusOK || !strings.Contains(string(body), "not a regular file") {
			t.Fatalf("the FIFO turn: %d %s", code, body)
		}
		if code, body := callAs(t, p, alice, "DELETE", "/v1/sessions/"+id, ""); code != http.StatusNoContent {
			t.Fatalf("closing: %d %s", code, body)
		}
	})

	t.Run("a flood is cut off", func(t *testing.T) {
		other := openAs(t, p, bob)
		if code, body := callAs(t, p, bob, "POST", "/v1/sessions/"+other+"/turns", message("hello")); code != http.StatusOK {
			t.Fatalf("bob's first turn: %d %s", code, body)
		}
		flooding := openAs(t, p, alice)
		pid := p.cmd.Process.Pid
		stop := make(chan struct{})
		peak := make(chan int)
		go func() {
			most := 0
			tick := time.NewTicker(5 * time.Millisecond) // sampling a gauge, not waiting for anything
			defer tick.Stop()
			for {
				most = max(most, threads(t, pid))
				select {
				case <-stop:
					peak <- most
					return
				case <-tick.C:
				}
			}
		}()
		var wg sync.WaitGroup
		var floodCode, bobCode int
		var floodBody, bobBody []byte
		wg.Go(func() {
			floodCode, floodBody = callAs(t, p, alice, "POST", "/v1/sessions/"+flooding+"/turns", message("flood 10000"))
		})
		wg.Go(func() {
			bobCode, bobBody = callAs(t, p, bob, "POST", "/v1/sessions/"+other+"/turns", message("hello"))
		})
		wg.Wait()
		close(stop)
		most := <-peak
		t.Logf("serve's threads peaked at %d", most)
		if bobCode != http.StatusOK || !strings.Contains(string(bobBody), "hello back") {
			t.Errorf("bob's turn during the flood: %d %s", bobCode, bobBody)
		}
		if floodCode != http.StatusInternalServerError || !strings.Contains(string(floodBody), "(a flood)") {
			t.Errorf("the flooding turn: %d %s", floodCode, floodBody)
		}
		if most >= 200 {
			t.Errorf("serve grew to %d threads", most)
		}
		if code, body := callAs(t, p, alice, "DELETE", "/v1/sessions/"+flooding, ""); code != http.StatusNoContent {
			t.Errorf("closing the flooding conversation: %d %s", code, body)
		}
		if code, body := callAs(t, p, bob, "POST", "/v1/sessions/"+other+"/turns", message("hello")); code != http.StatusOK {
			t.Errorf("bob's turn after the flood: %d %s", code, body)
		}
		if code, _ := callAs(t, p, bob, "GET", "/readyz", ""); code != http.StatusOK {
			t.Errorf("serve is not ready after the flood: %d", code)
		}
	})

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, p.stderr)
	}
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	var cut, quarantined bool
	for _, l := range strings.Split(string(b), "\n") {
		cut = cut || strings.Contains(l, `"agentry.acp.agent_cut_off"`) && strings.Contains(l, `"reason":"flood"`)
		quarantined = quarantined || strings.Contains(l, `"agentry.provider.quarantined"`) && strings.Contains(l, "(a flood)")
	}
	if !cut || !quarantined {
		t.Errorf("the events file: agent_cut_off %v, quarantined %v", cut, quarantined)
	}
}

// closedPort is a loopback port nobody listens on, and nothing the agent
// is allowed to reach.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// openGate writes the FIFO the agent waits on, so its turn goes on.
func openGate(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("go\n")
	f.Close()
}

func makeGate(t *testing.T, dir string) {
	t.Helper()
	if err := syscall.Mkfifo(filepath.Join(dir, "gate"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "gate"), 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
}

// A connection the jail refuses the agent reaches the person while the
// turn runs: an SSE event on the turn's stream. The agent waits, after
// its dial, until the test has seen the event.
func TestServeStreamsRefusedEgress(t *testing.T) {
	agentCmd := acpAgentBinary(t)
	bin := binary(t)
	dir, events := agentDir(t)
	p := startBinary(t, bin, "--agent", "acp", "--agent-cmd", agentCmd,
		"--workspaces", filepath.Join(dir, "workspaces"), "--store", filepath.Join(dir, "agentry.db"), "--events", events)
	id := openAs(t, p, p.token)
	if code, body := callAs(t, p, p.token, "POST", "/v1/sessions/"+id+"/turns", message("hello")); code != http.StatusOK {
		t.Fatalf("the first turn: %d %s", code, body)
	}
	ws, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*"))
	if len(ws) != 1 {
		t.Fatalf("workspaces: %v", ws)
	}
	makeGate(t, ws[0])
	target := closedPort(t)

	req, _ := http.NewRequest("POST", p.url+"/v1/sessions/"+id+"/turns", strings.NewReader(message("dial "+target+" gate")))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Accept", "text/event-stream")
	res, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	var name string
	var refused bool
	var result string
	for sc.Scan() {
		l := sc.Text()
		if v, ok := strings.CutPrefix(l, "event: "); ok {
			name = v
			continue
		}
		data, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			continue
		}
		switch name {
		case "agentry.jail.connection_refused":
			if !refused && strings.Contains(data, `"target":"`+target+`"`) {
				refused = true
				openGate(t, filepath.Join(ws[0], "gate"))
			}
		case "result":
			result = data
		}
	}
	if !refused {
		openGate(t, filepath.Join(ws[0], "gate"))
		t.Fatalf("the stream had no connection_refused event for %s; the turn ended with %s", target, result)
	}
	if !strings.Contains(result, "dialled "+target+": refused") {
		t.Fatalf("the turn's result: %s", result)
	}
}

// agentry run prints each connection the jail refuses the agent, as it
// happens, with the flag that would allow it.
func TestRunPrintsRefusedEgress(t *testing.T) {
	agentCmd := acpAgentBinary(t)
	bin := binary(t)
	dir, _ := agentDir(t)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	makeGate(t, ws)
	target := closedPort(t)
	cmd := exec.Command(bin, "run", "--agent", "acp", "--agent-cmd", agentCmd, "--workspace", ws, "dial "+target+" gate")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	want := "to allow it, pass --agent-allow-host " + target
	sc := bufio.NewScanner(stderr)
	var said []string
	seen := false
	for sc.Scan() {
		said = append(said, sc.Text())
		if !seen && strings.Contains(sc.Text(), "refused the agent's connection to "+target) && strings.Contains(sc.Text(), want) {
			seen = true
			openGate(t, filepath.Join(ws, "gate"))
		}
	}
	if !seen {
		openGate(t, filepath.Join(ws, "gate"))
	}
	err = cmd.Wait()
	if !seen {
		t.Fatalf("agentry run printed no line for the refused connection (%v):\n%s", err, strings.Join(said, "\n"))
	}
	if err != nil || !strings.Contains(stdout.String(), "dialled "+target+": refused") {
		t.Fatalf("agentry run: %v, stdout %q\n%s", err, stdout.String(), strings.Join(said, "\n"))
	}
}

// An agent that fails to start is reported with the last lines of its
// stderr, through agentry run and agentry serve; a secret passed by
// --agent-env never appears, in what either prints, answers or records.
func TestAnAgentThatFailsToStartIsReported(t *testing.T) {
	_ = acpAgentBinary(t) // the same jail
	bin := binary(t)
	dir, events := agentDir(t)
	const secret = "sk-e2e-9a8b7c6d5e4f"
	env := []string{"AGENT_KEY=" + secret}
	agentCmd := `/bin/sh -c 'echo "loading the model" >&2; echo "fatal: key $AGENT_KEY refused" >&2; exit 3'`
	lastLines := "loading the model | fatal: key <AGENT_KEY> refused"

	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	out, errout, code := exe(t, bin, env, "run", "--agent", "acp", "--agent-cmd", agentCmd, "--agent-env", "AGENT_KEY", "--workspace", ws, "hi")
	if code != 1 || !strings.Contains(errout, lastLines) {
		t.Errorf("agentry run: exit %d, stdout %q, stderr %q", code, out, errout)
	}
	if strings.Contains(out+errout, secret) {
		t.Errorf("agentry run printed the secret:\n%s%s", out, errout)
	}

	p := startServeBinary(t, bin, env, "--agent", "acp", "--agent-cmd", agentCmd, "--agent-env", "AGENT_KEY",
		"--workspaces", filepath.Join(dir, "workspaces"), "--store", filepath.Join(dir, "agentry.db"), "--events", events)
	id := openAs(t, p, p.token)
	code, body := callAs(t, p, p.token, "POST", "/v1/sessions/"+id+"/turns", message("hello"))
	var answer struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(body, &answer)
	if code != http.StatusServiceUnavailable || !strings.Contains(answer.Error.Message, lastLines) {
		t.Errorf("a turn on serve: %d %s", code, body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = p.wait()
	b, _ := os.ReadFile(events)
	var told bool
	for _, l := range strings.Split(string(b), "\n") {
		var e struct {
			Type    string
			Payload struct{ Reason, Stderr string }
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Type == "agentry.acp.agent_stopped" {
			told = told || e.Payload.Reason == "crashed" && e.Payload.Stderr == lastLines
		}
	}
	if !told {
		t.Errorf("no agent_stopped event with the agent's last lines in:\n%s", b)
	}
	if strings.Contains(string(b)+p.stderr.String()+string(body), secret) {
		t.Error("the secret is in serve's events, stderr or answer")
	}
}

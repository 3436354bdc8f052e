package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event/audit"
)

// binary builds the agentry command once per test into a temporary
// directory.
func binary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentry")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is a running `agentry serve`.
type process struct {
	cmd        *exec.Cmd
	url, token string
	stderr     *lockedBuffer
	done       chan struct{} // closed when the process has exited
	err        error         // its exit, once done is closed
}

func (p *process) wait() error {
	<-p.done
	return p.err
}

func startBinary(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	return startServeBinary(t, bin, nil, args...)
}

// startServeBinary starts `agentry serve` with env added to this process's
// environment, and waits until it listens (and, with no --tokens file,
// until it has printed its token).
func startServeBinary(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	ownTokens := slices.Contains(args, "--tokens")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error when it has already exited
		<-p.done
	})
	lines := make(chan string)
	// Whatever happens below, the rest of stdout is read, so the reader
	// below always reaches Wait.
	defer func() {
		go func() {
			for range lines {
			}
		}()
	}()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	timeout := time.After(60 * time.Second)
	for p.url == "" || (p.token == "" && !ownTokens) {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited before it listened:\n%s", p.stderr)
			}
			if u, ok := strings.CutPrefix(l, "agentry serve: listening on "); ok {
				p.url, _, _ = strings.Cut(u, " ")
			}
			if tok, ok := strings.CutPrefix(strings.TrimSpace(l), "agt_"); ok {
				p.token = "agt_" + tok
			}
		case <-timeout:
			t.Fatalf("serve did not start within a minute:\n%s", p.stderr)
		}
	}
	return p
}

func (p *process) call(t *testing.T, method, path, body string, hdr ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, p.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+p.token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func turnBody(code string) string {
	b, _ := json.Marshal(map[string]string{"message": "```\n" + code + "\n```"})
	return string(b)
}

// The real binary: a SIGTERM during a turn fails readiness at once, lets
// the turn finish and answer, closes every tool session, and flushes an
// events file whose audit finds no leak; the answered turn is in the store
// when the host comes back. Then a SIGKILL right after an answer loses
// nothing either.
func TestServeBinaryDrainsOnSIGTERM(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	store, events, gate := filepath.Join(dir, "agentry.db"), filepath.Join(dir, "events.ndjson"), filepath.Join(dir, "go")
	p := startBinary(t, bin, "--store", store, "--events", events, "--runner", "interpreter", "--drain", "60s")

	code, body := p.call(t, "POST", "/v1/sessions", "")
	if code != 201 {
		t.Fatalf("open: %d %s", code, body)
	}
	var s struct{ SessionID string }
	_ = json.Unmarshal(body, &s)
	if code, body = p.call(t, "POST", "/v1/sessions/"+s.SessionID+"/turns", turnBody("x = 41\nprint('set')")); code != 200 || !strings.Contains(string(body), "set") {
		t.Fatalf("turn 1: %d %s", code, body)
	}

	// Turn 2 waits inside the interpreter until the test creates the gate.
	req, _ := http.NewRequest("POST", p.url+"/v1/sessions/"+s.SessionID+"/turns",
		strings.NewReader(turnBody("import os, time\nwhile not os.path.exists("+strconvQuoteJSON(gate)+"):\n    time.sleep(0.01)\nprint(x + 1)")))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if sc.Text() == "event: agentry.tool.start" {
			break
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Readiness fails as soon as the signal is handled, which serve says.
	p.stderr.waitFor(t, "draining", 30*time.Second)
	if code, body := p.call(t, "GET", "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz while draining: %d %s", code, body)
	}
	if code, body := p.call(t, "POST", "/v1/sessions", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("a new request while draining: %d %s", code, body)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var last string
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = d
		}
	}
	if !strings.Contains(last, `"output":"42"`) {
		t.Fatalf("the drained turn's result: %s", last)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve exited with %v\n%s", err, p.stderr)
	}

	r := audit.Audit([]string{events})
	if r.Problems() || r.BadLines != 0 || r.Events == 0 {
		b, _ := json.MarshalIndent(r, "", "  ")
		t.Fatalf("audit of the events file:\n%s", b)
	}
	opened, shutdownCloses := 0, 0
	for _, ts := range r.Tools {
		opened += ts.Opened
		shutdownCloses += ts.Closed["shutdown"]
	}
	if opened == 0 || shutdownCloses == 0 {
		t.Fatalf("the audit saw %d sessions opened, %d closed at shutdown: %+v", opened, shutdownCloses, r.Tools)
	}

	// Back up on the same store: the answered turn is there. (Each run
	// makes a new token; both prove local/local, who owns the session.)
	p2 := startBinary(t, bin, "--store", store, "--events", "", "--runner", "interpreter")
	code, body = p2.call(t, "GET", "/v1/sessions/"+s.SessionID+"/messages", "")
	if code != 200 || !strings.Contains(string(body), `"42"`) {
		t.Fatalf("after a restart: %d %s", code, body)
	}
	// A crash right after an answer loses nothing.
	if code, body = p2.call(t, "POST", "/v1/sessions/"+s.SessionID+"/turns", turnBody("print('answered before the crash')")); code != 200 {
		t.Fatalf("turn after restart: %d %s", code, body)
	}
	_ = p2.cmd.Process.Kill()
	_ = p2.wait()
	p3 := startBinary(t, bin, "--store", store, "--events", "", "--runner", "interpreter")
	code, body = p3.call(t, "GET", "/v1/sessions/"+s.SessionID+"/messages", "")
	if code != 200 || !strings.Contains(string(body), "answered before the crash") {
		t.Fatalf("after a crash: %d %s", code, body)
	}
	_ = p3.cmd.Process.Signal(syscall.SIGTERM)
	if err := p3.wait(); err != nil {
		t.Fatalf("p3: %v\n%s", err, p3.stderr)
	}
}

func strconvQuoteJSON(s string) string { b, _ := json.Marshal(s); return string(b) }

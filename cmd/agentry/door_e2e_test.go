package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The operator's door, through the built binary: serve never changes the
// mode of a store path it did not make, never takes a secret on its
// command line, and run without Python says what to install.
func TestDoorBinary(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()

	t.Run("store on a directory or a text file is refused, modes unchanged", func(t *testing.T) {
		shared := filepath.Join(dir, "shared")
		if err := os.Mkdir(shared, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(shared, 0o1777); err != nil { // like /tmp
			t.Fatal(err)
		}
		text := filepath.Join(dir, "notes.txt")
		if err := os.WriteFile(text, []byte("a person's notes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ path, says string }{
			{shared, "is a directory"},
			{text, "is a file that is not a SQLite database"},
		} {
			before, _ := os.Stat(c.path)
			out, errout, code := exe(t, bin, nil, "serve", "--addr", "127.0.0.1:0", "--events", "", "--runner", "process", "--store", c.path)
			after, _ := os.Stat(c.path)
			if code == 0 || !strings.Contains(errout, c.says) || !strings.Contains(errout, "nothing was changed") {
				t.Fatalf("--store %s: exit %d, stdout %q, stderr %q", c.path, code, out, errout)
			}
			if before.Mode() != after.Mode() {
				t.Fatalf("--store %s changed its mode from %v to %v", c.path, before.Mode(), after.Mode())
			}
			if strings.Contains(out, "listening") {
				t.Fatalf("serve listened: %q", out)
			}
		}
	})

	t.Run("agent-env with a value is refused by serve, warned by run, never echoed", func(t *testing.T) {
		const secret = "sk-ant-door-e2e-4f1d9c"
		out, errout, code := exe(t, bin, nil, "serve", "--addr", "127.0.0.1:0", "--events", "", "--store", filepath.Join(dir, "env.db"),
			"--agent", "acp", "--agent-cmd", "true", "--agent-env", "ANTHROPIC_API_KEY="+secret)
		if code != 2 || !strings.Contains(errout, "export ANTHROPIC_API_KEY") || !strings.Contains(errout, "--agent-env ANTHROPIC_API_KEY") {
			t.Fatalf("serve: exit %d, stdout %q, stderr %q", code, out, errout)
		}
		if strings.Contains(out+errout, secret) {
			t.Fatal("serve repeated the value")
		}
		if _, err := os.Stat(filepath.Join(dir, "env.db")); err == nil {
			t.Fatal("serve made its store before refusing")
		}
		// run: one person's short command: a warning, and the value kept out of it.
		ws := t.TempDir()
		out, errout, _ = exe(t, bin, nil, "run", "--agent", "acp", "--agent-cmd", "/nonexistent/agent", "--allow-unjailed",
			"--workspace", ws, "--agent-env", "ANTHROPIC_API_KEY="+secret, "hi")
		if !strings.Contains(errout, "WARNING: --agent-env ANTHROPIC_API_KEY=…") {
			t.Fatalf("run did not warn: stdout %q, stderr %q", out, errout)
		}
		if strings.Contains(out+errout, secret) {
			t.Fatal("run repeated the value")
		}
	})

	t.Run("run without python3 exits 1 saying what to install", func(t *testing.T) {
		empty := t.TempDir()
		out, errout, code := exe(t, bin, []string{"PATH=" + empty}, "run", "--runner", "process", "print(6*7)")
		if code != 1 || out != "" || !strings.Contains(errout, "python3 is not on PATH") || !strings.Contains(errout, "apt-get install python3") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errout)
		}
	})
}

// 100 uploads from one principal that trickle (a byte, then nothing more)
// do not hold the built serve: each is cut 408 body_too_slow within about
// a window, or refused 429 too_many_requests past the principal's
// in-flight bound; meanwhile another principal's turn answers, and the
// trickling principal is served again once they are cut.
func TestServeBinaryCutsTricklingBodies(t *testing.T) {
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	tokens, toks := writeTokens(t, "alice", "bob")
	bin := binary(t)
	args := append([]string{"--tokens", tokens, "--store", filepath.Join(t.TempDir(), "a.db"), "--events", "",
		"--body-min-rate", "1000", "--body-rate-window", "1s", "--max-requests-per-principal", "40",
		"--max-new-conversations-per-minute", "30", "--retain-closed", "720h"}, jailOrAllow()...)
	s := startServeBinary(t, bin, nil, args...)
	s.token = toks["alice"]
	code, body := s.call(t, "POST", "/v1/sessions", "{}")
	if code != 201 {
		t.Fatalf("alice opens: %d %s", code, body)
	}
	id := jsonField(t, body, "sessionId")
	u, _ := url.Parse(s.url)

	const n = 100
	began := time.Now()
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				statuses <- -1
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(60 * time.Second)) // the test's bound, not a wait
			fmt.Fprintf(c, "POST /v1/sessions/%s/turns HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
				id, u.Host, toks["alice"])
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				statuses <- -2
				return
			}
			res.Body.Close()
			statuses <- res.StatusCode
		}()
	}

	// While they trickle, bob is served.
	s.token = toks["bob"]
	code, body = s.call(t, "POST", "/v1/sessions", "{}")
	if code != 201 {
		t.Fatalf("bob opens while alice trickles: %d %s", code, body)
	}
	bobID := jsonField(t, body, "sessionId")
	if code, body := s.call(t, "POST", "/v1/sessions/"+bobID+"/turns", turnBody("print(6*7)")); code != 200 || !strings.Contains(string(body), "42") {
		t.Fatalf("bob's turn while alice trickles: %d %s", code, body)
	}

	wg.Wait()
	close(statuses)
	took := time.Since(began)
	count := map[int]int{}
	for st := range statuses {
		count[st]++
	}
	if count[408]+count[429] != n || count[408] == 0 || count[429] == 0 {
		t.Fatalf("the trickling uploads were answered %v; want each cut 408 or refused 429", count)
	}
	t.Logf("100 trickling uploads: %d cut 408 and %d refused 429, all answered within %s", count[408], count[429], took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Fatalf("the trickling uploads held serve for %s; the window is 1s", took)
	}
	s.token = toks["alice"]
	if code, body := s.call(t, "GET", "/v1/sessions?limit=1", ""); code != 200 {
		t.Fatalf("alice after the cut: %d %s", code, body)
	}
}

package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event/audit"
	"github.com/agentry-dev/agentry/host"
)

// served is an `agentry serve` running in this process.
type served struct {
	url, token string
	sig        chan os.Signal
	done       chan error
	stderr     *lockedBuffer
}

type lockedBuffer struct {
	mu   sync.Mutex
	b    strings.Builder
	more chan struct{} // a token after each write
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	n, err := l.b.Write(p)
	more := l.more
	l.mu.Unlock()
	if more != nil {
		select {
		case more <- struct{}{}:
		default:
		}
	}
	return n, err
}

// waitFor blocks until the buffer holds s, or fails after d.
func (l *lockedBuffer) waitFor(t *testing.T, s string, d time.Duration) {
	t.Helper()
	l.mu.Lock()
	if l.more == nil {
		l.more = make(chan struct{}, 1)
	}
	more := l.more
	l.mu.Unlock()
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for !strings.Contains(l.String(), s) {
		select {
		case <-more:
		case <-timeout.C:
			t.Fatalf("no %q within %s in:\n%s", s, d, l.String())
		}
	}
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe runs runServe and waits until it listens; it reads the
// address, and the generated token when there is one, from stdout.
func startServe(t *testing.T, o serveOptions) *served {
	t.Helper()
	pr, pw := io.Pipe()
	s := &served{sig: make(chan os.Signal, 2), done: make(chan error, 1), stderr: &lockedBuffer{}}
	go func() {
		err := runServe(context.Background(), o, pw, s.stderr, s.sig, func() { s.done <- errors.New("forced exit") })
		pw.Close()
		s.done <- err
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		if u, ok := strings.CutPrefix(line, "agentry serve: listening on "); ok {
			s.url, _, _ = strings.Cut(u, " ")
			if o.tokens != "" {
				break
			}
		}
		if tok, ok := strings.CutPrefix(strings.TrimSpace(line), "agt_"); ok && !strings.Contains(line, "curl") {
			s.token = "agt_" + tok
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if s.url == "" {
		t.Fatalf("serve did not start: %v\n%s", <-s.done, s.stderr)
	}
	return s
}

func (s *served) stop(t *testing.T) {
	t.Helper()
	s.sig <- syscall.SIGTERM
	if err := <-s.done; err != nil {
		t.Fatalf("serve: %v\n%s", err, s.stderr)
	}
	http.DefaultClient.CloseIdleConnections()
}

func request(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func serveDefaults(t *testing.T) serveOptions {
	return serveOptions{addr: "127.0.0.1:0", store: filepath.Join(t.TempDir(), "agentry.db"), model: "scripted",
		drain: 5 * time.Second, teardown: time.Second, idleEvict: time.Minute, maxTurns: 8, maxTurnsPerPrincipal: 4, maxOpen: 10,
		turnTimeout: host.DefaultTurnTimeout}
}

func TestServeWithoutTokensFile(t *testing.T) {
	o := serveDefaults(t)
	o.events = filepath.Join(t.TempDir(), "events.ndjson")
	s := startServe(t, o)
	if !strings.HasPrefix(s.token, "agt_") {
		t.Fatalf("no generated token printed")
	}
	if code, _ := request(t, "GET", s.url+"/healthz", ""); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, body := request(t, "POST", s.url+"/v1/sessions", s.token); code != 201 {
		t.Fatalf("open with the printed token: %d %s", code, body)
	}
	if code, _ := request(t, "POST", s.url+"/v1/sessions", "agt_wrong"); code != 401 {
		t.Fatalf("a wrong token: %d", code)
	}
	s.stop(t)
	if !strings.Contains(s.stderr.String(), "draining") {
		t.Fatalf("stderr: %s", s.stderr)
	}
	// The events file was flushed on the way out, and holds the host's events.
	b, err := os.ReadFile(o.events)
	if err != nil || !strings.Contains(string(b), `"agentry.host.session_opened"`) {
		t.Fatalf("events file: %v\n%s", err, b)
	}
	if r := audit.Audit([]string{o.events}); r.Problems() || r.BadLines != 0 {
		t.Fatalf("audit: %+v", r)
	}
}

func TestServeRefusesOpenAddressWithoutTokens(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.0.2.1:8080"} {
		o := serveDefaults(t)
		o.addr = addr
		err := runServe(context.Background(), o, io.Discard, io.Discard, nil, nil)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "--tokens") || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Fatalf("%s: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1", "127.1.2.3:1"} {
		if !loopback(addr) {
			t.Fatalf("%s is loopback", addr)
		}
	}
}

func TestServeWithTokensFile(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.txt")
	out, err := execute(t, "token", "--tenant", "acme", "--principal", "alice", "--tokens", tokens)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out)
	b, _ := os.ReadFile(tokens)
	if strings.Contains(string(b), tok) || !strings.HasPrefix(string(b), "sha256:") {
		t.Fatalf("the tokens file holds %q", b)
	}
	if fi, _ := os.Stat(tokens); fi.Mode().Perm() != 0o600 {
		t.Fatalf("tokens file mode %v", fi.Mode())
	}
	o := serveDefaults(t)
	o.tokens = tokens
	o.addr = "127.0.0.1:0"
	s := startServe(t, o)
	if code, body := request(t, "POST", s.url+"/v1/sessions", tok); code != 201 {
		t.Fatalf("open: %d %s", code, body)
	}
	if code, body := request(t, "GET", s.url+"/v1/sessions", ""); code != 401 {
		t.Fatalf("no token: %d %s", code, body)
	}
	s.stop(t)
}

func TestServeFlagErrors(t *testing.T) {
	for _, c := range []struct {
		mut  func(*serveOptions)
		want string
	}{
		{func(o *serveOptions) { o.addr = "8080" }, "host:port"},
		{func(o *serveOptions) { o.tokens = "/nonexistent/tokens.txt" }, "--tokens"},
		{func(o *serveOptions) { o.drain = 0 }, "--drain"},
		{func(o *serveOptions) { o.turnTimeout = 0 }, "--turn-timeout"},
		{func(o *serveOptions) { o.turnTimeout = -time.Minute }, "--turn-timeout"},
		{func(o *serveOptions) { o.model = "gpt-9" }, "--model"},
		{func(o *serveOptions) { o.advertise = "10.0.0.5:8080" }, "--advertise"},
		{func(o *serveOptions) { o.advertise = "http://u:pw@10.0.0.5:8080" }, "--advertise"},
		{func(o *serveOptions) { o.lease = -time.Second }, "--lease"},
		{func(o *serveOptions) { o.forwardTimeout = -time.Second }, "--forward-timeout"},
		{func(o *serveOptions) { o.advertise = "http://10.0.0.5:8080" }, "postgres"}, // a SQLite store has no replicas
		// A clone lands in the native agent's interpreter: never an unjailed one.
		{func(o *serveOptions) { o.cloneAllow, o.runner = []string{"git.example.com"}, runnerInterpreter }, "--runner interpreter does not jail"},
		{func(o *serveOptions) { o.cloneAllow, o.runner = []string{"git.example.com"}, runnerProcess }, "--runner process does not jail"},
	} {
		o := serveDefaults(t)
		c.mut(&o)
		err := runServe(context.Background(), o, io.Discard, io.Discard, nil, nil)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("want a usage error naming %s: %v", c.want, err)
		}
	}
}

// A second signal exits at once.
func TestServeSecondSignalForcesExit(t *testing.T) {
	o := serveDefaults(t)
	s := startServe(t, o)
	// Hold the drain open with a request that never finishes: a slow body.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", s.url+"/v1/sessions", pr)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resDone := make(chan struct{})
	go func() {
		defer close(resDone)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
	}()
	if _, err := pw.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	s.sig <- syscall.SIGTERM
	s.sig <- syscall.SIGINT
	if err := <-s.done; err == nil || err.Error() != "forced exit" {
		t.Fatalf("after a second signal: %v", err)
	}
	pw.Write([]byte("}"))
	pw.Close()
	<-resDone
	if err := <-s.done; err != nil && !strings.Contains(err.Error(), "in flight") {
		t.Logf("after the drain: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/internal/modelwire"
	"github.com/agentry-dev/agentry/internal/pgtest"
)

// Fencing, through the built binary: two `agentry serve` replicas on one
// PostgreSQL with a 3 s lease. A turn on A appends to a ledger file, one
// line per tool call, when A is frozen (SIGSTOP) mid-turn. A turn sent to
// B meanwhile is answered 503 replica_unavailable with Retry-After within
// the forward timeout (A's lease still lives). Once the lease lapses B
// takes the conversation over and runs a turn — the person's code runs:
// the takeover note reached the model as a part of its own, not inside
// the message — and records A's turn as lost. Then A is let go
// (SIGCONT): it takes no further step of its turn (no ledger line of A
// after B's first), and its client is told turn_lost.
func TestReplicasFenceAFrozenOwner(t *testing.T) {
	needPython(t)
	dsn := pgtest.DSN(t)
	bin := binary(t)
	dir := t.TempDir()
	tokens, toks := writeTokens(t, "alice")
	const lease, forward = 3 * time.Second, 2 * time.Second
	model := programsModel(t)
	serve := func(name string) *process {
		p := startServeBinary(t, bin, anthropicOfflineEnv(model.URL),
			"--store", dsn, "--tokens", tokens, "--events", filepath.Join(dir, name+".ndjson"),
			"--runner", "process", "--model", "anthropic:claude-offline",
			"--lease", lease.String(), "--forward-timeout", forward.String(), "--drain", "20s")
		p.token = toks["alice"]
		return p
	}
	a, b := serve("a"), serve("b")
	message := programsMessage
	id := openAs(t, a, a.token)
	turns := "/v1/sessions/" + id + "/turns"
	if code, body := a.call(t, "POST", turns, message("print('warm')")); code != 200 {
		t.Fatalf("a first turn on A: %d %s", code, body)
	}

	ledger, running := filepath.Join(dir, "ledger"), filepath.Join(dir, "running")
	if err := syscall.Mkfifo(running, 0o600); err != nil {
		t.Fatal(err)
	}
	line := func(tag string) string {
		return fmt.Sprintf("with open(%q, 'a') as f:\n    f.write(%q)\nprint(%q)", ledger, tag+"\n", tag)
	}
	var steps []string
	for i := range 60 {
		steps = append(steps, line(fmt.Sprintf("A %d", i))+"\nimport time\ntime.sleep(0.1)")
	}
	steps[3] += fmt.Sprintf("\nopen(%q, 'w').write('on')", running) // tells the test: four calls have run
	lost := make(chan [2]string, 1)
	go func() {
		req, _ := http.NewRequest("POST", a.url+turns, strings.NewReader(message(steps...)))
		req.Header.Set("Authorization", "Bearer "+a.token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			lost <- [2]string{"", err.Error()}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		lost <- [2]string{fmt.Sprint(res.StatusCode), string(b)}
	}()
	f, err := os.Open(running) // the turn's fourth call has run
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(f)
	f.Close()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	defer func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) }()

	// A is frozen and its lease lives: B answers fast, and asks to be
	// called again when the lease would have lapsed.
	sent := time.Now()
	code, hdr, body := callHeaders(t, b, "POST", turns, message("print('never runs')"))
	if took := time.Since(sent); code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"replica_unavailable"`) ||
		hdr.Get("Retry-After") == "" || took > forward {
		t.Fatalf("a turn through B while A is frozen: %d after %s (forward timeout %s), Retry-After %q: %s", code, took, forward, hdr.Get("Retry-After"), body)
	}
	t.Logf("B answered 503 replica_unavailable %s after the request (forward timeout %s)", time.Since(sent).Round(time.Millisecond), forward)

	// B takes the conversation over once A's lease lapses; the person's
	// code runs.
	var out string
	for {
		code, body := b.call(t, "POST", turns, message(line("B")))
		if code == 200 {
			var o struct{ Output string }
			_ = json.Unmarshal(body, &o)
			out = o.Output
			break
		}
		if code != http.StatusServiceUnavailable || time.Since(frozen) > 4*lease {
			t.Fatalf("through B while A is frozen: %d %s\nB: %s", code, body, b.stderr)
		}
		time.Sleep(time.Second) // the Retry-After it was given
	}
	if out != "B" {
		t.Fatalf("the first turn after the takeover: %q (the person's code did not run)", out)
	}
	if !noteCameApart(model.Requests(), line("B")) {
		t.Fatal("the takeover note did not reach the model as a part of its own before the person's message")
	}

	// A is let go: it takes no step more, and its client hears the turn
	// was lost.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var res [2]string
	select {
	case res = <-lost:
	case <-time.After(30 * time.Second):
		t.Fatalf("A's client was not answered after SIGCONT\nA: %s", a.stderr)
	}
	if res[0] != "500" || !strings.Contains(res[1], `"turn_lost"`) || strings.Contains(strings.ToLower(res[1]), "retry") {
		t.Fatalf("A's client was told %s %s", res[0], res[1])
	}
	raw, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	first := slices.Index(lines, "B")
	if first < 4 {
		t.Fatalf("the ledger: %q", lines)
	}
	for _, l := range lines[first+1:] {
		if strings.HasPrefix(l, "A ") {
			t.Fatalf("A ran its turn on after B's first step: the ledger %q", lines)
		}
	}
	t.Logf("the ledger: %d lines of A, then B's; none of A after B's first", first)

	// The lost turn is in the turn log and the transcript.
	code, body = b.call(t, "GET", turns, "")
	if code != 200 || !strings.Contains(string(body), `"outcome":"lost"`) || !strings.Contains(string(body), `"kind":"takeover"`) {
		t.Fatalf("the turn log: %d %s", code, body)
	}
	code, body = b.call(t, "GET", "/v1/sessions/"+id+"/messages", "")
	if code != 200 || !strings.Contains(string(body), "may have run in part") || !strings.Contains(string(body), "A 0") {
		t.Fatalf("the transcript: %d %s", code, body)
	}
	for _, r := range []*process{a, b} {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := r.wait(); err != nil {
			t.Fatalf("%s: %v\n%s", r.url, err, r.stderr)
		}
	}
}

// callHeaders is process.call with the answer's headers.
func callHeaders(t *testing.T, p *process, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

// noteCameApart reports whether a request carried the takeover note as a
// text part of its own, just before a part holding the person's message.
func noteCameApart(reqs []modelwire.Request, message string) bool {
	for _, r := range reqs {
		var body struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if json.Unmarshal(r.Body, &body) != nil {
			continue
		}
		for _, m := range body.Messages {
			var parts []struct{ Type, Text string }
			if m.Role != "user" || json.Unmarshal(m.Content, &parts) != nil {
				continue
			}
			for i := 0; i+1 < len(parts); i++ {
				if strings.HasPrefix(parts[i].Text, "[agentry: this conversation was taken over") && strings.Contains(parts[i+1].Text, message) &&
					!strings.Contains(parts[i+1].Text, "[agentry:") {
					return true
				}
			}
		}
	}
	return false
}

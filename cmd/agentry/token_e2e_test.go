package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The built binary follows its tokens file: a token revoked with agentry
// token revoke is refused within 2 s with no signal, while another
// principal's conversation goes on answering turns; SIGHUP reloads (a
// token added is admitted at once) and never stops serve, with a tokens
// file or without one.
func TestServeBinaryReloadsTokensAndSurvivesSIGHUP(t *testing.T) {
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	tokens, toks := writeTokens(t, "alice", "bob")
	bin := binary(t)
	args := append([]string{"--tokens", tokens, "--store", filepath.Join(t.TempDir(), "a.db"), "--events", ""}, jailOrAllow()...)
	s := startServeBinary(t, bin, nil, args...)

	s.token = toks["bob"]
	code, body := s.call(t, "POST", "/v1/sessions", "{}")
	if code != 201 {
		t.Fatalf("bob opens: %d %s", code, body)
	}
	bobID := jsonField(t, body, "sessionId")
	s.token = toks["alice"]
	if code, body := s.call(t, "GET", "/v1/sessions", ""); code != 200 {
		t.Fatalf("alice lists: %d %s", code, body)
	}

	out, _, rc := exe(t, bin, nil, "token", "list", "--tokens", tokens)
	var aliceID string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "alice" {
			aliceID = f[0]
		}
	}
	if rc != 0 || aliceID == "" || strings.Contains(out, toks["alice"]) {
		t.Fatalf("token list (exit %d):\n%s", rc, out)
	}
	if _, errOut, rc := exe(t, bin, nil, "token", "revoke", "--tokens", tokens, aliceID); rc != 0 {
		t.Fatalf("token revoke: exit %d: %s", rc, errOut)
	}
	revoked := time.Now()
	for {
		code, _ := s.call(t, "GET", "/v1/sessions", "")
		if code == 401 {
			break
		}
		if time.Since(revoked) > 2*time.Second {
			t.Fatalf("alice's revoked token still answered %d after %s", code, time.Since(revoked))
		}
		time.Sleep(50 * time.Millisecond) // polling the door from outside: nothing to be told by
	}
	t.Logf("a revoked token was refused %s after the revoke", time.Since(revoked).Round(time.Millisecond))

	s.token = toks["bob"]
	if code, body := s.call(t, "POST", "/v1/sessions/"+bobID+"/turns", turnBody("print(6*7)")); code != 200 || !strings.Contains(string(body), "42") {
		t.Fatalf("bob's conversation after alice's revoke: %d %s", code, body)
	}

	// SIGHUP: a new token is admitted at once, and serve stays up.
	out, _, rc = exe(t, bin, nil, "token", "--tenant", "acme", "--principal", "carol", "--tokens", tokens)
	if rc != 0 {
		t.Fatalf("token: exit %d", rc)
	}
	carol := strings.TrimSpace(out)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.token = carol
	waitFor(t, "carol admitted after SIGHUP", func() bool { c, _ := s.call(t, "GET", "/v1/sessions", ""); return c == 200 })
	waitFor(t, "the SIGHUP line", func() bool { return strings.Contains(s.stderr.String(), "SIGHUP: reloaded tokens: ") })
	select {
	case <-s.done:
		t.Fatalf("serve stopped on SIGHUP: %v\n%s", s.err, s.stderr)
	default:
	}
	s.token = toks["bob"]
	if code, body := s.call(t, "POST", "/v1/sessions/"+bobID+"/turns", turnBody("print(1+1)")); code != 200 {
		t.Fatalf("bob after SIGHUP: %d %s", code, body)
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := s.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, s.stderr)
	}

	// Without a tokens file a SIGHUP is answered with a line, not an exit.
	g := startServeBinary(t, bin, nil, "--store", filepath.Join(t.TempDir(), "b.db"), "--events", "")
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the no-tokens SIGHUP line", func() bool { return strings.Contains(g.stderr.String(), "no --tokens or --config file to reload") })
	if code, body := g.call(t, "GET", "/v1/sessions", ""); code != 200 {
		t.Fatalf("after SIGHUP: %d %s", code, body)
	}
}

// waitFor polls cond (state outside this process that nothing announces)
// for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func jsonField(t *testing.T, body []byte, field string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	s, _ := m[field].(string)
	if s == "" {
		t.Fatalf("no %q in %s", field, body)
	}
	return s
}

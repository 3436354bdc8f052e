//go:build linux

package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// credentialKeyFile writes a credentials key file serve accepts.
func credentialKeyFile(t *testing.T, dir string) string {
	t.Helper()
	var k [32]byte
	_, _ = rand.Read(k[:])
	p := filepath.Join(dir, "credentials.key")
	if err := os.WriteFile(p, []byte("k1 "+base64.StdEncoding.EncodeToString(k[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// searchPrompt asks the scripted agent to look for secret in its jail
// without the secret itself crossing the wire (it is masked).
func searchPrompt(secret string) string {
	mask := make([]byte, len(secret))
	_, _ = rand.Read(mask)
	masked := make([]byte, len(secret))
	for i := range mask {
		masked[i] = mask[i] ^ secret[i]
	}
	return "search " + hex.EncodeToString(mask) + " " + hex.EncodeToString(masked)
}

func hasEnvPrompt(name, secret string) string {
	return fmt.Sprintf("hasenv %s %x", name, sha256.Sum256([]byte(secret)))
}

// The bar: a person's credential reaches only their own agent.
// Another person's jail (its environment, the processes and files it can
// see), every line serve logs, every event, `ps` and the database file
// are searched for it.
func TestServeCredentialReachesOnlyItsPersonsAgent(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	agentCmd := acpAgentBinary(t)
	bin := binary(t)
	dir, events := agentDir(t)
	tokens, tok := principals(t, "alice", "bob")
	alice, bob := tok[0], tok[1]
	db := filepath.Join(dir, "agentry.db")
	p := startServeBinary(t, bin, nil, "--agent", "acp", "--agent-cmd", agentCmd, "--tokens", tokens,
		"--workspaces", filepath.Join(dir, "workspaces"), "--store", db, "--events", events,
		"--credentials-key-file", credentialKeyFile(t, dir), "--agent-credential", "SCRIPTED_TOKEN=token")
	aliceSecret := "sk-alice-" + rand.Text()
	bobSecret := "sk-bob-" + rand.Text()

	// Without the credential the agent needs, a conversation is refused
	// at open, by name.
	code, body := callAs(t, p, alice, "POST", "/v1/sessions", "")
	if code != http.StatusPreconditionFailed || !strings.Contains(string(body), `"code":"credential_missing"`) || !strings.Contains(string(body), `"missing":["token"]`) {
		t.Fatalf("open without the credential: %d %s", code, body)
	}
	for who, secret := range map[string]string{alice: aliceSecret, bob: bobSecret} {
		b, _ := json.Marshal(map[string]string{"value": secret})
		if code, body := callAs(t, p, who, "PUT", "/v1/credentials/token", string(b)); code != http.StatusCreated {
			t.Fatalf("storing a credential: %d %s", code, body)
		}
	}
	code, body = callAs(t, p, alice, "GET", "/v1/credentials", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"name":"token"`) || strings.Contains(string(body), aliceSecret) {
		t.Fatalf("listing: %d %s", code, body)
	}

	aliceConv, bobConv := openAs(t, p, alice), openAs(t, p, bob)
	turn := func(who, id, prompt string) string {
		t.Helper()
		code, body := callAs(t, p, who, "POST", "/v1/sessions/"+id+"/turns", message(prompt))
		if code != http.StatusOK {
			t.Fatalf("turn %q: %d %s\n%s", prompt, code, body, p.stderr)
		}
		var a struct{ Output string }
		_ = json.Unmarshal(body, &a)
		return a.Output
	}
	if got := turn(alice, aliceConv, hasEnvPrompt("SCRIPTED_TOKEN", aliceSecret)); got != "env SCRIPTED_TOKEN matches" {
		t.Fatalf("alice's agent: %q", got)
	}
	if got := turn(bob, bobConv, hasEnvPrompt("SCRIPTED_TOKEN", bobSecret)); got != "env SCRIPTED_TOKEN matches" {
		t.Fatalf("bob's agent: %q", got)
	}
	// Both agents are live: bob's jail is searched for alice's secret.
	got := turn(bob, bobConv, searchPrompt(aliceSecret))
	if !strings.HasPrefix(got, "absent (") {
		t.Fatalf("bob's jail: %q", got)
	}
	t.Logf("bob's jail: alice's credential %s", got)
	// The search works: alice's own agent finds hers in its environment.
	if got := turn(alice, aliceConv, searchPrompt(aliceSecret)); !strings.Contains(got, "own environment") {
		t.Fatalf("alice's jail, searched for her own credential: %q", got)
	}
	ps, err := exec.Command("ps", "-e", "-ww", "-o", "pid=,args=").CombinedOutput()
	if err != nil {
		t.Fatalf("ps: %v\n%s", err, ps)
	}
	if !bytes.Contains(ps, []byte(agentCmd)) {
		t.Fatalf("ps does not show the agents, so it proves nothing:\n%s", ps)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve's exit: %v\n%s", err, p.stderr)
	}
	places := map[string][]byte{"ps": ps, "serve's log (stderr)": []byte(p.stderr.String())}
	for _, f := range []string{events, db, db + "-wal", db + "-shm"} {
		if b, err := os.ReadFile(f); err == nil {
			places[f] = b
		}
	}
	if len(places[events]) == 0 || len(places[db]) == 0 {
		t.Fatalf("the events file (%d bytes) or the database (%d bytes) is empty: nothing was searched", len(places[events]), len(places[db]))
	}
	for where, b := range places {
		for _, secret := range []string{aliceSecret, bobSecret} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds a credential in clear", where)
			}
		}
	}
}

// TestServeProfileCredentials: an agent profile's credentials reach that
// agent alone, through the built binary, once its person stored them.
func TestServeProfileCredentials(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	agentCmd := acpAgentBinary(t)
	bin := binary(t)
	dir, events := agentDir(t)
	tokens, tok := principals(t, "alice")
	alice := tok[0]
	conf := writeFile(t, dir, "agentry.toml", fmt.Sprintf(`credentials-key-file = %q
default-agent = "plain"

[agents.plain]
command = %q

[agents.keyed]
command = %q
credentials = { SCRIPTED_TOKEN = "token" }
`, credentialKeyFile(t, dir), agentCmd, agentCmd))
	if out, err := execute(t, "config", "check", conf); err != nil {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	p := startServeBinary(t, bin, nil, "--config", conf, "--tokens", tokens,
		"--workspaces", filepath.Join(dir, "workspaces"), "--store", filepath.Join(dir, "agentry.db"), "--events", events)

	code, body := callAs(t, p, alice, "POST", "/v1/sessions", `{"agent":"keyed"}`)
	if code != http.StatusPreconditionFailed || !strings.Contains(string(body), `"missing":["token"]`) {
		t.Fatalf("open keyed without the credential: %d %s", code, body)
	}
	secret := "sk-alice-" + rand.Text()
	b, _ := json.Marshal(map[string]string{"value": secret})
	if code, body := callAs(t, p, alice, "PUT", "/v1/credentials/token", string(b)); code != http.StatusCreated {
		t.Fatalf("storing a credential: %d %s", code, body)
	}
	turn := func(req, prompt string) string {
		t.Helper()
		code, body := callAs(t, p, alice, "POST", "/v1/sessions", req)
		if code != http.StatusCreated {
			t.Fatalf("open %s: %d %s", req, code, body)
		}
		var s struct{ SessionID string }
		_ = json.Unmarshal(body, &s)
		code, body = callAs(t, p, alice, "POST", "/v1/sessions/"+s.SessionID+"/turns", message(prompt))
		if code != http.StatusOK {
			t.Fatalf("turn %q: %d %s\n%s", prompt, code, body, p.stderr)
		}
		var a struct{ Output string }
		_ = json.Unmarshal(body, &a)
		return a.Output
	}
	if got := turn(`{"agent":"keyed"}`, hasEnvPrompt("SCRIPTED_TOKEN", secret)); got != "env SCRIPTED_TOKEN matches" {
		t.Fatalf("the keyed agent: %q", got)
	}
	if got := turn(`{"agent":"plain"}`, hasEnvPrompt("SCRIPTED_TOKEN", secret)); got != "env SCRIPTED_TOKEN unset" {
		t.Fatalf("the plain agent: %q", got)
	}
}

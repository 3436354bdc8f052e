package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
)

func TestParseLifetime(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute,
	} {
		if got, err := parseLifetime(in); err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "-1d", "30", "1x", "30s", "1d-5h", "99999d"} {
		if _, err := parseLifetime(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// agentry token --expires writes created= and expires=; list shows the
// owner, role and times and never the token or its whole digest; revoke
// takes an ID or an owner, refuses an unknown or ambiguous ID, and keeps
// the other lines.
func TestTokenListAndRevoke(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.txt")
	alice, err := execute(t, "token", "--tenant", "acme", "--principal", "alice", "--expires", "30d", "--tokens", file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "token", "--tenant", "acme", "--principal", "bob", "--tokens", file); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), " created=") || strings.Count(string(b), " expires=") != 1 {
		t.Fatalf("the tokens file:\n%s", b)
	}
	toks, err := host.LoadTokens(file)
	if err != nil || toks.Len() != 2 {
		t.Fatalf("load: %v", err)
	}
	out, err := execute(t, "token", "list", "--tokens", file)
	if err != nil {
		t.Fatal(err)
	}
	digest := strings.Fields(strings.TrimPrefix(string(b), "sha256:"))[0]
	if strings.Contains(out, strings.TrimSpace(alice)) || strings.Contains(out, digest) || strings.Contains(out, digest[:13]) {
		t.Fatalf("list shows a token or a whole digest:\n%s", out)
	}
	info := toks.Info()
	if !strings.Contains(out, info[0].ID+"  alice") || !strings.Contains(out, info[0].Expires.Format(time.RFC3339)) ||
		!strings.Contains(out, "never") || !strings.Contains(out, "PRINCIPAL") {
		t.Fatalf("list:\n%s", out)
	}
	if _, err := execute(t, "token", "revoke", "--tokens", file, "ffffffffffff"); err == nil {
		t.Fatal("revoked an unknown id")
	}
	if _, err := execute(t, "token", "revoke", "--tokens", file, "abc"); err == nil {
		t.Fatal("revoked by a three-digit id")
	}
	if _, err := execute(t, "token", "revoke", "--tokens", file); err == nil {
		t.Fatal("revoke with nothing named")
	}
	out, err = execute(t, "token", "revoke", "--tokens", file, info[0].ID)
	if err != nil || !strings.Contains(out, "revoked "+info[0].ID+" (acme/alice)") {
		t.Fatalf("revoke: %v %s", err, out)
	}
	if _, err := execute(t, "token", "revoke", "--tokens", file, "--tenant", "acme", "--principal", "bob"); err != nil {
		t.Fatal(err)
	}
	if toks, err := host.LoadTokens(file); err != nil || toks.Len() != 0 {
		t.Fatalf("after revoking both: %v", err)
	}
}

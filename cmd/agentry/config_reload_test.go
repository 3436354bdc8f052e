package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// tokensFor writes a tokens file admitting the principals of tenant acme,
// and returns the file and each one's token.
func tokensFor(t *testing.T, path string, principals ...string) map[string]string {
	t.Helper()
	toks := map[string]string{}
	var b strings.Builder
	for _, p := range principals {
		tok, line, err := host.GenerateToken(tool.Identity{Tenant: "acme", Principal: p})
		if err != nil {
			t.Fatal(err)
		}
		toks[p] = tok
		b.WriteString(line + "\n")
	}
	// Written whole and renamed over, as an editor or a deploy does.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return toks
}

func TestServeReloadsTheConfigFileOnSIGHUPAndOnChange(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.txt"), filepath.Join(dir, "second.txt")
	alice := tokensFor(t, first, "alice")["alice"]
	conf := writeFile(t, dir, "agentry.toml", "tokens = \""+first+"\"\nmax-turns = 8\nmodel = \"scripted\"\n")
	o, f := serveFlags(t, "--config", conf, "--addr", "127.0.0.1:0", "--store", filepath.Join(dir, "agentry.db"),
		"--events", "", "--runner", "process", "--drain", "5s")
	if err := o.readConfig(f); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, *o)
	defer func() {
		if s != nil {
			s.stop(t)
		}
	}()
	if code, body := request(t, "POST", s.url+"/v1/sessions", alice); code != 201 {
		t.Fatalf("alice: %d %s", code, body)
	}

	// The file now names another tokens file and changes what only a
	// restart can: the new tokens apply, the rest is named.
	carol := tokensFor(t, second, "carol")["carol"]
	writeFile(t, dir, "agentry.toml", "tokens = \""+second+"\"\nmax-turns = 9\nmodel = \"scripted\"\npool = 2\naddr = \"127.0.0.1:1\"\n")
	s.sig <- syscall.SIGHUP
	// The signal, or the watch if it sees the change first: either reload
	// says what it applied and what needs a restart (addr is the command
	// line's, so it did not change).
	s.stderr.waitFor(t, ": reloaded tokens: 1 tokens, 1 principals; changed but needs a restart: max-turns, pool\n", 10*time.Second)
	if code, _ := request(t, "GET", s.url+"/v1/sessions", alice); code != 401 {
		t.Fatalf("alice's token, gone from the tokens, was answered %d", code)
	}
	if code, body := request(t, "POST", s.url+"/v1/sessions", carol); code != 201 {
		t.Fatalf("carol: %d %s", code, body)
	}

	// A tokens file that would make serve admit several principals is
	// refused: serve chose its runner for one.
	dave := tokensFor(t, second, "carol", "dave")["dave"]
	s.sig <- syscall.SIGHUP
	s.stderr.waitFor(t, "tokens kept as before", 10*time.Second)
	if !strings.Contains(s.stderr.String(), "admits 2 principals, and serve started for one") {
		t.Fatalf("no reason given:\n%s", s.stderr)
	}
	if code, _ := request(t, "GET", s.url+"/v1/sessions", dave); code != 401 {
		t.Fatalf("dave was admitted (%d) by a refused reload", code)
	}

	// A change to the file is seen without a signal; one that no longer
	// reads is refused whole, and serve goes on as it was.
	writeFile(t, dir, "agentry.toml", "tokens = \""+first+"\"\nmax-turns = \"9\"\n")
	s.stderr.waitFor(t, "agentry.toml changed: reload refused, serving on as before: "+conf+":2: max-turns takes a whole number", 10*time.Second)
	if code, _ := request(t, "GET", s.url+"/v1/sessions", carol); code != 200 {
		t.Fatalf("carol after a refused reload: %d", code)
	}
	writeFile(t, dir, "agentry.toml", "tokens = \""+first+"\"\nmax-turns = 8\nmodel = \"scripted\"\n")
	s.stderr.waitFor(t, "agentry.toml changed: reloaded tokens: 1 tokens, 1 principals", 10*time.Second)
	if code, _ := request(t, "GET", s.url+"/v1/sessions", alice); code != 200 {
		t.Fatalf("alice, back in the tokens: %d", code)
	}
	s.stop(t)
	s = nil
}

func TestServeReloadsTheTokensFileOnSIGHUPWithoutAConfigFile(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.txt")
	alice := tokensFor(t, tokens, "alice")["alice"]
	o := serveDefaults(t)
	o.tokens, o.runner = tokens, "process"
	s := startServe(t, o)
	bob := tokensFor(t, tokens, "bob")["bob"]
	s.sig <- syscall.SIGHUP
	s.stderr.waitFor(t, "SIGHUP: reloaded tokens: 1 tokens, 1 principals\n", 10*time.Second)
	if code, _ := request(t, "GET", s.url+"/v1/sessions", alice); code != 401 {
		t.Fatalf("alice after her token went: %d", code)
	}
	if code, _ := request(t, "GET", s.url+"/v1/sessions", bob); code != 200 {
		t.Fatalf("bob: %d", code)
	}
	s.stop(t)
}

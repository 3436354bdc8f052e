package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// pathWithoutBwrap is a PATH holding python3 and nothing else: where the
// jail's bubblewrap cannot be found, exactly as on a machine without the
// Debian package.
func pathWithoutBwrap(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if _, serr := os.Stat("/usr/bin/python3"); serr == nil {
		py, err = "/usr/bin/python3", nil
	}
	if err != nil {
		t.Fatal("this test needs python3 (Debian: apt-get install python3)")
	}
	dir := t.TempDir()
	if err := os.Symlink(py, filepath.Join(dir, "python3")); err != nil {
		t.Fatal(err)
	}
	return "PATH=" + dir
}

func tokensFile(t *testing.T, owners ...tool.Identity) string {
	t.Helper()
	var b strings.Builder
	for _, o := range owners {
		_, line, err := host.GenerateToken(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	p := filepath.Join(t.TempDir(), "tokens.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startUntil runs the binary until a line containing marker appears on
// stdout or stderr, then interrupts it and returns everything it said and
// its exit status.
func startUntil(t *testing.T, bin string, env []string, marker string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	outR, outW := io.Pipe()
	cmd.Stdout, cmd.Stderr = outW, outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var all strings.Builder
	seen := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		once := sync.Once{}
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			mu.Lock()
			all.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), marker) {
				once.Do(func() { close(seen) })
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { err := cmd.Wait(); outW.Close(); exited <- err }()
	select {
	case <-seen:
	case err := <-exited:
		<-read
		t.Fatalf("%v exited (%v) before saying %q:\n%s", args, err, marker, all.String())
	case <-time.After(60 * time.Second): // a watchdog, not a synchronisation
		_ = cmd.Process.Kill()
		t.Fatalf("%v never said %q", args, marker)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-exited
	<-read
	mu.Lock()
	defer mu.Unlock()
	return all.String(), cmd.ProcessState.ExitCode()
}

func TestUnjailedMultiUserServingIsRefused(t *testing.T) {
	bin := binary(t)
	noBwrap := pathWithoutBwrap(t)
	alice, bob := tool.Identity{Tenant: "acme", Principal: "alice"}, tool.Identity{Tenant: "acme", Principal: "bob"}
	two := tokensFile(t, alice, bob)
	oneTwice := tokensFile(t, alice, alice) // two tokens, one principal
	dir := t.TempDir()
	events := filepath.Join(dir, "events.ndjson")
	store := filepath.Join(dir, "agentry.db")
	serve := func(extra ...string) []string {
		return append([]string{"serve", "--store", store, "--events", events}, extra...)
	}

	refusals := []struct {
		name  string
		env   []string
		args  []string
		names string
	}{
		{"serve, two principals, no bubblewrap", []string{noBwrap}, serve("--addr", "127.0.0.1:0", "--tokens", two), "2 principals"},
		{"serve beyond loopback, no bubblewrap", []string{noBwrap}, serve("--addr", "0.0.0.0:0", "--tokens", oneTwice), "0.0.0.0:0, beyond loopback"},
		{"serve, two principals, --runner interpreter", nil, serve("--addr", "127.0.0.1:0", "--tokens", two, "--runner", "interpreter"), "--runner interpreter does not jail"},
		{"mcp --http, two principals, no bubblewrap", []string{noBwrap}, []string{"mcp", "--http", "127.0.0.1:0", "--tokens", two}, "2 principals"},
		{"mcp --http beyond loopback, no bubblewrap", []string{noBwrap}, []string{"mcp", "--http", "0.0.0.0:0", "--tokens", oneTwice}, "beyond loopback"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			out, errout, code := exe(t, bin, tc.env, tc.args...)
			if code != 2 || out != "" {
				t.Fatalf("exit %d, stdout %q; want a refusal (exit 2) before anything listens\n%s", code, out, errout)
			}
			for _, want := range []string{"refusing to serve", tc.names, "UNJAILED", "apt-get install bubblewrap", "--allow-unjailed"} {
				if !strings.Contains(errout, want) {
					t.Errorf("the refusal does not say %q:\n%s", want, errout)
				}
			}
		})
	}

	t.Run("with the jail, several principals are served", func(t *testing.T) {
		if !jailWorks() {
			if os.Getenv("CI") == "true" {
				t.Fatal("bubblewrap cannot build a jail here and CI=true: install it (Debian: apt-get install bubblewrap)")
			}
			t.Skip("LOUD: bubblewrap cannot build a jail on this machine; the jailed case is not checked")
		}
		out, code := startUntil(t, bin, nil, "agentry serve: listening on",
			"serve", "--addr", "127.0.0.1:0", "--tokens", two, "--store", filepath.Join(t.TempDir(), "a.db"), "--events", "")
		if code != 0 || strings.Contains(out, "WARNING") || strings.Contains(out, "UNJAILED") {
			t.Fatalf("exit %d; want a quiet, jailed start:\n%s", code, out)
		}
	})

	t.Run("serve --allow-unjailed warns loudly and records an event", func(t *testing.T) {
		ev := filepath.Join(t.TempDir(), "e.ndjson")
		out, code := startUntil(t, bin, []string{noBwrap}, "agentry serve: listening on",
			"serve", "--addr", "127.0.0.1:0", "--tokens", two, "--store", filepath.Join(t.TempDir(), "a.db"), "--events", ev, "--allow-unjailed")
		if code != 0 || strings.Count(out, "WARNING") < 3 || !strings.Contains(out, "--allow-unjailed: serving 2 principals") {
			t.Fatalf("exit %d; want a loud warning and a clean stop:\n%s", code, out)
		}
		checkUnjailedEvent(t, ev, "serve", 2)
	})

	t.Run("mcp --http --allow-unjailed warns loudly and records an event", func(t *testing.T) {
		ev := filepath.Join(t.TempDir(), "e.ndjson")
		out, code := startUntil(t, bin, []string{noBwrap}, "serving streamable HTTP",
			"mcp", "--http", "127.0.0.1:0", "--tokens", two, "--events", ev, "--allow-unjailed")
		if code != 0 || strings.Count(out, "WARNING") < 3 || !strings.Contains(out, "--allow-unjailed: serving 2 principals") {
			t.Fatalf("exit %d; want a loud warning and a clean stop:\n%s", code, out)
		}
		checkUnjailedEvent(t, ev, "mcp", 2)
	})

	t.Run("one principal on loopback keeps the stated single-user fallback", func(t *testing.T) {
		out, code := startUntil(t, bin, []string{noBwrap}, "agentry serve: listening on",
			"serve", "--addr", "127.0.0.1:0", "--tokens", oneTwice, "--store", filepath.Join(t.TempDir(), "a.db"), "--events", "")
		if code != 0 || !strings.Contains(out, "UNJAILED") || !strings.Contains(out, "for a single user") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		out, errout, code := exe(t, bin, []string{noBwrap}, "run", "print(6*7)")
		if code != 0 || out != "42\n" || !strings.Contains(errout, "UNJAILED") || !strings.Contains(errout, "for a single user") {
			t.Fatalf("agentry run without bubblewrap: exit %d, %q, %q", code, out, errout)
		}
	})
}

func checkUnjailedEvent(t *testing.T, path, command string, principals int) {
	t.Helper()
	var found []*unjailedServing
	for _, e := range readEvents(t, path) {
		if e.Type == typeUnjailedServing {
			p, ok := e.Payload.(*unjailedServing)
			if !ok {
				t.Fatalf("payload %T", e.Payload)
			}
			found = append(found, p)
		}
	}
	if len(found) != 1 || found[0].Command != command || found[0].Principals != principals || found[0].Why == "" ||
		found[0].RunnerID != "local-interpreter" {
		t.Fatalf("%s events in %s: %+v; want one for %s with %d principals", typeUnjailedServing, path, found, command, principals)
	}
}

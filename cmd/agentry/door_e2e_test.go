package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

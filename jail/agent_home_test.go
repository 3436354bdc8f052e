//go:build linux

package jail_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/jail"
)

// conversationDirs makes, under one root laid out as serve lays out its
// workspaces (0711: reachable, not listable), a workspace and the path of
// its kept HOME beside it (not made: the launch makes it).
func conversationDirs(t *testing.T, root, name string) (ws, home string) {
	t.Helper()
	ws = filepath.Join(root, name)
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	return ws, ws + ".home"
}

func stopProbe(t *testing.T, pr *probe) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pr.p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// A kept HOME (Spec.HomeDir) outlives its agent: the launch makes it
// from the template, 0700 and the jail user's; the next agent of the same
// conversation finds what the first wrote there, and the template is not
// copied again.
func TestKeptHomeOutlivesTheAgent(t *testing.T) {
	needJail(t)
	root := reachableDir(t)
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	ws, home := conversationDirs(t, root, "c1")
	tmpl := reachableDir(t)
	if err := os.WriteFile(filepath.Join(tmpl, "settings.json"), []byte(`{"v":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	j := newAgent(t, jail.AgentOptions{})

	first := launchProbe(t, j, jail.Spec{Workspace: ws, HomeDir: home, Home: tmpl, Label: "keep1"})
	if got := first.must(t, `result = open(os.environ["HOME"] + "/settings.json").read()`); got != `{"v":1}` {
		t.Errorf("the kept HOME's template file = %v", got)
	}
	first.must(t, `os.makedirs(os.environ["HOME"] + "/.claude/projects", exist_ok=True); open(os.environ["HOME"] + "/.claude/projects/s.jsonl", "w").write("turn one")`)
	stopProbe(t, first)

	fi, err := os.Stat(home)
	if err != nil {
		t.Fatalf("the kept HOME is gone with its agent: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o700 || st.Uid != 65534 {
		t.Errorf("the kept HOME is mode %#o, uid %d; want 0700 and the jail's uid 65534", fi.Mode().Perm(), st.Uid)
	}
	// A template changed after the HOME was made does not reach it.
	if err := os.WriteFile(filepath.Join(tmpl, "later.json"), []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	second := launchProbe(t, j, jail.Spec{Workspace: ws, HomeDir: home, Home: tmpl, Label: "keep2"})
	if got := second.must(t, `result = open(os.path.expanduser("~/.claude/projects/s.jsonl")).read()`); got != "turn one" {
		t.Errorf("the second agent reads %v from its HOME; want what the first wrote", got)
	}
	if got := second.must(t, `result = os.path.exists(os.environ["HOME"] + "/later.json")`); got != false {
		t.Errorf("the template was copied into an existing kept HOME again")
	}
	if got := second.must(t, `result = os.environ["HOME"]`); got != "/home/agent" {
		t.Errorf("HOME = %v", got)
	}
}

// A hostile agent cannot read, list or write another conversation's kept
// HOME, while that conversation's agent runs and after it stopped, nor
// its own HOME's neighbours on the host: only its own HOME is mounted, at
// /home/agent.
func TestKeptHomesAreNotShared(t *testing.T) {
	needJail(t)
	root := reachableDir(t)
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	wsA, homeA := conversationDirs(t, root, "alice")
	wsB, homeB := conversationDirs(t, root, "bob")
	j := newAgent(t, jail.AgentOptions{})

	bob := launchProbe(t, j, jail.Spec{Workspace: wsB, HomeDir: homeB, Label: "bob"})
	bob.must(t, `open(os.environ["HOME"] + "/secret", "w").write("bob's session memory")`)
	alice := launchProbe(t, j, jail.Spec{Workspace: wsA, HomeDir: homeA, Label: "alice"})

	for _, code := range []string{
		`result = open(` + pyStr(filepath.Join(homeB, "secret")) + `).read()`,
		`result = os.listdir(` + pyStr(homeB) + `)`,
		`open(` + pyStr(filepath.Join(homeB, "planted")) + `, "w").write("x")`,
		`result = os.listdir(` + pyStr(homeA) + `)`, // its own, by its host path
		`result = open("/home/bob/secret").read()`,
	} {
		alice.mustFail(t, code)
	}
	// The workspace's parent shows only the workspace (the mount's
	// skeleton), neither HOME.
	for _, name := range alice.must(t, `result = os.listdir(`+pyStr(root)+`)`).([]any) {
		if name != "alice" {
			t.Errorf("alice's agent sees %s beside its workspace", name)
		}
	}
	if got := alice.must(t, `result = os.listdir(os.environ["HOME"])`); len(got.([]any)) != 0 {
		t.Errorf("alice's fresh HOME holds %v", got)
	}
	stopProbe(t, bob)
	alice.mustFail(t, `result = open(`+pyStr(filepath.Join(homeB, "secret"))+`).read()`)
	if _, err := os.Stat(filepath.Join(homeB, "planted")); err == nil {
		t.Errorf("alice's agent wrote into bob's HOME")
	}
	if b, err := os.ReadFile(filepath.Join(homeB, "secret")); err != nil || string(b) != "bob's session memory" {
		t.Errorf("bob's HOME after alice: %q %v", b, err)
	}
}

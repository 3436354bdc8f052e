package acp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/provider/acp"
)

// With fs "write" the client offers only writes, refuses a read the agent
// makes anyway, and still takes writes.
func TestFSWriteOffersOnlyWrites(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	if err := os.WriteFile(filepath.Join(r.ws, "a.txt"), []byte("there"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := r.create(r.instance(r.config(nil, func(c *acp.Config) { c.FS = acp.FSWrite })), "s1")
	if got := said(turn(t, s, "c1", "fscaps")); got != "read=false write=true" {
		t.Fatalf("the client offered %q", got)
	}
	if got := said(turn(t, s, "r1", "read a.txt")); !strings.Contains(got, "offers no file reads") {
		t.Fatalf("a read not offered: %q", got)
	}
	if got := said(turn(t, s, "w1", "write b.txt written")); got != "wrote" {
		t.Fatalf("a write: %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(r.ws, "b.txt")); string(b) != "written" {
		t.Fatalf("b.txt holds %q", b)
	}

	d := newRig(t, nil)
	s = d.create(d.instance(d.config(nil, nil)), "s2")
	if got := said(turn(t, s, "c2", "fscaps")); got != "read=true write=true" {
		t.Fatalf("by default the client offered %q", got)
	}
}

func TestFilesAreConfinedToTheWorkspace(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("not yours"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(r.ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(r.ws, "leak.txt")); err != nil {
		t.Fatal(err)
	}

	if got := said(turn(t, s, "w1", "write "+filepath.Join(r.ws, "sub/dir/a.txt")+" inside")); got != "wrote" {
		t.Fatalf("a write inside: %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(r.ws, "sub/dir/a.txt")); string(b) != "inside" {
		t.Fatalf("the file holds %q", b)
	}
	if got := said(turn(t, s, "r1", "read "+filepath.Join(r.ws, "sub/dir/a.txt"))); got != "content: inside" {
		t.Fatalf("a read inside: %q", got)
	}
	if got := said(turn(t, s, "r2", "read sub/dir/a.txt")); got != "content: inside" {
		t.Fatalf("a relative read inside: %q", got)
	}
	// A file that is not there is ACP's "resource not found", not a
	// refusal: the agent may create it.
	if got := said(turn(t, s, "r3", "read sub/new.txt")); !strings.Contains(got, `"code":-32002`) || !strings.Contains(got, "sub/new.txt does not exist") {
		t.Fatalf("a read of a missing file: %q", got)
	}

	attempts := []string{
		"read " + filepath.Join(r.ws, "../../etc/passwd"),
		"read ../ws/../../secret.txt",
		"read " + secret,
		"read /etc/passwd",
		"read " + filepath.Join(r.ws, "out/secret.txt"),
		"read " + filepath.Join(r.ws, "leak.txt"),
		"write " + filepath.Join(r.ws, "../escaped.txt") + " x",
		"write " + filepath.Join(outside, "planted.txt") + " x",
		"write " + filepath.Join(r.ws, "out/planted.txt") + " x",
	}
	for i, a := range attempts {
		got := said(turn(t, s, "x"+string(rune('a'+i)), a))
		if !strings.Contains(got, "outside the session's workspace") {
			t.Errorf("%s: the agent was told %q", a, got)
		}
		if strings.Contains(got, outside) || strings.Contains(got, "not yours") {
			t.Errorf("%s: the refusal leaks %q", a, got)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "planted.txt")); err == nil {
		t.Fatal("a write escaped the workspace")
	}
	if _, err := os.Stat(filepath.Join(r.root, "escaped.txt")); err == nil {
		t.Fatal("a write escaped the workspace")
	}
	// leak.txt is a symlink to a file outside: writing it replaces the
	// link inside the workspace, never the file it pointed to.
	if got := said(turn(t, s, "w2", "write "+filepath.Join(r.ws, "leak.txt")+" mine")); got != "wrote" {
		t.Fatalf("writing over a link inside: %q", got)
	}
	if b, _ := os.ReadFile(secret); string(b) != "not yours" {
		t.Fatalf("the file outside was changed to %q", b)
	}

	var refused, allowed int
	for _, e := range r.events.of(acp.TypeFile) {
		p := e.Payload.(*acp.FileEvent)
		if e.Meta.SessionID != "s1" {
			t.Errorf("a file event without the session: %+v", e)
		}
		if p.Refused {
			refused++
			if p.Path != "" {
				t.Errorf("a refused call's event repeats its path %q", p.Path)
			}
			continue
		}
		allowed++
		if filepath.IsAbs(p.Path) {
			t.Errorf("an event path %q is not relative to the workspace", p.Path)
		}
	}
	if refused != len(attempts) || allowed != 5 {
		t.Fatalf("%d refused and %d allowed file events; want %d and 5", refused, allowed, len(attempts))
	}
}

func TestTerminals(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config([]string{"GREETING=hi from env"}, func(c *acp.Config) { c.Limits.TerminalOutputBytes = 64 }))
	s := r.create(inst, "s1")
	if err := os.Mkdir(filepath.Join(r.ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := said(turn(t, s, "t1", "term /bin/sh -c echo $GREETING; pwd")); got != "exit=0 truncated=false output=hi from env\n"+r.ws+"\n" {
		t.Fatalf("a terminal: %q", got)
	}
	if got := said(turn(t, s, "t2", "termcwd "+filepath.Join(r.ws, "sub")+" /bin/pwd")); got != "exit=0 truncated=false output="+filepath.Join(r.ws, "sub")+"\n" {
		t.Fatalf("a terminal in a subdirectory: %q", got)
	}
	if got := said(turn(t, s, "t3", "term /bin/sh -c exit 7")); !strings.HasPrefix(got, "exit=7 ") {
		t.Fatalf("an exit status: %q", got)
	}
	got := said(turn(t, s, "t4", "term /bin/sh -c i=0; while [ $i -lt 50 ]; do echo line$i; i=$((i+1)); done"))
	if !strings.HasPrefix(got, "exit=0 truncated=true output=") || !strings.HasSuffix(got, "line49\n") {
		t.Fatalf("a capped terminal: %q", got)
	}
	if out := strings.TrimPrefix(got, "exit=0 truncated=true output="); len(out) > 64 {
		t.Fatalf("the output is %d bytes; the cap is 64", len(out))
	}
	for i, cwd := range []string{"/tmp", filepath.Join(r.ws, ".."), "../.."} {
		got := said(turn(t, s, "c"+string(rune('a'+i)), "termcwd "+cwd+" /bin/pwd"))
		if !strings.Contains(got, "outside the session's workspace") {
			t.Errorf("a terminal in %s: %q", cwd, got)
		}
	}
	var ops []string
	for _, e := range r.events.of(acp.TypeTerminal) {
		p := e.Payload.(*acp.TerminalEvent)
		ops = append(ops, p.Op)
		if p.Cwd != "" && filepath.IsAbs(p.Cwd) {
			t.Errorf("a terminal event's cwd %q is not relative", p.Cwd)
		}
		if strings.Contains(p.Command, "/") || strings.Contains(p.Command, " ") {
			t.Errorf("a terminal event names more than the program: %q", p.Command)
		}
	}
	if n := strings.Count(strings.Join(ops, " "), "create"); n != 7 {
		t.Fatalf("terminal events %v; want 7 creates", ops)
	}
}

func TestPrivateHomeIsACopyOfTheTemplate(t *testing.T) {
	t.Parallel()
	homes := t.TempDir()
	r := newRig(t, acp.Unjailed(acp.UnjailedOptions{HomeDir: homes}))
	tmpl := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmpl, "settings.json"), []byte(`{"theme":"dark"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := r.create(r.instance(r.config(nil, func(c *acp.Config) { c.Home = tmpl })), "s1")
	got := said(turn(t, s, "t1", "term /bin/sh -c cat $HOME/settings.json; echo; echo $HOME; echo > $HOME/settings.json"))
	if !strings.Contains(got, `{"theme":"dark"}`) || !strings.Contains(got, homes) {
		t.Fatalf("the agent's HOME: %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(tmpl, "settings.json")); string(b) != `{"theme":"dark"}` {
		t.Fatal("the agent changed the template")
	}
	if err := s.Close(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(homes)
	if len(left) != 0 {
		t.Fatalf("private HOMEs left after the agents stopped: %v", left)
	}
}

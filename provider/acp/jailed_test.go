//go:build linux

package acp_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/jail"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// jailedRig is a rig whose launcher is acp.Jailed over a sandboxed jail,
// and whose scripted agent (a copy of this test binary) and workspace
// root the jail's user can reach. It fails under CI=true, and skips
// elsewhere, when this machine cannot jail.
func jailedRig(t *testing.T) (*rig, []string) { return jailedRigTB(t) }

func jailedRigTB(t testing.TB) (*rig, []string) {
	t.Helper()
	a, err := jail.NewAgent(jail.AgentOptions{Caps: &jail.Caps{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if err := a.Check(context.Background()); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot jail here: %v", err)
		}
		t.Skipf("cannot jail here: %v", err)
	}
	r := newRig(t, acp.Jailed(a))
	for _, d := range []string{filepath.Dir(r.root), r.root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The test binary lives in a directory only root can enter: copy it
	// where the jail's user can run it, outside /tmp (the jail's own /tmp
	// hides the host's).
	bin, err := os.MkdirTemp("/var/tmp", "agentry-acp-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cp := filepath.Join(bin, "scripted-agent")
	out, err := os.OpenFile(cp, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return r, []string{cp}
}

func TestJailedLauncher(t *testing.T) {
	r, argv := jailedRig(t)
	inst := r.instance(r.config(nil, func(c *acp.Config) { c.Command = argv }))
	if rd, err := inst.Readiness(context.Background()); err != nil || rd != provider.Ready {
		t.Fatalf("readiness %v, %v", rd, err)
	}
	s := r.create(inst, "s1")
	if got := said(turn(t, s, "t1", "hello")); got != "hello back" {
		t.Fatalf("a jailed agent said %q", got)
	}
	// Its files are the workspace's; a path out is refused.
	if got := said(turn(t, s, "t2", "write notes.txt jailed")); got != "wrote" {
		t.Fatalf("write: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(r.ws, "notes.txt")); err != nil || string(b) != "jailed" {
		t.Fatalf("the workspace holds %q, %v", b, err)
	}
	if got := said(turn(t, s, "t3", "write ../out.txt x")); !strings.HasPrefix(got, "error:") {
		t.Fatalf("a write out of the workspace: %q", got)
	}
	// A terminal runs in the jail, as its user, with the filter.
	if got := said(turn(t, s, "t4", "term /usr/bin/id -u")); got != "exit=0 truncated=false output=1000\n" {
		t.Fatalf("a terminal in the jail: %q", got)
	}
	if err := s.Close(context.Background(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}

	var sawJail bool
	for _, e := range r.events.of(acp.TypeAgentStarted) {
		p := e.Payload.(*acp.AgentStarted)
		if p.Launcher != "jail" || !p.Confined {
			t.Errorf("agent_started %+v; want launcher jail, confined", p)
		}
		sawJail = true
	}
	if !sawJail {
		t.Fatal("no agent_started event")
	}
	stopped := r.events.of(acp.TypeAgentStopped)
	if len(stopped) == 0 {
		t.Fatal("no agent_stopped event")
	}
	for _, e := range stopped {
		if p := e.Payload.(*acp.AgentStopped); p.Reason != "stopped" {
			t.Errorf("agent_stopped %+v; want reason stopped", p)
		}
	}
	for _, e := range r.events.of(jail.TypeStarted) {
		if p := e.Payload.(*jail.Started); p.NotApplied != "" {
			t.Logf("this machine cannot apply: %s", p.NotApplied)
		}
	}
}

func TestJailedMissingCommand(t *testing.T) {
	r, _ := jailedRig(t)
	inst := r.instance(r.config(nil, func(c *acp.Config) { c.Command = []string{"/nonexistent/agent"} }))
	rd, err := inst.Readiness(context.Background())
	if err != nil || rd != provider.MissingExecutable {
		t.Fatalf("readiness %v, %v; want missing_executable", rd, err)
	}
}

// BenchmarkStartCostJailed is BenchmarkStartCost's create_first_answer
// with the scripted agent in a sandboxed jail (acp.Jailed) and, in the
// same run, unjailed: the difference is the jail's share of a session's
// start.
//
//	go test -run XXX -bench StartCostJailed -benchtime 20x ./provider/acp/
func BenchmarkStartCostJailed(b *testing.B) {
	for _, jailedRun := range []bool{false, true} {
		name := "unjailed"
		if jailedRun {
			name = "jailed"
		}
		b.Run(name, func(b *testing.B) {
			var r *rig
			var argv []string
			if jailedRun {
				r, argv = jailedRigTB(b)
			} else {
				r, argv = newRig(b, nil), scriptedCommand(b)
			}
			inst := r.instance(r.config(nil, func(c *acp.Config) { c.Command = argv }))
			benchFirstAnswer(b, r, inst)
		})
	}
}

// A jailed agent that fails to start is reported like any other: the
// last lines of its stderr, its environment's values redacted.
func TestJailedAgentThatFailsToStartSaysWhy(t *testing.T) {
	r, _ := jailedRig(t)
	checkStartFailure(t, r, nil)
}

//go:build linux

package jail_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

func marker(t testing.TB) string {
	b := make([]byte, 8)
	rand.Read(b)
	return "agentry-test-" + hex.EncodeToString(b)
}

// An agent that ignores SIGTERM and forks children that do too: after
// Stop, none of them is left.
func TestStopKillsTheWholeJail(t *testing.T) {
	needJail(t)
	m := marker(t)
	ev := newEvents()
	p, err := newAgent(t, jail.AgentOptions{}).Launch(context.Background(), jail.Spec{
		Argv: []string{"/bin/sh", "-c", stubborn}, Env: []string{"MARKER=" + m},
		Workspace: reachableDir(t), Events: ev.add,
	})
	if err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(p.Stdout()).ReadString('\n'); line != "up\n" {
		t.Fatalf("the agent said %q; stderr %s", line, p.StderrTail())
	}
	// A terminal command in the jail, which ignores SIGTERM as well.
	cmd, err := p.Command(context.Background(), []string{"/bin/sh", "-c", "trap '' TERM; echo on; while :; do sleep 1; done"}, "", []string{"MARKER=" + m})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "on\n" {
		t.Fatalf("the command said %q", line)
	}
	before := processesWith(m)
	if len(before) < 5 { // sh, three children, the command's sh (sleeps come and go)
		t.Fatalf("%d processes carry the marker before Stop; want at least 5", len(before))
	}
	for _, pid := range before {
		if uid := hostUID(pid); uid == 0 {
			t.Errorf("jailed pid %d runs as host root", pid)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if left := processesWith(m); len(left) > 0 {
		t.Errorf("after Stop, %d jailed processes are left: %v", len(left), left)
	}
	if err := cmd.Wait(); err == nil {
		t.Errorf("the command's Wait returned nil; it was killed")
	}
	select {
	case <-p.Done():
	default:
		t.Errorf("Done is not closed after Stop")
	}
	if err := p.Err(); err != nil {
		t.Errorf("Err after Stop = %v; want nil", err)
	}
	st := ev.waitFor(t, "jail.stopped", func(e event.Event) bool { return e.Type == jail.TypeStopped }).Payload.(*jail.Stopped)
	if st.How != "killed" || st.TookMs < 250 {
		t.Errorf("stopped event = %+v; want killed after the 300ms bound", st)
	}
	// Idempotent: a second Stop returns at once, and reports nothing new.
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	n := 0
	for _, e := range ev.all() {
		if e.Type == jail.TypeStopped {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d stopped events; want 1", n)
	}
	if _, err := p.Command(context.Background(), []string{"true"}, "", nil); err == nil {
		t.Errorf("Command after Stop succeeded")
	}
}

// An agent that heeds SIGTERM ends at it, and Stop says so.
func TestStopTerminates(t *testing.T) {
	needJail(t)
	pr := launchProbe(t, newAgent(t, jail.AgentOptions{}), jail.Spec{})
	if err := pr.p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := pr.ev.waitFor(t, "jail.stopped", func(e event.Event) bool { return e.Type == jail.TypeStopped }).Payload.(*jail.Stopped)
	if st.How != "terminated" {
		t.Errorf("stopped event = %+v; want terminated", st)
	}
}

// An agent that crashes is reported: Done closes, Err says so, and the
// stopped event says it exited.
func TestAgentExit(t *testing.T) {
	needJail(t)
	ev := newEvents()
	p, err := newAgent(t, jail.AgentOptions{}).Launch(context.Background(), jail.Spec{
		Argv: []string{"/bin/sh", "-c", "echo boom >&2; exit 3"}, Workspace: reachableDir(t), Events: ev.add,
	})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "status 3") {
		t.Errorf("Err = %v; want the exit status", err)
	}
	if got := p.StderrTail(); got != "boom\n" {
		t.Errorf("StderrTail = %q", got)
	}
	st := ev.waitFor(t, "jail.stopped", func(e event.Event) bool { return e.Type == jail.TypeStopped }).Payload.(*jail.Stopped)
	if st.How != "exited" || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Errorf("stopped event = %+v", st)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("Stop after exit: %v", err)
	}
}

// No jailed process outlives the host: kill -9 the process that launched
// the agent (and a command), and they all go.
func TestNothingOutlivesTheHost(t *testing.T) {
	needJail(t)
	m := marker(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+m, "AGENTRY_JAIL_TEST_WS="+reachableDir(t))
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "up\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the helper said %q", line)
	}
	pids := processesWith(m)
	if len(pids) < 5 {
		t.Errorf("%d processes carry the marker; want the agent, its three children and the command", len(pids))
	}
	var fds []unix.PollFd
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
			defer unix.Close(fd)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// Each pidfd turns readable when its process exits.
	deadline := time.Now().Add(10 * time.Second)
	for _, f := range fds {
		one := []unix.PollFd{f}
		for {
			n, err := unix.Poll(one, int(time.Until(deadline)/time.Millisecond))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if n == 0 {
				var desc []string
				for _, pid := range processesWith(m) {
					b, _ := os.ReadFile("/proc/" + itoa(pid) + "/cmdline")
					st, _ := os.ReadFile("/proc/" + itoa(pid) + "/stat")
					desc = append(desc, strings.ReplaceAll(string(b), "\x00", " ")+" | "+string(st))
				}
				t.Fatalf("a jailed process outlived its host by 10s: %v", desc)
			}
			break
		}
	}
	if left := processesWith(m); len(left) > 0 {
		t.Errorf("jailed processes left after the host died: %v", left)
	}
}

func hostUID(pid int) int {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			n := 0
			for _, c := range f[1] {
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return -1
}

func itoa(n int) string { return strconv.Itoa(n) }

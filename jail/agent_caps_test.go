//go:build linux

package jail_test

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

// sandboxed is the agent profile with caps c; it fails under CI=true
// (skips elsewhere) when this machine cannot apply all of them.
func sandboxed(t *testing.T, c jail.Caps) *jail.Agent {
	t.Helper()
	needJail(t)
	a := newAgent(t, jail.AgentOptions{Caps: &c})
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("Agent.Close: %v", err)
		}
	})
	if gaps := a.Gaps(); len(gaps) > 0 {
		fail(t, "the jail cannot apply every cap here: %v", gaps)
	}
	return a
}

// ioUring calls io_uring_setup through ctypes and returns errno.
const ioUring = `import ctypes, ctypes.util
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, params)
result = ctypes.get_errno() if fd < 0 else "opened fd %d" % fd`

func TestSandboxedAgentGetsTheFilter(t *testing.T) {
	j := sandboxed(t, jail.Caps{})
	pr := launchProbe(t, j, jail.Spec{Label: "seccomp"})
	// EPERM is 1: the filter refuses io_uring outright.
	if got := pr.must(t, ioUring); got != float64(1) {
		t.Fatalf("io_uring_setup in a sandboxed agent: %v; want errno 1 (EPERM)", got)
	}
	st := pr.ev.waitFor(t, "jail started", func(e event.Event) bool { return e.Type == jail.TypeStarted })
	js := st.Payload.(*jail.Started)
	for _, want := range []string{"seccomp", "memory", "pids", "cpu", "disk"} {
		if !strings.Contains(","+js.Applied+",", ","+want+",") {
			t.Errorf("jail_started applied=%q lacks %s", js.Applied, want)
		}
	}
	if js.NotApplied != "" {
		t.Errorf("jail_started notApplied=%q; want none", js.NotApplied)
	}

	// A terminal gets the filter too.
	cmd, err := pr.p.Command(context.Background(), []string{python, "-c", ioUring + "\nprint(result)"}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("io_uring_setup in a terminal: %q, %v; want errno 1", out, err)
	}
}

func TestSandboxedAgentWithoutCapsHasIOUring(t *testing.T) {
	// The same call in a jail with no Caps is not refused with EPERM:
	// so the test above sees the filter, not something else.
	needJail(t)
	pr := launchProbe(t, newAgent(t, jail.AgentOptions{}), jail.Spec{Label: "plain"})
	if got := pr.must(t, ioUring); got == float64(1) {
		t.Fatalf("io_uring_setup without Caps got EPERM too; the test cannot tell the filter apart")
	}
}

func TestSandboxedMemoryCap(t *testing.T) {
	j := sandboxed(t, jail.Caps{Memory: 64 << 20, Disk: 1 << 20})
	pr := launchProbe(t, j, jail.Spec{Label: "memory"})
	// A terminal filling 200 MiB is killed by the kernel at the agent's
	// cap: terminals share the agent's group.
	cmd, err := pr.p.Command(context.Background(), []string{python, "-c", "x = bytearray(200 << 20); x[::4096] = b'a' * len(x[::4096]); print('survived')"}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "survived") {
		t.Fatalf("a terminal allocating 200 MiB under a 65 MiB cap: %q, %v; want it killed", out, err)
	}
	// The agent itself is capped: allocating past the cap ends it.
	req := `{"code": "x = bytearray(200 << 20)\nx[::4096] = b'a' * len(x[::4096])\nresult = 'survived'"}` + "\n"
	if _, err := pr.p.Stdin().Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(pr.out).ReadString('\n')
	if strings.Contains(line, "survived") {
		t.Fatalf("the agent allocated 200 MiB under a 65 MiB cap: %q", line)
	}
	select {
	case <-pr.p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the agent over its memory cap is still running")
	}
}

func TestSandboxedDiskCap(t *testing.T) {
	j := sandboxed(t, jail.Caps{Disk: 4 << 20})
	pr := launchProbe(t, j, jail.Spec{Label: "disk"})
	err := pr.mustFail(t, "f = open('/tmp/big', 'wb')\nfor _ in range(8): f.write(b'x' * (1 << 20))\nf.flush()\nf.close()")
	if !strings.Contains(err.Error(), "No space left") {
		t.Fatalf("writing 8 MiB to /tmp under a 4 MiB disk cap: %v; want ENOSPC", err)
	}
	pr.must(t, "os.remove('/tmp/big')\nopen(os.environ['HOME'] + '/small', 'w').write('ok')")
	err = pr.mustFail(t, "f = open(os.environ['HOME'] + '/big', 'wb')\nfor _ in range(8): f.write(b'x' * (1 << 20))\nf.flush()\nf.close()")
	if !strings.Contains(err.Error(), "No space left") {
		t.Fatalf("writing 8 MiB to HOME under a 4 MiB disk cap: %v; want ENOSPC", err)
	}
}

func TestNewAgentRefusesBadCaps(t *testing.T) {
	for _, c := range []jail.Caps{{Memory: -1}, {Disk: 1000}, {CPUs: -1}} {
		if _, err := jail.NewAgent(jail.AgentOptions{Caps: &c}); err == nil {
			t.Errorf("NewAgent with Caps %+v accepted", c)
		}
	}
}

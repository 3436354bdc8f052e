package local_test

import (
	"testing"
	"time"

	"github.com/agentry-dev/agentry/code/local"
)

// A jailed execute reports what its session's control group counted: the
// CPU time of this execute (not the ones before it) and the session's
// peak memory.
func TestJailReportsSandboxUsage(t *testing.T) {
	t.Parallel()
	s := start(t, local.NewInterpreter(jailed(t, options(t))), "python")
	busy := "import time\nend = time.process_time() + 0.3\nx = bytearray(64 << 20)\nwhile time.process_time() < end: pass\nprint('done')"
	first := run(t, s, busy)
	if !first.OK || first.Sandbox == nil {
		t.Fatalf("a jailed execute reported no sandbox usage: %+v", first)
	}
	if cpu := first.Sandbox.CPU; cpu < 250*time.Millisecond || cpu > 30*time.Second {
		t.Fatalf("CPU %v for 0.3 s of work", cpu)
	}
	if peak := first.Sandbox.PeakMemory; peak < 64<<20 {
		t.Fatalf("peak memory %d after holding 64 MiB", peak)
	}
	idle := run(t, s, "print('idle')")
	if idle.Sandbox == nil || idle.Sandbox.CPU >= first.Sandbox.CPU {
		t.Fatalf("an idle execute counted %+v: the CPU of the one before it is in it", idle.Sandbox)
	}
	// Unjailed, nothing counts: absent, not zero.
	u := start(t, local.NewInterpreter(options(t)), "python")
	if res := run(t, u, "print(1)"); res.Sandbox != nil {
		t.Fatalf("an unjailed execute reported %+v", res.Sandbox)
	}
}

//go:build linux

package jail

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cgroups opens this test's runner groups, or — where the machine has
// none that can be used — skips, except under CI=true, where a missing
// hierarchy fails the test.
func testCgroups(t *testing.T) *cgroups {
	t.Helper()
	c := openCgroups()
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	if gaps := c.Gaps(); len(gaps) != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cgroups cannot cap sessions here: %v", gaps)
		}
		t.Skipf("cgroups cannot cap sessions here: %v", gaps)
	}
	return c
}

func TestCgroupSession(t *testing.T) {
	c := testCgroups(t)
	g, err := c.Session(cellLimits{Memory: 64 << 20, Processes: 16, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	// A parent with a child: Enter takes both.
	cmd := exec.Command("sh", "-c", "sleep 60 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var kid int
	for kid == 0 { // the shell forks at once; wait for it, bounded
		if k := children(cmd.Process.Pid); len(k) > 0 {
			kid = k[0]
		}
	}
	if err := g.Enter(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{cmd.Process.Pid, kid} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range g.dirs {
			name := filepath.Base(filepath.Dir(d)) + "/" + filepath.Base(d)
			if !strings.Contains(string(b), name) {
				t.Fatalf("process %d is not in %s:\n%s", pid, d, b)
			}
		}
	}
	limit := func(file string) string {
		for _, d := range g.dirs {
			if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		return ""
	}
	if c.Version() == 1 {
		if limit("memory.limit_in_bytes") != strconv.Itoa(64<<20) || limit("pids.max") != "16" || limit("cpu.cfs_quota_us") != "50000" {
			t.Fatalf("limits: memory %s pids %s cpu %s", limit("memory.limit_in_bytes"), limit("pids.max"), limit("cpu.cfs_quota_us"))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // Remove killed it
	for _, d := range c.dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() {
				t.Fatalf("%s left in %s", e.Name(), d)
			}
		}
	}
}

func TestSweepCgroups(t *testing.T) {
	c := testCgroups(t)
	me := Self()
	// Another test process (go test runs packages side by side) sweeps
	// the same bases and may take these dead groups first; then the
	// round proves nothing about this sweep, and is run again.
	for round := 1; ; round++ {
		dead := Owner{Pid: me.Pid, Start: me.Start + uint64(round)}
		var stale []string
		seen := map[string]bool{}
		for _, d := range c.dirs {
			base := filepath.Dir(d)
			if seen[base] {
				continue
			}
			seen[base] = true
			s := filepath.Join(base, "agentry-"+dead.String()+"-7")
			if err := os.MkdirAll(filepath.Join(s, "s1"), 0o755); err != nil {
				t.Fatal(err)
			}
			stale = append(stale, s)
		}
		got := sweepCgroups(context.Background())
		if len(got.Failed) != 0 {
			t.Fatal(got.Failed)
		}
		for _, s := range stale {
			if _, err := os.Stat(s); !os.IsNotExist(err) {
				t.Fatalf("%s survived the sweep", s)
			}
		}
		for _, d := range c.dirs {
			if _, err := os.Stat(d); err != nil {
				t.Fatalf("the live runner's group %s was swept: %v", d, err)
			}
		}
		swept := 0
		for _, s := range stale {
			if slices.Contains(got.Paths, s) {
				swept++
			}
		}
		if swept == len(stale) {
			return
		}
		if round == 5 {
			t.Fatalf("five rounds, and each time another process swept first: this sweep reported %v of %v", got.Paths, stale)
		}
	}
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add("4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/user.slice\n")
	f.Add("::\n9:name=systemd:/\n")
	f.Fuzz(func(t *testing.T, s string) {
		for k, v := range parseProcCgroup(s) {
			if !strings.HasPrefix(v, "/") || strings.Contains(k, ",") {
				t.Fatalf("parseProcCgroup(%q) gave %q → %q", s, k, v)
			}
		}
	})
}

func FuzzParseCgroupMounts(f *testing.F) {
	f.Add("35 25 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n36 25 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
	f.Add(" - cgroup")
	f.Fuzz(func(t *testing.T, s string) {
		for _, m := range parseCgroupMounts(s) {
			if m.v2 && len(m.controllers) > 0 {
				t.Fatalf("a cgroup2 mount with v1 controllers: %+v", m)
			}
		}
	})
}

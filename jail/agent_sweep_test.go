//go:build linux

package jail_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

// cappedIn is the agent profile with the default caps and its cells in
// dir; it fails under CI=true (skips elsewhere) when this machine cannot
// apply them all.
func cappedIn(t *testing.T, dir string, events func(event.Event)) *jail.Agent {
	t.Helper()
	needJail(t)
	a := newAgent(t, jail.AgentOptions{Dir: dir, Caps: &jail.Caps{}, Events: events})
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

// mounted reports whether anything is mounted at or below dir.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return true
		}
	}
	return false
}

// groupsOf lists the control groups agentry process owner made below
// this process's groups, in every hierarchy: its runner groups
// (agentry-<owner>-N) and their session groups.
func groupsOf(t *testing.T, owner jail.Owner) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		pattern := filepath.Join("/sys/fs/cgroup", "*", parts[2], "agentry-"+owner.String()+"-*")
		runners, _ := filepath.Glob(pattern)
		for _, r := range runners {
			out = append(out, r)
			sessions, _ := filepath.Glob(filepath.Join(r, "s*"))
			out = append(out, sessions...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// An agent's cell — its directory, the tmpfs of its disk cap, its control
// group — is there while it runs, and gone once it stops: a graceful end
// leaves nothing to sweep.
func TestCellIsReleasedAtStop(t *testing.T) {
	dir := reachableDir(t)
	a := cappedIn(t, dir, nil)
	pr := launchProbe(t, a, jail.Spec{Label: "k1"})
	cells, _ := filepath.Glob(filepath.Join(dir, "agentry-agent-k1-*"))
	if len(cells) != 1 {
		t.Fatalf("the agent's cell: %v", cells)
	}
	if !mounted(t, cells[0]) {
		t.Fatal("the agent's disk cap is not mounted in its cell")
	}
	if o, err := jail.ReadOwner(cells[0]); err != nil || o != jail.Self() {
		t.Fatalf("the cell's owner: %+v, %v; want this process", o, err)
	}
	var sessions int
	for _, g := range groupsOf(t, jail.Self()) {
		if strings.HasPrefix(filepath.Base(g), "s") {
			sessions++
		}
	}
	if sessions == 0 {
		t.Fatal("the agent has no control group")
	}
	if err := pr.p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cells[0]); !os.IsNotExist(err) {
		t.Errorf("the cell outlived the agent: %v", err)
	}
	if mounted(t, cells[0]) {
		t.Error("the disk cap's tmpfs outlived the agent")
	}
	for _, g := range groupsOf(t, jail.Self()) {
		if strings.HasPrefix(filepath.Base(g), "s") {
			t.Errorf("the agent's control group %s outlived it", g)
		}
	}
}

// A host killed with SIGKILL cannot clean up: its agent dies with it, but
// the agent's cell (with its tmpfs mounted) and its control groups stay.
// The next Check sweeps them, says so in events, and leaves a live
// process's cells alone.
func TestCheckSweepsWhatAKilledHostLeft(t *testing.T) {
	dir := reachableDir(t)
	live := cappedIn(t, dir, nil)
	mine := launchProbe(t, live, jail.Spec{Label: "mine"})

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+marker(t), "AGENTRY_JAIL_TEST_WS="+reachableDir(t),
		"AGENTRY_JAIL_TEST_DIR="+dir, "AGENTRY_JAIL_TEST_CAPS=1")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "up\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the helper said %q", line)
	}
	dead, err := jail.ParseOwner(ownerOf(t, cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()

	left, _ := filepath.Glob(filepath.Join(dir, "agentry-agent-agent-*"))
	if len(left) != 1 || !mounted(t, left[0]) {
		t.Fatalf("the killed host's cell: %v (mounted: %v)", left, len(left) == 1 && mounted(t, left[0]))
	}
	if len(groupsOf(t, dead)) == 0 {
		// Any agentry process starting on this machine sweeps dead
		// processes' groups; one did it first. The cell above still
		// proves this sweep.
		t.Log("another process swept the killed host's control groups first")
	}

	var mu sync.Mutex
	var swept []*jail.RunnerSwept
	next := newAgent(t, jail.AgentOptions{Dir: dir, Caps: &jail.Caps{}, Events: func(e event.Event) {
		if p, ok := e.Payload.(*jail.RunnerSwept); ok && e.Type == jail.TypeRunnerSwept {
			mu.Lock()
			swept = append(swept, p)
			mu.Unlock()
		}
	}})
	t.Cleanup(func() { next.Close() })
	if err := next.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left[0]); !os.IsNotExist(err) {
		t.Errorf("the dead host's cell is still there: %v", err)
	}
	if mounted(t, left[0]) {
		t.Error("the dead host's tmpfs is still mounted")
	}
	if g := groupsOf(t, dead); len(g) != 0 {
		t.Errorf("the dead host's control groups are still there: %v", g)
	}
	mu.Lock()
	defer mu.Unlock()
	var dirs *jail.RunnerSwept
	for _, s := range swept {
		if s.What == "session-dirs" {
			dirs = s
		}
	}
	if dirs == nil || dirs.RunnerID != "agent-jail" || dirs.Removed != 1 || !slices.Equal(dirs.Owners, []int{dead.Pid}) {
		t.Errorf("sweep events: %+v", swept)
	}
	// The live agent's cell was left alone.
	mine.must(t, "open(os.environ['HOME'] + '/still', 'w').write('here')")
}

// ownerOf is the jail.Owner string of process pid ("pid-start").
func ownerOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return itoa(pid) + "-" + f[19]
}

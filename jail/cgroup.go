//go:build linux

package jail

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// cellLimits are what one session's processes may use together.
type cellLimits struct {
	Memory    int64   // bytes of memory, files in a tmpfs included; 0: no cap
	Processes int     // processes and threads at once; 0: no cap
	CPUs      float64 // cores' worth of CPU time per period; 0: no cap
}

// The controllers a session group uses, by the limit each enforces.
var controllers = []struct{ name, limit string }{
	{"memory", "memory cap"}, {"pids", "process cap"}, {"cpu", "CPU cap"},
}

// acctController counts CPU time on cgroup v1 where it is a hierarchy of
// its own (cpuacct apart from cpu): it caps nothing, so its absence is no
// gap; the sandbox's CPU time then reads 0. Under v2, cpu.stat is always
// there.
const acctController = "cpuacct"

// cgroups is one runner's share of this machine's control groups: a group
// of its own below the groups this process is in, holding one group per
// session. It uses cgroup v2 where this process's v2 group can delegate
// the memory, pids and cpu controllers, and the v1 hierarchies otherwise;
// a controller it can use in neither way is a gap, stated by [cgroups.Gaps],
// never a silent omission. Safe for concurrent use.
type cgroups struct {
	version int               // 2 or 1; 0 when no controller is usable
	dirs    map[string]string // controller → this runner's group (v2: every controller → one dir)
	gaps    map[string]string // controller → why it cannot be used here

	next   atomic.Uint64
	closed sync.Once
}

var runners atomic.Uint64

// openCgroups makes this runner's groups. It does not fail: what it cannot
// use is reported by Gaps, and Session then caps only what it can.
func openCgroups() *cgroups {
	c := &cgroups{dirs: map[string]string{}, gaps: map[string]string{}}
	name := "agentry-" + Self().String() + "-" + strconv.FormatUint(runners.Add(1), 10)
	own, mounts, err := ownGroups()
	if err != nil {
		for _, k := range controllers {
			c.gaps[k.name] = err.Error()
		}
		return c
	}
	if dir, why := openV2(own, mounts, name); dir != "" {
		c.version = 2
		for _, k := range controllers {
			c.dirs[k.name] = dir
		}
		return c
	} else if why != "" {
		c.gaps["v2"] = why
	}
	for _, k := range controllers {
		base, ok := v1Dir(own, mounts, k.name)
		if !ok {
			c.gaps[k.name] = "no writable cgroup v1 " + k.name + " hierarchy and no delegated cgroup v2 group"
			continue
		}
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.gaps[k.name] = fmt.Sprintf("cannot make a group in the cgroup v1 %s hierarchy (%v); run agentry as root or delegate a cgroup to its user", k.name, err)
			continue
		}
		c.dirs[k.name] = dir
		c.version = 1
	}
	delete(c.gaps, "v2")
	if base, ok := v1Dir(own, mounts, acctController); ok && c.version == 1 {
		dir := filepath.Join(base, name)
		if dir != c.dirs["cpu"] && os.Mkdir(dir, 0o755) == nil {
			c.dirs[acctController] = dir
		}
	}
	return c
}

// Version is 2 or 1, or 0 when no controller could be used.
func (c *cgroups) Version() int { return c.version }

// Gaps names each limit that cannot be applied here, with the reason:
// "memory cap" → "no writable cgroup v1 memory hierarchy …".
func (c *cgroups) Gaps() map[string]string {
	out := map[string]string{}
	for _, k := range controllers {
		if why, ok := c.gaps[k.name]; ok {
			out[k.limit] = why
		}
	}
	return out
}

// Session makes a group for one session with limits l. What Gaps names
// is left uncapped.
func (c *cgroups) Session(l cellLimits) (*cgroup, error) {
	name := "s" + strconv.FormatUint(c.next.Add(1), 10)
	g := &cgroup{version: c.version}
	made := map[string]string{} // parent dir → session dir, once per distinct hierarchy
	for _, k := range controllers {
		base, ok := c.dirs[k.name]
		if !ok {
			continue
		}
		dir, ok := made[base]
		if !ok {
			dir = filepath.Join(base, name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				g.Remove(context.Background())
				return nil, fmt.Errorf("jail: making the session's %s cgroup: %w", k.name, err)
			}
			made[base] = dir
			g.dirs = append(g.dirs, dir)
		}
		if err := g.limit(k.name, dir, l); err != nil {
			g.Remove(context.Background())
			return nil, err
		}
		switch k.name {
		case "memory":
			g.memory = dir
		case "cpu":
			g.cpu = dir
		}
	}
	if base, ok := c.dirs[acctController]; ok {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.Remove(context.Background())
			return nil, fmt.Errorf("jail: making the session's cpuacct cgroup: %w", err)
		}
		g.dirs = append(g.dirs, dir)
		g.acct = dir
	}
	return g, nil
}

func controllerNames() []string {
	out := make([]string, 0, len(controllers))
	for _, k := range controllers {
		out = append(out, k.name)
	}
	return out
}

// Close removes the runner's own groups; the sessions' must be gone.
func (c *cgroups) Close() error {
	var errs []error
	c.closed.Do(func() {
		seen := map[string]bool{}
		for _, d := range c.dirs {
			if seen[d] {
				continue
			}
			seen[d] = true
			if err := syscall.Rmdir(d); err != nil && err != syscall.ENOENT {
				errs = append(errs, fmt.Errorf("jail: removing the runner's cgroup %s: %w", d, err))
			}
		}
	})
	return errors.Join(errs...)
}

// cgroup is one session's control group (one per v1 hierarchy).
type cgroup struct {
	version int
	dirs    []string
	memory  string // the dir holding the memory controller; "" when uncapped
	cpu     string // the dir holding the cpu controller; "" when uncapped
	acct    string // v1: the dir holding cpuacct when it is apart from cpu
}

// Usage is the CPU time the group's processes have spent since it was
// made, and the most memory they held at once, as the kernel counts them
// (cgroup v2: cpu.stat and memory.peak; v1: cpuacct.usage where cpuacct
// shares the cpu hierarchy, and memory.max_usage_in_bytes). A count the
// kernel does not keep here reads 0.
func (g *cgroup) Usage() (cpu time.Duration, peak int64) {
	if g == nil {
		return 0, 0
	}
	read := func(dir, file string) string {
		if dir == "" {
			return ""
		}
		b, _ := os.ReadFile(filepath.Join(dir, file))
		return strings.TrimSpace(string(b))
	}
	num := func(s string) int64 {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	if g.version == 2 {
		cpu = time.Duration(counter(read(g.cpu, "cpu.stat"), "usage_usec")) * time.Microsecond
		return cpu, num(read(g.memory, "memory.peak"))
	}
	acct := g.cpu
	if g.acct != "" {
		acct = g.acct
	}
	return time.Duration(num(read(acct, "cpuacct.usage"))), num(read(g.memory, "memory.max_usage_in_bytes"))
}

func (g *cgroup) limit(ctrl, dir string, l cellLimits) error {
	set := func(file, value string) error {
		if err := writeFile(filepath.Join(dir, file), value); err != nil {
			return fmt.Errorf("jail: setting the session's %s: %w", file, err)
		}
		return nil
	}
	switch {
	case ctrl == "memory" && l.Memory > 0:
		v := strconv.FormatInt(l.Memory, 10)
		if g.version == 2 {
			if err := set("memory.max", v); err != nil {
				return err
			}
			_ = set("memory.swap.max", "0") // absent without swap accounting
			return nil
		}
		if err := set("memory.limit_in_bytes", v); err != nil {
			return err
		}
		// With swap accounting, swap counts too; without it the file is
		// absent and there is nothing to count.
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
			return set("memory.memsw.limit_in_bytes", v)
		}
	case ctrl == "pids" && l.Processes > 0:
		return set("pids.max", strconv.Itoa(l.Processes))
	case ctrl == "cpu" && l.CPUs > 0:
		const period = 100000
		quota := strconv.FormatInt(max(int64(l.CPUs*period), 1000), 10)
		if g.version == 2 {
			return set("cpu.max", quota+" "+strconv.Itoa(period))
		}
		if err := set("cpu.cfs_period_us", strconv.Itoa(period)); err != nil {
			return err
		}
		return set("cpu.cfs_quota_us", quota)
	}
	return nil
}

// Enter moves process pid and all its descendants into the group. Call it
// while they cannot fork behind its back (bubblewrap blocked on
// --block-fd): each process is moved before its children are listed, so
// one forked meanwhile is born inside.
func (g *cgroup) Enter(pid int) error {
	if g == nil || len(g.dirs) == 0 {
		return nil
	}
	for _, d := range g.dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return nil
			}
			return fmt.Errorf("jail: moving a session's process into its cgroup: %w", err)
		}
	}
	for _, kid := range children(pid) {
		if err := g.Enter(kid); err != nil {
			return err
		}
	}
	return nil
}

// Procs lists the group's cgroup.procs files, one per hierarchy: a
// process that writes its own pid to each (as root, before it runs
// anything else) joins the group with whatever it starts later.
func (g *cgroup) Procs() []string {
	if g == nil {
		return nil
	}
	out := make([]string, 0, len(g.dirs))
	for _, d := range g.dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

func children(pid int) []int {
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(f); err == nil {
				out = append(out, k)
			}
		}
	}
	return out
}

// OOMKills is how many of the group's processes the kernel has killed for
// going over its memory cap.
func (g *cgroup) OOMKills() int {
	if g == nil || g.memory == "" {
		return 0
	}
	file := "memory.oom_control"
	if g.version == 2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(g.memory, file))
	if err != nil {
		return 0
	}
	return counter(string(b), "oom_kill")
}

func counter(text, name string) int {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// Remove kills whatever is still in the group and deletes it, waiting for
// the kernel to let the last processes go (bounded by ctx).
func (g *cgroup) Remove(ctx context.Context) error {
	if g == nil {
		return nil
	}
	var errs []error
	for _, d := range g.dirs {
		if err := removeGroup(ctx, d, g.version); err != nil {
			errs = append(errs, err)
		}
	}
	g.dirs = nil
	return errors.Join(errs...)
}

func removeGroup(ctx context.Context, dir string, version int) error {
	if version == 2 {
		_ = writeFile(filepath.Join(dir, "cgroup.kill"), "1")
	}
	wait := 100 * time.Microsecond
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		err := syscall.Rmdir(dir)
		if err == nil || err == syscall.ENOENT {
			return nil
		}
		if err != syscall.EBUSY {
			return fmt.Errorf("jail: removing the session's cgroup %s: %w", dir, err)
		}
		// Killed processes leave the group once the kernel has torn
		// them down; there is no notification for that in v1.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("jail: the session's cgroup %s still held processes when the deadline came: %w", dir, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// sweepCgroups removes the runner groups ([openCgroups]) that processes
// no longer alive left below this process's groups, killing anything
// still inside them. Groups of live processes are never touched.
func sweepCgroups(ctx context.Context) swept {
	var out swept
	own, mounts, err := ownGroups()
	if err != nil {
		return out
	}
	var bases []string
	seen := map[string]bool{}
	if d := v2Own(own, mounts); d != "" {
		bases = append(bases, d)
		seen[d] = true
	}
	for _, name := range append(controllerNames(), acctController) {
		if d, ok := v1Dir(own, mounts, name); ok && !seen[d] {
			bases = append(bases, d)
			seen[d] = true
		}
	}
	for _, base := range bases {
		ents, err := os.ReadDir(base)
		if err != nil {
			continue
		}
		for _, e := range ents {
			o, ok := groupOwner(e.Name())
			if !e.IsDir() || !ok || o.Alive() {
				continue
			}
			dir := filepath.Join(base, e.Name())
			version := 1
			if strings.Contains(base, "unified") || isV2(dir) {
				version = 2
			}
			kids, _ := os.ReadDir(dir)
			var errs []error
			for _, k := range kids {
				if k.IsDir() {
					errs = append(errs, removeGroup(ctx, filepath.Join(dir, k.Name()), version))
				}
			}
			errs = append(errs, removeGroup(ctx, dir, version))
			if err := errors.Join(errs...); err != nil {
				out.Failed = append(out.Failed, err)
				continue
			}
			out.add(dir, o)
		}
	}
	return out
}

// groupOwner reads the owner out of a runner group's name,
// "agentry-<pid>-<start>-<n>".
func groupOwner(name string) (Owner, bool) {
	rest, ok := strings.CutPrefix(name, "agentry-")
	if !ok {
		return Owner{}, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return Owner{}, false
	}
	if _, err := strconv.ParseUint(rest[i+1:], 10, 64); err != nil {
		return Owner{}, false
	}
	o, err := ParseOwner(rest[:i])
	return o, err == nil
}

func isV2(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cgroup.controllers"))
	return err == nil
}

// cgroupMount is one cgroup file system in the mount table.
type cgroupMount struct {
	point       string
	v2          bool
	controllers []string // v1: what the hierarchy carries
}

// ownGroups reads which group this process is in per hierarchy
// ("memory" → "/process_api/…", "" → the v2 path) and the cgroup mounts.
func ownGroups() (map[string]string, []cgroupMount, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, nil, fmt.Errorf("no /proc/self/cgroup (%v); control groups need Linux with /proc mounted", err)
	}
	own := parseProcCgroup(string(b))
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, fmt.Errorf("no mount table (%v)", err)
	}
	return own, parseCgroupMounts(string(mi)), nil
}

// parseProcCgroup reads /proc/<pid>/cgroup: "4:memory:/a/b" gives
// "memory" → "/a/b"; "1:cpu,cpuacct:/" gives both; the v2 line "0::/x"
// gives "" → "/x".
func parseProcCgroup(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// parseCgroupMounts picks the cgroup and cgroup2 mounts out of
// /proc/self/mountinfo.
func parseCgroupMounts(info string) []cgroupMount {
	var out []cgroupMount
	for _, line := range strings.Split(info, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		m := cgroupMount{point: unescapeMount(f[4])}
		switch g[0] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if o != "rw" && o != "ro" && !strings.Contains(o, "=") {
					m.controllers = append(m.controllers, o)
				}
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

func v1Dir(own map[string]string, mounts []cgroupMount, ctrl string) (string, bool) {
	path, ok := own[ctrl]
	if !ok {
		return "", false
	}
	for _, m := range mounts {
		if m.v2 {
			continue
		}
		for _, c := range m.controllers {
			if c == ctrl {
				dir := filepath.Join(m.point, path)
				if syscall.Access(dir, 2 /* W_OK */) != nil {
					return "", false
				}
				return dir, true
			}
		}
	}
	return "", false
}

func v2Own(own map[string]string, mounts []cgroupMount) string {
	path, ok := own[""]
	if !ok {
		return ""
	}
	for _, m := range mounts {
		if m.v2 {
			return filepath.Join(m.point, path)
		}
	}
	return ""
}

// openV2 makes the runner's group in this process's v2 group when that
// group offers memory, pids and cpu and lets them be delegated below it.
// why is empty when v2 simply has none of them (a hybrid machine's unused
// v2 mount).
func openV2(own map[string]string, mounts []cgroupMount, name string) (dir, why string) {
	base := v2Own(own, mounts)
	if base == "" {
		return "", ""
	}
	b, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return "", ""
	}
	have := strings.Fields(string(b))
	for _, k := range controllers {
		if !contains(have, k.name) {
			return "", ""
		}
	}
	enable := "+memory +pids +cpu"
	if err := writeFile(filepath.Join(base, "cgroup.subtree_control"), enable); err != nil {
		return "", fmt.Sprintf("this process's cgroup v2 group %s cannot delegate controllers (%v); run agentry in a leaf group of a delegated subtree", base, err)
	}
	dir = filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Sprintf("cannot make a cgroup v2 group below %s (%v)", base, err)
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), enable); err != nil {
		_ = syscall.Rmdir(dir)
		return "", fmt.Sprintf("cannot delegate controllers below %s (%v)", dir, err)
	}
	return dir, ""
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// writeFile writes one value to a control file (which must exist).
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

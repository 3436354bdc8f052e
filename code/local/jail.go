package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/internal/sandbox"
)

// ErrNoJail is wrapped by every refusal to run jailed: bwrap or prlimit
// is missing, or bubblewrap cannot build a jail on this machine.
var ErrNoJail = errors.New("local: cannot jail")

// Where the session's directories appear inside a jail.
const (
	jailWork = "/work"
	jailTmp  = "/tmp"
)

type jailSettings struct {
	bwrap    string
	prlimit  string
	limits   []string // prlimit flags
	uid, gid int
	dropRoot bool
	readOnly []string
	prefixes []string // host paths visible in the jail (for program lookups)
	j        Jail     // with the defaults applied
	session  sandbox.Limits
	disk     int64

	probeMu sync.Mutex
	probed  bool
	// userns: bwrap can stop the code from making user namespaces of its
	// own (--disable-userns, bubblewrap ≥ 0.8).
	userns bool
	// What the probe found this machine can enforce per session.
	cg      *sandbox.Cgroups // nil until probed
	tmpfs   bool             // a size-capped tmpfs holds /work and /tmp
	gaps    []Gap            // limits that cannot apply here
	applied []string         // limits that do
}

// Gap is a limit the jail cannot apply on this machine, and why. A jailed
// runner states its gaps at start (in [Interpreter.Describe] and an
// agentry.runner.limits event) rather than run without them quietly.
type Gap struct {
	Limit string `json:"limit"` // "memory cap", "disk cap", …
	Why   string `json:"why"`
}

func newJailSettings(j Jail) (*jailSettings, error) {
	if j.Memory == 0 {
		j.Memory = DefaultJailMemory
	}
	if j.Processes == 0 {
		j.Processes = DefaultJailProcesses
	}
	if j.CPU == 0 {
		j.CPU = DefaultJailCPU
	}
	if j.FileSize == 0 {
		j.FileSize = DefaultJailFileSize
	}
	if j.OpenFiles == 0 {
		j.OpenFiles = DefaultJailOpenFiles
	}
	if j.UID == 0 {
		j.UID = DefaultJailID
	}
	if j.SessionMemory == 0 {
		j.SessionMemory = DefaultSessionMemory
	}
	if j.SessionProcesses == 0 {
		j.SessionProcesses = DefaultSessionProcesses
	}
	if j.SessionCPUs == 0 {
		j.SessionCPUs = DefaultSessionCPUs
	}
	if j.Disk == 0 {
		j.Disk = DefaultSessionDisk
	}
	if j.SessionMemory < 0 || j.SessionProcesses < 0 || j.SessionCPUs < 0 || j.Disk < 0 {
		return nil, fmt.Errorf("local: a Jail session limit is negative; use 0 for the default or a positive value")
	}
	if j.GID == 0 {
		j.GID = DefaultJailID
	}
	if j.Memory < 0 || j.Processes < 0 || j.CPU < 0 || j.FileSize < 0 || j.OpenFiles < 0 || j.UID < 0 || j.GID < 0 {
		return nil, fmt.Errorf("local: a Jail limit is negative; use 0 for the default or a positive value")
	}
	cpu := int64((j.CPU + time.Second - 1) / time.Second)
	s := &jailSettings{
		bwrap: j.Bwrap,
		limits: []string{
			"--as=" + strconv.FormatInt(j.Memory, 10),
			"--nproc=" + strconv.Itoa(j.Processes),
			"--cpu=" + strconv.FormatInt(cpu, 10),
			"--fsize=" + strconv.FormatInt(j.FileSize, 10),
			"--nofile=" + strconv.Itoa(j.OpenFiles),
			"--core=0",
		},
		uid:      j.UID,
		gid:      j.GID,
		dropRoot: os.Geteuid() == 0,
		prefixes: []string{"/usr"},
		j:        j,
		// Files in /work and /tmp live in memory (tmpfs) and the kernel
		// counts them against the memory cap: the cgroup holds both, so a
		// session whose disk is full still has its memory.
		session: sandbox.Limits{Memory: j.SessionMemory + j.Disk, Processes: j.SessionProcesses, CPUs: j.SessionCPUs},
		disk:    j.Disk,
	}
	if s.bwrap == "" {
		s.bwrap = "bwrap"
	}
	for _, p := range j.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("local: Jail.ReadOnly path %q is not absolute", p)
		}
		p = filepath.Clean(p)
		s.readOnly = append(s.readOnly, p)
		s.prefixes = append(s.prefixes, p)
	}
	for _, d := range sandbox.SystemDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			s.prefixes = append(s.prefixes, d)
		}
	}
	return s, nil
}

// CheckJail proves that bubblewrap can build jail j on this machine, the
// way a jailed runner's first Start does. The error wraps ErrNoJail and
// names the fix.
func CheckJail(ctx context.Context, j Jail) error {
	s, err := newJailSettings(j)
	if err != nil {
		return err
	}
	return s.ready(ctx)
}

// visible refuses a program the jail would not see.
func (j *jailSettings) visible(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	for _, p := range []string{path, real} {
		for _, pre := range j.prefixes {
			if p == pre || strings.HasPrefix(p, pre+"/") {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %s resolves to %s, which the jail does not mount; add its directory to Jail.ReadOnly", ErrNoJail, path, real)
}

// ready finds bwrap and prlimit, finds out which per-session limits this
// machine can enforce, and proves, once per runner, that bubblewrap can
// build this jail here with all of them. Success is cached; a failure is
// not, so a fixed machine recovers without a restart.
func (j *jailSettings) ready(ctx context.Context) error {
	j.probeMu.Lock()
	defer j.probeMu.Unlock()
	if j.probed {
		return nil
	}
	if _, err := sandbox.SeccompProgram(); err != nil {
		return fmt.Errorf("%w: %v; the jail filters system calls and has no filter for this machine", ErrNoJail, err)
	}
	bw, err := exec.LookPath(j.bwrap)
	if err != nil {
		return fmt.Errorf("%w: bubblewrap (%q) is not installed; install the Debian package bubblewrap (apt-get install bubblewrap) — the jailed runner never runs code unjailed", ErrNoJail, j.bwrap)
	}
	pl, err := lookPath("prlimit", JailPath)
	if err != nil {
		return fmt.Errorf("%w: prlimit is not in %s; install the Debian package util-linux — the jail sets its limits with it", ErrNoJail, JailPath)
	}
	j.bwrap, j.prlimit = bw, pl
	help, _ := exec.CommandContext(ctx, bw, "--help").CombinedOutput()
	j.userns = bytes.Contains(help, []byte("--disable-userns"))

	// What this machine lets us cap per session.
	var gaps []Gap
	cg := processCgroups()
	for _, limit := range []string{"memory cap", "process cap", "CPU cap"} {
		if why, ok := cg.Gaps()[limit]; ok {
			gaps = append(gaps, Gap{Limit: "session " + limit, Why: why})
		}
	}
	tmpfs := true
	if err := sandbox.CheckTmpfs(os.TempDir()); err != nil {
		tmpfs = false
		gaps = append(gaps, Gap{Limit: "disk cap", Why: err.Error()})
	}
	j.cg, j.tmpfs, j.gaps = cg, tmpfs, gaps
	fail := func(err error) error {
		j.cg = nil
		return err
	}

	truth, err := lookPath("true", JailPath)
	if err != nil {
		return fail(fmt.Errorf("%w: true(1) is not in %s; install the Debian package coreutils", ErrNoJail, JailPath))
	}
	d, err := newSessionDirs(os.TempDir(), "", j, "agentry-jail-probe-")
	if err != nil {
		return fail(err)
	}
	defer d.remove()
	if err := j.own(d); err != nil {
		return fail(err)
	}
	g, err := j.group()
	if err != nil {
		return fail(err)
	}
	defer g.Remove(context.Background())
	var out bytes.Buffer
	l, err := j.prepare(d, []string{truth}, []string{"PATH=" + JailPath}, nil, g)
	if err == nil {
		l.cmd.Stdout, l.cmd.Stderr = &out, &out
		err = l.start()
	}
	if err == nil {
		stop := context.AfterFunc(ctx, func() { _ = l.cmd.Process.Kill() })
		err = reap(l.cmd)
		stop()
	}
	if err != nil {
		return fail(fmt.Errorf("%w: bubblewrap could not build a jail here (%v: %s); it needs unprivileged user namespaces "+
			"(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; in a container, allow them in its seccomp/AppArmor profile) "+
			"and a kernel with seccomp filters", ErrNoJail, err, strings.TrimSpace(tail(out.String(), 400))))
	}
	j.applied = j.appliedLimits()
	j.probed = true
	return nil
}

// processCgroups is this process's one runner group (per hierarchy), which
// every jailed runner's sessions share; a later process sweeps it once
// this one is gone.
var processCgroups = sync.OnceValue(sandbox.OpenCgroups)

// appliedLimits says, in words, what every session of this jail gets.
func (j *jailSettings) appliedLimits() []string {
	out := []string{fmt.Sprintf("seccomp filter (%d system calls refused, after Docker's default profile)", len(sandbox.Denied))}
	gap := map[string]bool{}
	for _, g := range j.gaps {
		gap[g.Limit] = true
	}
	v := fmt.Sprintf("cgroup v%d", j.cg.Version())
	if !gap["session memory cap"] {
		out = append(out, fmt.Sprintf("session memory cap %s plus %s for files (%s)", sandbox.FormatSize(j.j.SessionMemory), sandbox.FormatSize(j.disk), v))
	}
	if !gap["session process cap"] {
		out = append(out, fmt.Sprintf("session process cap %d (%s)", j.session.Processes, v))
	}
	if !gap["session CPU cap"] {
		out = append(out, fmt.Sprintf("session CPU cap %s cores (%s)", strconv.FormatFloat(j.session.CPUs, 'f', -1, 64), v))
	}
	if j.tmpfs {
		out = append(out, fmt.Sprintf("disk cap %s for /work and /tmp together (tmpfs)", sandbox.FormatSize(j.disk)))
	}
	out = append(out, fmt.Sprintf("per process: address space %s, %d processes per jail, CPU time %s, file size %s, %d open files",
		sandbox.FormatSize(j.j.Memory), j.j.Processes, j.j.CPU, sandbox.FormatSize(j.j.FileSize), j.j.OpenFiles))
	return out
}

// group makes a new session's control group (nil-safe when none of the
// session caps can apply here).
func (j *jailSettings) group() (*sandbox.Group, error) {
	if j.cg == nil || j.cg.Version() == 0 {
		return nil, nil
	}
	g, err := j.cg.Session(j.session)
	if err != nil {
		return nil, fmt.Errorf("local: making the session's control group: %w", err)
	}
	return g, nil
}

// describe is the jail's statement of what it applies and what it cannot.
func (j *jailSettings) describe() string {
	var b strings.Builder
	b.WriteString("jailed with bubblewrap: ")
	b.WriteString(strings.Join(j.applied, "; "))
	for _, g := range j.gaps {
		fmt.Fprintf(&b, "; NOT APPLIED: %s (%s)", g.Limit, g.Why)
	}
	return b.String()
}

// args is bwrap's command line for running argv in session d's jail,
// with the seccomp filter read from descriptor seccompFD and, when
// blockFD ≥ 0, the code held back until a byte arrives on blockFD.
func (j *jailSettings) args(d sessionDirs, argv []string, seccompFD, blockFD int) []string {
	a := []string{
		"--unshare-all", "--unshare-user", // mount, PID, network, IPC, UTS, cgroup, user
		"--die-with-parent", "--new-session",
		"--hostname", "sandbox",
		"--seccomp", strconv.Itoa(seccompFD),
	}
	if blockFD >= 0 {
		a = append(a, "--block-fd", strconv.Itoa(blockFD))
	}
	if j.userns {
		a = append(a, "--disable-userns")
	}
	a = append(a, sandbox.SystemMounts()...)
	for _, p := range j.readOnly {
		a = append(a, "--ro-bind", p, p)
	}
	a = append(a,
		"--proc", "/proc",
		"--dev", "/dev",
		"--bind", d.work, jailWork,
		"--bind", d.tmp, jailTmp,
		// Nothing else is writable: not the root, not /dev.
		"--remount-ro", "/dev",
		"--remount-ro", "/",
		"--chdir", jailWork,
		"--", j.prlimit,
	)
	a = append(a, j.limits...)
	a = append(a, "--")
	return append(a, argv...)
}

// own hands the session's writable directories to the jail's user, when
// agentry runs as root and the jail drops to that user.
func (j *jailSettings) own(d sessionDirs) error {
	if !j.dropRoot {
		return nil
	}
	for _, p := range []string{d.root, d.work, d.tmp} {
		if err := os.Lchown(p, j.uid, j.gid); err != nil {
			return fmt.Errorf("local: giving the session directory to the jail's user %d: %w", j.uid, err)
		}
	}
	return nil
}

// view maps a host path under the session's work directory to the path
// the jailed code sees.
func (j *jailSettings) view(d sessionDirs, host string) string {
	rel, err := filepath.Rel(d.work, host)
	if err != nil || strings.HasPrefix(rel, "..") {
		return host
	}
	return filepath.Join(jailWork, rel)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

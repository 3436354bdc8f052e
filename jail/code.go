package jail

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// CodeOptions configure the code profile ([NewCode]). Zero values take
// the defaults. Memory, Processes, CPU, FileSize and OpenFiles are rlimits
// set inside the jail (with prlimit, from util-linux) on each process:
// they work without root, without cgroup delegation and in containers.
// The Session fields and Disk cap a session's processes together. Every
// jail also filters system calls (seccomp).
type CodeOptions struct {
	// Bwrap is the bubblewrap program (default "bwrap" on the host's PATH).
	Bwrap string
	// Memory is the address-space limit of each process, in bytes
	// (RLIMIT_AS, default 2 GiB).
	Memory int64
	// Processes limits the processes the jail's user may have in the
	// jail's own user namespace (RLIMIT_NPROC, default 64).
	Processes int
	// CPU limits the CPU time of each process (RLIMIT_CPU, default 10m).
	// For an interpreter it is the whole session's CPU time.
	CPU time.Duration
	// FileSize limits the size of any file written (RLIMIT_FSIZE,
	// default 1 GiB).
	FileSize int64
	// OpenFiles limits open descriptors per process (RLIMIT_NOFILE,
	// default 1024).
	OpenFiles int
	// UID and GID are the unprivileged ids the jail runs as when agentry
	// runs as root (default 65534, "nobody"). As any other user, the jail
	// runs as that user, which is already unprivileged.
	UID, GID int
	// ReadOnly lists extra host paths mounted read-only at the same place
	// (a virtualenv, a data set). The system (/usr, the libraries, a few
	// files of /etc) is always mounted read-only.
	ReadOnly []string

	// The session's caps, over all of its processes together, enforced
	// with a control group per session (cgroup v2 where delegated, v1
	// otherwise). Where this machine cannot enforce one, the jail says so
	// ([Code.Gaps]); it does not pretend.
	//
	// SessionMemory caps the memory of the session's processes
	// (default 1 GiB). The kernel counts the files in /work and /tmp as
	// memory (they live in a tmpfs), so the group's limit is
	// SessionMemory + Disk: a session whose disk is full keeps its memory.
	SessionMemory int64
	// SessionProcesses caps the processes and threads alive at once
	// (default 256).
	SessionProcesses int
	// SessionCPUs caps CPU use in cores (default 1).
	SessionCPUs float64
	// Disk caps what /work and /tmp hold together (default 1 GiB): they
	// are one tmpfs of that size, and a write past it fails with ENOSPC.
	// Mounting needs root (CAP_SYS_ADMIN); without it the cap is a stated
	// gap.
	Disk int64
}

// Defaults of the code profile's rlimits (per process) and of the caps of
// one cell (all its processes together, both profiles).
const (
	codeAddressSpace = 2 << 30
	codeProcesses    = 64
	codeCPUTime      = 10 * time.Minute
	codeOpenFiles    = 1024
	defaultFileSize  = 1 << 30

	defaultCellMemory    = 1 << 30
	defaultCellProcesses = 256
	defaultCellCPUs      = 1.0
	defaultCellDisk      = 1 << 30
)

// Where a code cell's directories appear inside its jail.
const (
	codeWork = "/work"
	codeTmp  = "/tmp"
)

// Code is the profile for model-written code: each session a cell whose
// "work" and "tmp" are the only writable places (/work, /tmp), no network
// at all, the session's caps on its cell, and every process run under
// prlimit as the unprivileged user. Safe for concurrent use.
type Code struct {
	bwrap    string
	prlimit  string
	limits   []string // prlimit flags
	uid, gid int
	dropRoot bool
	readOnly []string
	prefixes []string    // host paths visible in the jail (for program lookups)
	o        CodeOptions // with the defaults applied
	caps     cellLimits
	disk     int64

	probeMu sync.Mutex
	probed  bool
	userns  bool     // bwrap has --disable-userns (bubblewrap ≥ 0.8)
	cg      *cgroups // nil until probed
	tmpfs   bool     // a size-capped tmpfs holds /work and /tmp
	gaps    []Gap    // limits that cannot apply here
	applied []string // limits that do
}

// NewCode checks o and applies its defaults. It touches nothing on the
// machine: [Code.Ready] does.
func NewCode(o CodeOptions) (*Code, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	cpu := int64((o.CPU + time.Second - 1) / time.Second)
	c := &Code{
		bwrap: o.Bwrap,
		limits: []string{
			"--as=" + strconv.FormatInt(o.Memory, 10),
			"--nproc=" + strconv.Itoa(o.Processes),
			"--cpu=" + strconv.FormatInt(cpu, 10),
			"--fsize=" + strconv.FormatInt(o.FileSize, 10),
			"--nofile=" + strconv.Itoa(o.OpenFiles),
			"--core=0",
		},
		uid: o.UID, gid: o.GID,
		dropRoot: os.Geteuid() == 0,
		prefixes: []string{"/usr"},
		o:        o,
		// Files in /work and /tmp live in memory (tmpfs) and the kernel
		// counts them against the memory cap: the group holds both, so a
		// session whose disk is full still has its memory.
		caps: cellLimits{Memory: o.SessionMemory + o.Disk, Processes: o.SessionProcesses, CPUs: o.SessionCPUs},
		disk: o.Disk,
	}
	for _, p := range o.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("jail: CodeOptions.ReadOnly path %q is not absolute", p)
		}
		p = filepath.Clean(p)
		c.readOnly = append(c.readOnly, p)
		c.prefixes = append(c.prefixes, p)
	}
	for _, d := range systemDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			c.prefixes = append(c.prefixes, d)
		}
	}
	return c, nil
}

func (o *CodeOptions) defaults() error {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Memory, codeAddressSpace)
	def(&o.FileSize, defaultFileSize)
	def(&o.SessionMemory, defaultCellMemory)
	def(&o.Disk, defaultCellDisk)
	defInt(&o.Processes, codeProcesses)
	defInt(&o.OpenFiles, codeOpenFiles)
	defInt(&o.UID, defaultUID)
	defInt(&o.GID, defaultUID)
	defInt(&o.SessionProcesses, defaultCellProcesses)
	if o.CPU == 0 {
		o.CPU = codeCPUTime
	}
	if o.SessionCPUs == 0 {
		o.SessionCPUs = defaultCellCPUs
	}
	if o.Bwrap == "" {
		o.Bwrap = "bwrap"
	}
	if o.SessionMemory < 0 || o.SessionProcesses < 0 || o.SessionCPUs < 0 || o.Disk < 0 {
		return fmt.Errorf("jail: a CodeOptions session limit is negative; use 0 for the default or a positive value")
	}
	if o.Memory < 0 || o.Processes < 0 || o.CPU < 0 || o.FileSize < 0 || o.OpenFiles < 0 || o.UID < 0 || o.GID < 0 {
		return fmt.Errorf("jail: a CodeOptions limit is negative; use 0 for the default or a positive value")
	}
	return nil
}

// Visible refuses a program the jail would not see, naming the fix.
func (c *Code) Visible(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	for _, p := range []string{path, real} {
		for _, pre := range c.prefixes {
			if p == pre || strings.HasPrefix(p, pre+"/") {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %s resolves to %s, which the jail does not mount; add its directory to the jail's ReadOnly paths (local.Jail.ReadOnly)", ErrNoJail, path, real)
}

// Ready finds bwrap and prlimit, finds out which session caps this
// machine can enforce, and proves, once, that bubblewrap can build this
// jail here with all of them. Success is cached; a failure is not, so a
// fixed machine recovers without a restart. The error wraps [ErrNoJail]
// and names the fix.
func (c *Code) Ready(ctx context.Context) error {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	if c.probed {
		return nil
	}
	if err := c.findTools(ctx); err != nil {
		return err
	}
	c.cg, c.tmpfs, c.gaps = probeCaps()
	if err := c.probe(ctx); err != nil {
		c.cg = nil
		return err
	}
	c.applied = c.appliedLimits()
	c.probed = true
	return nil
}

// findTools finds bubblewrap and prlimit, and whether bubblewrap can
// forbid user namespaces.
func (c *Code) findTools(ctx context.Context) error {
	if _, err := seccompProgram(); err != nil {
		return fmt.Errorf("%w: %v; the jail filters system calls and has no filter for this machine", ErrNoJail, err)
	}
	bw, err := exec.LookPath(c.bwrap)
	if err != nil {
		return fmt.Errorf("%w: bubblewrap (%q) is not installed; install the Debian package bubblewrap (apt-get install bubblewrap) — the jailed runner never runs code unjailed", ErrNoJail, c.bwrap)
	}
	pl, err := lookPath("prlimit", DefaultPath)
	if err != nil {
		return fmt.Errorf("%w: prlimit is not in %s; install the Debian package util-linux — the jail sets its limits with it", ErrNoJail, DefaultPath)
	}
	c.bwrap, c.prlimit = bw, pl
	help, _ := exec.CommandContext(ctx, bw, "--help").CombinedOutput()
	c.userns = bytes.Contains(help, []byte("--disable-userns"))
	return nil
}

// codeCgroups is this process's one runner group (per hierarchy), which
// every code jail's sessions share; a later process sweeps it once this
// one is gone.
var codeCgroups = sync.OnceValue(openCgroups)

// probeCaps finds out what this machine lets a code jail cap per session.
func probeCaps() (*cgroups, bool, []Gap) {
	var gaps []Gap
	cg := codeCgroups()
	for _, limit := range []string{"memory cap", "process cap", "CPU cap"} {
		if why, ok := cg.Gaps()[limit]; ok {
			gaps = append(gaps, Gap{Limit: "session " + limit, Why: why})
		}
	}
	tmpfs := true
	if err := checkTmpfs(os.TempDir()); err != nil {
		tmpfs = false
		gaps = append(gaps, Gap{Limit: "disk cap", Why: err.Error()})
	}
	return cg, tmpfs, gaps
}

// probe runs true(1) in a jail built as a session's would be.
func (c *Code) probe(ctx context.Context) error {
	truth, err := lookPath("true", DefaultPath)
	if err != nil {
		return fmt.Errorf("%w: true(1) is not in %s; install the Debian package coreutils", ErrNoJail, DefaultPath)
	}
	cell, err := c.Open(os.TempDir(), "agentry-jail-probe-")
	if err != nil {
		return err
	}
	defer cell.Remove(context.Background())
	var out bytes.Buffer
	l, err := c.Command(cell, []string{truth}, []string{"PATH=" + DefaultPath}, nil)
	if err == nil {
		l.Cmd.Stdout, l.Cmd.Stderr = &out, &out
		err = l.Start()
	}
	if err == nil {
		stop := context.AfterFunc(ctx, func() { _ = l.Cmd.Process.Kill() })
		err = Reap(l.Cmd)
		stop()
	}
	if err != nil {
		return fmt.Errorf("%w: bubblewrap could not build a jail here (%v: %s); it needs unprivileged user namespaces "+
			"(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; in a container, allow them in its seccomp/AppArmor profile) "+
			"and a kernel with seccomp filters", ErrNoJail, err, strings.TrimSpace(tail(out.String(), 400)))
	}
	return nil
}

// appliedLimits says, in words, what every session of this jail gets.
func (c *Code) appliedLimits() []string {
	out := []string{fmt.Sprintf("seccomp filter (%d system calls refused, after Docker's default profile)", len(denied))}
	gap := map[string]bool{}
	for _, g := range c.gaps {
		gap[g.Limit] = true
	}
	v := fmt.Sprintf("cgroup v%d", c.cg.Version())
	if !gap["session memory cap"] {
		out = append(out, fmt.Sprintf("session memory cap %s plus %s for files (%s)", formatSize(c.o.SessionMemory), formatSize(c.disk), v))
	}
	if !gap["session process cap"] {
		out = append(out, fmt.Sprintf("session process cap %d (%s)", c.caps.Processes, v))
	}
	if !gap["session CPU cap"] {
		out = append(out, fmt.Sprintf("session CPU cap %s cores (%s)", strconv.FormatFloat(c.caps.CPUs, 'f', -1, 64), v))
	}
	if c.tmpfs {
		out = append(out, fmt.Sprintf("disk cap %s for /work and /tmp together (tmpfs)", formatSize(c.disk)))
	}
	out = append(out, fmt.Sprintf("per process: address space %s, %d processes per jail, CPU time %s, file size %s, %d open files",
		formatSize(c.o.Memory), c.o.Processes, c.o.CPU, formatSize(c.o.FileSize), c.o.OpenFiles))
	return out
}

// Applied lists, in words, the limits every session gets here. Call it
// after Ready.
func (c *Code) Applied() []string { return c.applied }

// Gaps lists the limits this machine cannot apply, and why. Call it after
// Ready.
func (c *Code) Gaps() []Gap { return c.gaps }

// Describe is the jail's statement of what it applies and what it cannot:
// "jailed with bubblewrap: seccomp filter …; NOT APPLIED: disk cap (…)".
func (c *Code) Describe() string {
	var b strings.Builder
	b.WriteString("jailed with bubblewrap: ")
	b.WriteString(strings.Join(c.applied, "; "))
	for _, g := range c.gaps {
		fmt.Fprintf(&b, "; NOT APPLIED: %s (%s)", g.Limit, g.Why)
	}
	return b.String()
}

// Open makes a session's cell in dir, named prefix followed by random
// characters: "work" and "tmp", on the session's tmpfs and in its control
// group where this machine allows, handed to the jail's user when agentry
// runs as root. On a nil *Code (an unjailed runner) it makes plain marked
// directories, so that sweeps find them all the same.
func (c *Code) Open(dir, prefix string) (*Cell, error) {
	spec := cellSpec{parent: dir, prefix: prefix, dirs: []string{"work", "tmp"}}
	if c == nil {
		return openCell(spec)
	}
	spec.binds = map[string]string{"work": codeWork, "tmp": codeTmp}
	if c.tmpfs {
		spec.disk, spec.diskUID, spec.diskGID = c.disk, os.Getuid(), os.Getgid()
		if c.dropRoot {
			spec.diskUID, spec.diskGID = c.uid, c.gid
		}
	}
	spec.cg, spec.limits = c.cg, c.caps
	cell, err := openCell(spec)
	if err != nil {
		return nil, err
	}
	if c.dropRoot {
		if err := cell.giveTo(c.uid, c.gid); err != nil {
			cell.Remove(context.Background())
			return nil, err
		}
	}
	return cell, nil
}

// Sweep removes what agentry processes that no longer exist left in dir (cells and the tmpfs in them) and, jailed, in the
// control groups, reporting each sweep to emit as runnerID's
// agentry.runner.swept event. On a nil *Code it sweeps directories only.
func (c *Code) Sweep(ctx context.Context, dir, runnerID string, emit func(event.Event)) {
	sweep(ctx, dir, cellPrefix, runnerID, c != nil, emit)
}

// Notes are what the session's caps did during one execute, told to the
// model: processes the kernel killed at the memory cap, a full disk.
// oomBefore is cell.OOMKills() before the execute. Empty on a nil *Code.
func (c *Code) Notes(cell *Cell, oomBefore int) string {
	if c == nil {
		return ""
	}
	var out []string
	if n := cell.OOMKills() - oomBefore; n > 0 {
		out = append(out, fmt.Sprintf("[the session reached its memory cap (%s for processes, plus what /work and /tmp hold up to %s): the kernel killed %d of its processes; use less memory, or process the data in pieces]",
			formatSize(c.o.SessionMemory), formatSize(c.disk), n))
	}
	if cell.fs != "" {
		var st syscall.Statfs_t
		if syscall.Statfs(cell.fs, &st) == nil && st.Bavail*uint64(st.Bsize) < 64<<10 {
			out = append(out, fmt.Sprintf("[the session's disk is full: /work and /tmp hold %s together at most; delete files or write less]", formatSize(c.disk)))
		}
	}
	return strings.Join(out, "\n")
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

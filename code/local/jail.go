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
)

// ErrNoJail is wrapped by every refusal to run jailed: bwrap or prlimit
// is missing, or bubblewrap cannot build a jail on this machine.
var ErrNoJail = errors.New("local: cannot jail")

// Where the session's directories appear inside a jail.
const (
	jailWork = "/work"
	jailTmp  = "/tmp"
)

// systemDirs are mounted read-only when they are directories, or recreated
// as the same symlink (merged /usr).
var systemDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the few pieces of /etc that programs need to start: the
// loader's cache, the alternatives symlinks, time zones, TLS roots and the
// interpreters' own configuration. Nothing that names the host's users.
var etcFiles = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/localtime", "/etc/ssl/certs", "/etc/ca-certificates", "/etc/mime.types",
	"/etc/python3", "/etc/python3.11", "/etc/python3.12", "/etc/python3.13", "/etc/python3.14",
}

type jailSettings struct {
	bwrap    string
	prlimit  string
	limits   []string // prlimit flags
	uid, gid int
	dropRoot bool
	readOnly []string
	prefixes []string // host paths visible in the jail (for program lookups)

	probeMu sync.Mutex
	probed  bool
	// userns: bwrap can stop the code from making user namespaces of its
	// own (--disable-userns, bubblewrap ≥ 0.8).
	userns bool
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
	for _, d := range systemDirs {
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

// ready finds bwrap and prlimit and proves, once per runner, that
// bubblewrap can build this jail here. Success is cached; a failure is
// not, so a fixed machine recovers without a restart.
func (j *jailSettings) ready(ctx context.Context) error {
	j.probeMu.Lock()
	defer j.probeMu.Unlock()
	if j.probed {
		return nil
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

	dir, err := os.MkdirTemp("", "agentry-jail-probe-")
	if err != nil {
		return fmt.Errorf("local: making a directory to probe the jail: %w", err)
	}
	defer os.RemoveAll(dir)
	d := sessionDirs{root: dir, work: filepath.Join(dir, "work"), tmp: filepath.Join(dir, "tmp")}
	for _, p := range []string{d.work, d.tmp} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("local: making a directory to probe the jail: %w", err)
		}
	}
	if err := j.own(d); err != nil {
		return err
	}
	truth, err := lookPath("true", JailPath)
	if err != nil {
		return fmt.Errorf("%w: true(1) is not in %s; install the Debian package coreutils", ErrNoJail, JailPath)
	}
	cmd := exec.CommandContext(ctx, bw, j.args(d, []string{truth})...)
	cmd.Env = []string{"PATH=" + JailPath}
	cmd.SysProcAttr = j.sysProcAttr()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: bubblewrap could not build a jail here (%v: %s); it needs unprivileged user namespaces "+
			"(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; in a container, allow them in its seccomp/AppArmor profile)",
			ErrNoJail, err, strings.TrimSpace(tail(out.String(), 400)))
	}
	j.probed = true
	return nil
}

// args is bwrap's command line for running argv in session d's jail.
func (j *jailSettings) args(d sessionDirs, argv []string) []string {
	a := []string{
		"--unshare-all", "--unshare-user", // mount, PID, network, IPC, UTS, cgroup, user
		"--die-with-parent", "--new-session",
		"--hostname", "sandbox",
		"--ro-bind", "/usr", "/usr",
	}
	if j.userns {
		a = append(a, "--disable-userns")
	}
	for _, dir := range systemDirs {
		fi, err := os.Lstat(dir)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(dir); err == nil {
				a = append(a, "--symlink", target, dir)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", dir, dir)
		}
	}
	for _, f := range etcFiles {
		a = append(a, "--ro-bind-try", f, f)
	}
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

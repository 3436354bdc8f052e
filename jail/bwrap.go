package jail

import (
	"strconv"
)

// bwrapView is what one bubblewrap invocation shows its process and runs
// in it. Both profiles build theirs and hand it to args: this is the one
// place agentry writes bubblewrap's command line.
type bwrapView struct {
	// net gives the jail a network namespace of its own: always for
	// model-written code (which then has no network at all) and for an
	// agent; false for an agent's terminal, placed in the agent's.
	net bool
	// insideID is the uid and gid the process sees itself as; 0 keeps
	// its host ids.
	insideID int
	// fds are descriptor options: --seccomp N, --block-fd N, --info-fd N.
	fds []string
	// userns: this bubblewrap can forbid user namespaces inside the jail.
	userns bool
	// etc are generated files bound read-only over /etc's (name → host
	// file).
	etc [][2]string
	// readOnly are host paths shown read-only at the same place.
	readOnly []string
	// binds are host directories shown writable (host → inside).
	binds [][2]string
	// chdir is the working directory inside.
	chdir string
	// prlimit runs argv with the rlimits limits.
	prlimit string
	limits  []string
	argv    []string
}

// args is bubblewrap's command line for v: every namespace of its own
// (network too unless the caller placed it in one), the system read-only,
// nothing writable but the binds, the rlimits set by prlimit inside.
func (v bwrapView) args() []string {
	a := []string{
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session",
		"--hostname", "sandbox",
	}
	if v.net {
		a = append(a, "--unshare-net")
	}
	if v.insideID != 0 {
		id := strconv.Itoa(v.insideID)
		a = append(a, "--uid", id, "--gid", id)
	}
	if v.userns {
		a = append(a, "--disable-userns")
	}
	a = append(a, v.fds...)
	a = append(a, systemMounts()...)
	for _, f := range v.etc {
		a = append(a, "--ro-bind", f[1], "/etc/"+f[0])
	}
	for _, p := range v.readOnly {
		a = append(a, "--ro-bind", p, p)
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev")
	for _, b := range v.binds {
		a = append(a, "--bind", b[0], b[1])
	}
	a = append(a,
		// Nothing else is writable: not the root, not /dev.
		"--remount-ro", "/dev",
		"--remount-ro", "/",
		"--chdir", v.chdir,
		"--", v.prlimit)
	a = append(a, v.limits...)
	a = append(a, "--")
	return append(a, v.argv...)
}

// fdArg is a descriptor option: "--seccomp", 5.
func fdArg(option string, fd int) []string { return []string{option, strconv.Itoa(fd)} }

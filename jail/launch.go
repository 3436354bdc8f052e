package jail

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Launch is a jailed process ready to start ([Code.Command]). bubblewrap
// holds the code back (--block-fd) until Start has moved it into its
// cell's control group, so nothing the code does escapes the session's
// caps. A Launch holding only Cmd (an unjailed runner's) starts it as it
// is.
type Launch struct {
	// Cmd is bubblewrap's command: set its Stdin, Stdout and Stderr
	// before Start; wait for it with [Reap].
	Cmd *exec.Cmd

	group   *cgroup
	child   []*os.File // our copies of the descriptors only the child keeps
	unblock *os.File   // lets the jailed code run; nil when not held back
}

// Command prepares argv to run in cell's jail with environment env, extra
// becoming its descriptors 3, 4, … The cell must be this profile's (Open),
// and Ready must have succeeded.
func (c *Code) Command(cell *Cell, argv, env []string, extra []*os.File) (*Launch, error) {
	sec, err := seccompFile()
	if err != nil {
		return nil, err
	}
	l := &Launch{group: cell.group, child: []*os.File{sec}}
	files := append(append([]*os.File(nil), extra...), sec)
	secFD := 3 + len(extra)
	fds := fdArg("--seccomp", secFD)
	if cell.group != nil {
		r, w, err := os.Pipe()
		if err != nil {
			sec.Close()
			return nil, fmt.Errorf("jail: making pipes: %w", err)
		}
		l.child, l.unblock = append(l.child, r), w
		files = append(files, r)
		fds = append(fds, fdArg("--block-fd", secFD+1)...)
	}
	v := bwrapView{net: true, fds: fds, userns: c.userns, readOnly: c.readOnly, binds: cell.binds,
		chdir: codeWork, prlimit: c.prlimit, limits: c.limits, argv: argv}
	cmd := exec.Command(c.bwrap, v.args()...)
	cmd.Dir = cell.root
	cmd.Env = env
	cmd.ExtraFiles = files
	cmd.SysProcAttr = jailedProcAttr(c.uid, c.gid, c.dropRoot)
	l.Cmd = cmd
	return l, nil
}

// Start starts the process and moves the jail into its cell's control
// group before letting the code run. When that fails the jail is killed
// and reaped here: code never runs outside the caps it was promised.
func (l *Launch) Start() error {
	err := l.Cmd.Start()
	for _, f := range l.child {
		f.Close()
	}
	if err != nil {
		if l.unblock != nil {
			l.unblock.Close()
		}
		return err
	}
	if l.unblock == nil {
		return nil
	}
	if err := l.group.Enter(l.Cmd.Process.Pid); err != nil {
		l.unblock.Close()
		_ = l.Cmd.Process.Kill()
		_ = Reap(l.Cmd)
		return err
	}
	_, err = l.unblock.Write([]byte{1})
	l.unblock.Close()
	return err
}

// SetupError is non-nil when a jailed process that exited with status and
// wrote stderr never ran: bubblewrap itself could not build the jail (it
// exits 1 and says "bwrap: …" first). Nil on a nil *Code.
func (c *Code) SetupError(status int, stderr string) error {
	if c == nil || status != 1 || !strings.HasPrefix(stderr, "bwrap: ") {
		return nil
	}
	return fmt.Errorf("%w: bubblewrap failed to build the jail: %s", ErrNoJail, strings.TrimSpace(tail(stderr, 400)))
}

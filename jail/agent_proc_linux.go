//go:build linux

package jail

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentry-dev/agentry/event"
)

// proc is a launched agent and everything its jail holds.
type proc struct {
	s        *agentSettings
	label    string
	emit     func(event.Event)
	env      []string // Spec.Env
	agentEnv []string // what the agent got
	cell     *Cell
	view     bwrapView // the agent's mounts, for its terminals
	ws       string    // the workspace as the agent sees it

	cmd      *exec.Cmd
	exited   chan struct{} // closed when bwrap was reaped
	waitErr  error         // set before exited closes
	initPid  int
	netns    *os.File
	netnsIno uint64
	net      *network
	exposed  map[string]string
	stdin    *os.File
	stdout   *os.File
	stderr   *tailBuffer

	life    context.Context // ends when the jail ends or Stop begins: kills Commands
	endLife context.CancelFunc

	filesMu sync.Mutex
	files   []*os.File // the terminals' copies of descriptors, closed at release

	stopping atomic.Bool
	killed   atomic.Bool
	stopAt   time.Time
	stopOnce sync.Once
	done     chan struct{}
	endErr   error // how the agent ended; set before done closes
}

func newProc(s *agentSettings, spec Spec, plan launchPlan) *proc {
	p := &proc{s: s, label: spec.Label, emit: spec.Events, env: spec.Env, ws: plan.ws,
		exposed: map[string]string{}, done: make(chan struct{}), stderr: newTail(8 << 10)}
	p.life, p.endLife = context.WithCancel(context.Background())
	return p
}

func (p *proc) send(t event.Type, payload any) {
	if p.emit != nil {
		p.emit(event.Event{Type: t, Payload: payload, Meta: event.Meta{Time: time.Now()}})
	}
}

// environ is Spec.Env with extra on top, HOME, and PATH when none is set.
func (p *proc) environ(extra []string) []string {
	vars := map[string]string{}
	var order []string
	for _, list := range [][]string{p.env, extra} {
		for _, kv := range list {
			name, value, _ := strings.Cut(kv, "=")
			if _, ok := vars[name]; !ok {
				order = append(order, name)
			}
			vars[name] = value
		}
	}
	if _, ok := vars["PATH"]; !ok {
		order = append(order, "PATH")
		vars["PATH"] = DefaultPath
	}
	order = append(order, "HOME")
	vars["HOME"] = agentHome
	env := make([]string, 0, len(order))
	for _, name := range order {
		env = append(env, name+"="+vars[name])
	}
	return env
}

// hold keeps a terminal's copy of a descriptor until the jail ends.
func (p *proc) hold(f *os.File) {
	p.filesMu.Lock()
	defer p.filesMu.Unlock()
	p.files = append(p.files, f)
}

// release frees what the jail held on the host, once nothing runs in it:
// the network, the namespace's descriptor, the terminals' descriptors and
// the cell (its control group, tmpfs and directory).
func (p *proc) release() error {
	p.endLife()
	if p.net != nil {
		p.net.close()
	}
	if p.netns != nil {
		p.netns.Close()
	}
	p.filesMu.Lock()
	closeFiles(p.files...)
	p.files = nil
	p.filesMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.cell.Remove(ctx); err != nil {
		return fmt.Errorf("jail: removing the agent's private directory: %w", err)
	}
	return nil
}

// wait owns the end of the jail: once bwrap is reaped it kills whatever is
// left in the jail's network namespace (Commands), releases everything,
// reports how it ended and closes done.
func (p *proc) wait() {
	<-p.exited
	p.killNetns()
	relErr := p.release()
	p.stdin.Close() // nobody reads it any more; stdout stays the caller's to drain and close
	how := "exited"
	switch {
	case p.killed.Load():
		how = "killed"
	case p.stopping.Load():
		how = "terminated"
	}
	st := &Stopped{Label: p.label, How: how}
	if ps := p.cmd.ProcessState; ps != nil {
		code := exitStatus(ps)
		st.ExitCode = &code
	}
	if how != "exited" {
		st.TookMs = event.Ms(time.Since(p.stopAt))
	} else if p.waitErr != nil {
		p.endErr = fmt.Errorf("jail: the agent exited with status %d; its standard error is in StderrTail", exitStatus(p.cmd.ProcessState))
	}
	if relErr != nil {
		st.Error = relErr.Error()
	}
	p.send(TypeStopped, st)
	close(p.done)
}

func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func (p *proc) exitErr() error {
	select {
	case <-p.done:
		return p.endErr
	default:
		return nil
	}
}

func (p *proc) stop(ctx context.Context) error {
	p.stopOnce.Do(func() {
		select {
		case <-p.done:
			return // it had already ended on its own
		default:
		}
		p.stopAt = time.Now()
		p.stopping.Store(true)
		p.endLife()
		p.signalNetns(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-ctx.Done():
		}
		p.killed.Store(true)
		_ = p.cmd.Process.Kill()
		p.killNetns()
		<-p.done // SIGKILL is not refused: this is short
	})
	select {
	case <-p.done:
		return nil
	default:
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("jail: the agent's jail is still ending after SIGKILL: %w", ctx.Err())
	}
}

// members lists the processes in the jail's network namespace — the
// agent, its children, its Commands, the jails' own init processes — as
// pidfds, so no pid reuse can make a signal land elsewhere.
func (p *proc) members() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := "net:[" + strconv.FormatUint(p.netnsIno, 10) + "]"
	self := os.Getpid()
	var fds []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		link := filepath.Join("/proc", e.Name(), "ns", "net")
		if l, err := os.Readlink(link); err != nil || l != want {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		// The pid could have been reused between the two looks: check
		// again through the pidfd's own process.
		if l, err := os.Readlink(link); err != nil || l != want {
			unix.Close(fd)
			continue
		}
		fds = append(fds, fd)
	}
	return fds
}

func (p *proc) signalNetns(sig syscall.Signal) {
	for _, fd := range p.members() {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		unix.Close(fd)
	}
}

// killNetns SIGKILLs every process in the jail's network namespace and
// waits until none is left. Rounds repeat for processes forked meanwhile.
func (p *proc) killNetns() {
	for round := 0; round < 100; round++ {
		fds := p.members()
		if len(fds) == 0 {
			return
		}
		pfds := make([]unix.PollFd, len(fds))
		for i, fd := range fds {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		waitAll(pfds, time.Second)
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

// waitAll polls pidfds until every process exited or d passed.
func waitAll(pfds []unix.PollFd, d time.Duration) {
	deadline := time.Now().Add(d)
	for len(pfds) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		n, err := unix.Poll(pfds, int(left/time.Millisecond)+1)
		if err != nil && err != unix.EINTR {
			return
		}
		if n <= 0 {
			continue
		}
		rest := pfds[:0]
		for _, f := range pfds {
			if f.Revents == 0 {
				f.Revents = 0
				rest = append(rest, f)
			}
		}
		pfds = rest
	}
}

// command is Process.Command on Linux.
func (p *proc) command(ctx context.Context, argv []string, cwd string, env []string) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("jail: the command is empty")
	}
	if err := p.life.Err(); err != nil {
		return nil, fmt.Errorf("jail: the agent's jail has ended; no command can run in it")
	}
	dir, err := p.inWorkspace(cwd)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	if _, err := checkEnv("the command's env", env, seen); err != nil {
		return nil, err
	}
	// The command enters the agent's network namespace through a
	// descriptor (fd 3 of nsenter), never a /proc/<pid> path a reused pid
	// could redirect. It stays open inside the command's jail, where
	// without privilege over the agent's user namespace it grants nothing.
	ns, err := dupFile(p.netns)
	if err != nil {
		return nil, err
	}
	p.hold(ns)
	files := []*os.File{ns}
	v := p.view
	v.chdir, v.argv = dir, argv
	if p.s.caps.seccomp() {
		sec, err := seccompFile()
		if err != nil {
			return nil, err
		}
		p.hold(sec)
		files = append(files, sec)
		v.fds = fdArg("--seccomp", 4)
	}
	args := []string{"--net=/proc/self/fd/3", "--",
		// setpriv drops root for bwrap, and sets the parent-death signal
		// again (a change of uid clears it).
		"/usr/bin/setpriv", "--reuid=" + strconv.Itoa(p.s.uid), "--regid=" + strconv.Itoa(p.s.gid), "--clear-groups", "--pdeathsig=KILL", "--",
		p.s.bwrap}
	args = append(args, v.args()...)

	// The command ends with ctx, and with the agent's jail.
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.life, cancel)
	context.AfterFunc(cctx, func() { stop() })
	prog := p.s.nsenter
	if procs := p.cell.group.Procs(); len(procs) > 0 {
		// The command's first process joins the agent's group before it
		// becomes nsenter, so everything the command starts is inside:
		// the caps are the jail's, not one process's.
		args = append(append(append([]string{"-c", joinScript, "sh"}, procs...), "--", prog), args...)
		prog = "/bin/sh"
	}
	cmd := exec.CommandContext(cctx, prog, args...)
	cmd.Env = append(p.environ(env), p.proxyEnv()...)
	cmd.Dir = "/"
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return cmd.Process.Kill()
	}
	cmd.WaitDelay = time.Second
	return cmd, nil
}

// joinScript writes its own pid to each file named before "--", then
// becomes the rest of its arguments. A write that fails stops it (126):
// a command never runs outside the caps it was promised.
const joinScript = `while [ "$1" != "--" ]; do echo $$ > "$1" || exit 126; shift; done; shift; exec "$@"`

// proxyEnv is the proxy variables the agent got.
func (p *proc) proxyEnv() []string {
	var out []string
	for _, kv := range p.agentEnv {
		name, _, _ := strings.Cut(kv, "=")
		if reserved[name] && name != "HOME" {
			out = append(out, kv)
		}
	}
	sort.Strings(out)
	return out
}

// inWorkspace resolves a command's cwd: relative to the workspace, or an
// absolute path inside it. Nothing may climb out.
func (p *proc) inWorkspace(cwd string) (string, error) {
	ws := p.ws
	if cwd == "" {
		return ws, nil
	}
	var dir string
	if filepath.IsAbs(cwd) {
		dir = filepath.Clean(cwd)
	} else {
		dir = filepath.Join(ws, cwd)
	}
	if !within(dir, ws) {
		return "", fmt.Errorf("jail: the command's directory %q is outside the workspace; give a path inside it", cwd)
	}
	return dir, nil
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("jail: duplicating the agent's namespace descriptor: %w", err)
	}
	return os.NewFile(uintptr(fd), "netns"), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTail(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

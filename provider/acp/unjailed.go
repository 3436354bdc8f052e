package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

// ErrMissingExecutable is wrapped by a launcher's error when the agent
// command cannot be found or run. Readiness reports it as
// missing_executable.
var ErrMissingExecutable = errors.New("acp: the agent command cannot be found or is not executable")

// UnjailedOptions configure [Unjailed].
type UnjailedOptions struct {
	// Credential runs the agent (and its terminal commands) as another
	// user; nil runs them as this process's user. The private HOME is
	// given to that user. Supplementary groups are cleared when it is set
	// and Groups is nil.
	Credential *syscall.Credential
	// HomeDir is where private HOMEs are made (default os.TempDir()).
	HomeDir string
	// Stderr receives the agent's standard error (default: discarded). It
	// may hold anything the agent prints; keep it out of shared logs.
	Stderr io.Writer
	// KillWait bounds the wait for a process to die after SIGKILL
	// (default 5s); past it Stop reports the process as unkillable.
	KillWait time.Duration
}

// Unjailed returns the launcher that runs each agent as a plain child
// process: in its own process group, in its workspace, with only the
// environment it is given and a private HOME copied from the template.
//
// It confines nothing else. The agent can read and write whatever its
// user can and reach any address: LaunchSpec.AllowHosts is not enforced
// (every start says so in its agent_started event, confined=false). It is
// the explicit choice for one person running agents on their own machine;
// a host that serves several people uses the jail.
func Unjailed(opt UnjailedOptions) Launcher {
	if opt.HomeDir == "" {
		opt.HomeDir = os.TempDir()
	}
	if opt.Stderr == nil {
		opt.Stderr = io.Discard
	}
	if opt.KillWait <= 0 {
		opt.KillWait = 5 * time.Second
	}
	if c := opt.Credential; c != nil && c.Groups == nil {
		cc := *c
		cc.Groups = []uint32{}
		opt.Credential = &cc
	}
	return unjailed{opt}
}

type unjailed struct{ opt UnjailedOptions }

func (u unjailed) Launch(ctx context.Context, spec LaunchSpec) (Process, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("%w: the command is empty", ErrMissingExecutable)
	}
	if !filepath.IsAbs(spec.Workspace) {
		return nil, errors.New("acp: the workspace must be an absolute path")
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	path, err := exec.LookPath(spec.Argv[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMissingExecutable, filepath.Base(spec.Argv[0]), errors.Unwrap(err))
	}
	began := time.Now()
	home, err := u.makeHome(spec)
	if err != nil {
		return nil, err
	}
	p := &process{opt: u.opt, spec: spec, home: home, keptHome: spec.HomeDir != "", done: make(chan struct{}), stopped: make(chan struct{}),
		addrs: map[string]string{}, stderr: &capBuffer{limit: stderrTailBytes}}
	for _, x := range spec.Expose {
		p.addrs[x.Name] = x.Listener.Addr().String()
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		p.dropHome()
		return nil, fmt.Errorf("acp: making the agent's stdin: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		p.dropHome()
		return nil, fmt.Errorf("acp: making the agent's stdout: %w", err)
	}
	cmd := exec.Command(path, spec.Argv[1:]...)
	cmd.Args[0] = spec.Argv[0]
	cmd.Dir = spec.Workspace
	cmd.Env = withHome(spec.Env, home)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, io.MultiWriter(p.stderr, u.opt.Stderr)
	cmd.SysProcAttr = sysProcAttr(u.opt.Credential)
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		p.dropHome()
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%w: %s: %v", ErrMissingExecutable, filepath.Base(spec.Argv[0]), err)
		}
		return nil, fmt.Errorf("acp: starting the agent: %w", err)
	}
	p.cmd, p.stdin, p.stdout, p.began = cmd, inW, outR, time.Now()
	go p.watch()
	p.emit(TypeAgentStarted, &AgentStarted{Label: spec.Label, Launcher: "unjailed", Confined: false,
		Pid: cmd.Process.Pid, TookMs: event.Ms(time.Since(began))})
	return p, nil
}

// withHome returns env with HOME set to home, replacing any HOME given.
func withHome(env []string, home string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOME=") {
			out = append(out, kv)
		}
	}
	return append(out, "HOME="+home)
}

// makeHome makes the private HOME: a fresh directory holding a copy of
// the template, owned by the agent's user. With spec.HomeDir it is that
// directory, made so the first time (beside it, then renamed into place)
// and used as it is later.
func (u unjailed) makeHome(spec LaunchSpec) (string, error) {
	if spec.HomeDir != "" {
		if !filepath.IsAbs(spec.HomeDir) {
			return "", fmt.Errorf("acp: LaunchSpec.HomeDir %q is not an absolute path", spec.HomeDir)
		}
		if fi, err := os.Lstat(spec.HomeDir); err == nil {
			if !fi.IsDir() {
				return "", fmt.Errorf("acp: LaunchSpec.HomeDir %q is not a directory (a link is refused); remove it", spec.HomeDir)
			}
			return spec.HomeDir, nil
		}
	}
	parent, pattern := u.opt.HomeDir, "agentry-acp-home-"+safeLabel(spec.Label)+"-"
	if spec.HomeDir != "" {
		parent, pattern = filepath.Dir(spec.HomeDir), "."+filepath.Base(spec.HomeDir)+".seed-"
	}
	home, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", fmt.Errorf("acp: making the agent's private HOME: %w", err)
	}
	fail := func(err error) (string, error) {
		os.RemoveAll(home)
		return "", err
	}
	if spec.Home != "" {
		if err := os.CopyFS(home, os.DirFS(spec.Home)); err != nil {
			return fail(fmt.Errorf("acp: copying the HOME template into the agent's private HOME (only regular files and directories are copied): %w", err))
		}
	}
	if c := u.opt.Credential; c != nil {
		err := filepath.WalkDir(home, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, int(c.Uid), int(c.Gid))
		})
		if err != nil {
			return fail(fmt.Errorf("acp: giving the private HOME to the agent's user: %w", err))
		}
	}
	if spec.HomeDir != "" {
		if err := os.Rename(home, spec.HomeDir); err != nil {
			return fail(fmt.Errorf("acp: making the agent's HOME: %w", err))
		}
		home = spec.HomeDir
	}
	return home, nil
}

// dropHome removes the agent's private HOME; a kept one
// (LaunchSpec.HomeDir) stays.
func (p *process) dropHome() error {
	if p.keptHome {
		return nil
	}
	return os.RemoveAll(p.home)
}

func safeLabel(s string) string {
	if s == "" {
		return "agent"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// process is one unjailed agent process.
type process struct {
	opt      UnjailedOptions
	spec     LaunchSpec
	home     string
	keptHome bool // home is LaunchSpec.HomeDir: it outlives the process
	addrs    map[string]string
	cmd      *exec.Cmd
	stdin    *os.File
	stdout   *os.File
	stderr   *capBuffer // the end of what the agent wrote to stderr
	began    time.Time

	done chan struct{} // closed after the exit was reaped and reported
	err  error

	mu     sync.Mutex // guards reaped against a kill racing the reap
	reaped bool

	asked    atomic.Bool // Stop was called
	forced   atomic.Bool
	stopOnce sync.Once
	stopped  chan struct{}
	stopErr  error
}

func (p *process) Stdin() io.WriteCloser   { return p.stdin }
func (p *process) Stdout() io.ReadCloser   { return p.stdout }
func (p *process) Done() <-chan struct{}   { return p.done }
func (p *process) Addr(name string) string { return p.addrs[name] }

// StderrTail is the last 8 KiB the agent wrote to its standard error.
func (p *process) StderrTail() string {
	s, _ := p.stderr.snapshot()
	return s
}

func (p *process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

func (p *process) emit(t event.Type, payload any) {
	if p.spec.Events != nil {
		p.spec.Events(event.Event{Type: t, Payload: payload})
	}
}

// watch waits for the agent to exit, kills what it left in its process
// group before the group's id can be reused, reaps it, frees its HOME and
// reports.
func (p *process) watch() {
	pid := p.cmd.Process.Pid
	observed := jail.WaitExit(pid) == nil
	p.mu.Lock()
	if observed {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	werr := p.cmd.Wait()
	p.reaped = true
	p.mu.Unlock()
	p.stdin.Close()
	rerr := p.dropHome()

	st := &AgentStopped{Label: p.spec.Label, HeldMs: event.Ms(time.Since(p.began)), Forced: p.forced.Load()}
	ours := false // it ended the way a stop ends it
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Signal = ws.Signal().String()
			ours = ws.Signal() == syscall.SIGTERM || ws.Signal() == syscall.SIGKILL
		} else {
			code := ps.ExitCode()
			st.ExitCode = &code
			ours = code == 0 || code == 128+int(syscall.SIGTERM)
		}
	}
	// A stop that raced an exit of its own is told apart by how the
	// process ended: a failure status we did not cause is a crash.
	switch {
	case p.asked.Load() && ours:
		st.Reason = "stopped"
		werr = nil
	case werr == nil:
		st.Reason = "exited"
	default:
		st.Reason = "crashed"
	}
	if werr != nil {
		p.err = fmt.Errorf("acp: the agent process ended: %w", werr)
		st.Error = p.err.Error()
	}
	if st.Reason != "stopped" {
		st.Stderr = lastWords(p, p.spec.Env)
	}
	if rerr != nil {
		e := fmt.Errorf("acp: removing the agent's private HOME: %w", rerr)
		p.err = errors.Join(p.err, e)
		st.Error = p.err.Error()
	}
	p.emit(TypeAgentStopped, st)
	close(p.done)
}

// kill signals the process group unless the leader was already reaped.
func (p *process) kill(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

func (p *process) Stop(ctx context.Context) error {
	p.asked.Store(true)
	p.stopOnce.Do(func() {
		go func() {
			defer close(p.stopped)
			p.stopErr = p.stop(ctx)
		}()
	})
	select {
	case <-p.stopped:
		return p.stopErr
	case <-ctx.Done():
		// Another caller's stop is under way; it is bounded by its own
		// context and KillWait.
		select {
		case <-p.stopped:
			return p.stopErr
		case <-time.After(p.opt.KillWait):
			return fmt.Errorf("acp: the agent process did not stop within %s of SIGKILL", p.opt.KillWait)
		}
	}
}

func (p *process) stop(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.stdin.Close()
	p.kill(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
	}
	p.forced.Store(true)
	p.kill(syscall.SIGKILL)
	t := time.NewTimer(p.opt.KillWait)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("acp: the agent process did not exit within %s of SIGKILL", p.opt.KillWait)
	}
}

func (p *process) Command(_ context.Context, argv []string, cwd string, env []string) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("acp: the terminal command is empty")
	}
	if cwd == "" {
		cwd = "."
	}
	if !filepath.IsLocal(cwd) && cwd != "." {
		return nil, errors.New("acp: a terminal's working directory must be inside the workspace")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = filepath.Join(p.spec.Workspace, cwd)
	cmd.Env = withHome(slices.Clone(env), p.home)
	cmd.SysProcAttr = sysProcAttr(p.opt.Credential)
	return cmd, nil
}

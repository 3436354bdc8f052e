package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/jail"
)

// grace is how long a finished execution waits for output still held by
// a process it left behind before it stops reading.
const grace = 250 * time.Millisecond

// pyBootstrap reads the code from fd 3 and runs it as __main__, showing
// only the code's own frames when it fails. The working directory is on
// sys.path, so modules the code wrote can be imported.
const pyBootstrap = `import os, sys
with os.fdopen(3, encoding="utf-8", errors="surrogateescape") as f:
    src = f.read()
sys.argv = ["<cell>"]
try:
    exec(compile(src, "<cell>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as e:
    import traceback
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)
    sys.exit(1)
`

// shBootstrap reads the code from fd 3 and runs it, with fd 3 closed.
const shBootstrap = `eval "$(cat <&3)" 3<&-`

func bootstrap(lang, prog string) []string {
	switch lang {
	case "python":
		return []string{prog, "-u", "-c", pyBootstrap}
	default:
		return []string{prog, "-c", shBootstrap, lang}
	}
}

// Process is the process-per-call runner: each Execute is its own
// process. It is not a sandbox unless Options.Jail is set. Safe for
// concurrent use.
type Process struct {
	s   *settings
	err error
}

// New returns a process-per-call runner. Invalid options are reported by
// Start.
func New(opt Options) *Process {
	s, err := newSettings(opt)
	return &Process{s: s, err: err}
}

// ID is "local-process", or "local-process+bwrap" when jailed.
func (p *Process) ID() string {
	if p.s != nil && p.s.jail != nil {
		return "local-process+bwrap"
	}
	return "local-process"
}

// KeepsState is false: only files persist between executes.
func (p *Process) KeepsState() bool { return false }

// Start makes the session's private directory. It refuses an unknown
// language, a missing interpreter, and — when jailed — a machine where
// bubblewrap cannot build the jail.
func (p *Process) Start(ctx context.Context, req code.StartRequest) (code.Session, error) {
	if p.err != nil {
		return nil, p.err
	}
	lang := req.Language
	if lang == "" {
		lang = "python"
	}
	if _, err := p.s.program(lang); err != nil {
		return nil, err
	}
	if err := p.s.start(ctx, p.ID()); err != nil {
		return nil, err
	}
	cell, err := openCell(p.s.dir, req.Key, p.s.jail, "")
	if err != nil {
		return nil, err
	}
	return &procSession{p: p, id: filepath.Base(cell.Root()), lang: lang, cell: cell, st: newStager(cell),
		running: make(map[*exec.Cmd]struct{})}, nil
}

type procSession struct {
	p    *Process
	id   string
	lang string
	cell *jail.Cell
	st   *stager

	mu       sync.Mutex
	stopped  bool
	running  map[*exec.Cmd]struct{}
	inflight sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

func (s *procSession) ID() string { return s.id }

// Dir is the session's working directory on the host.
func (s *procSession) Dir() string { return workDir(s.cell) }

func (s *procSession) Stage(_ context.Context, in []code.Input) ([]code.Staged, error) {
	if err := s.alive(); err != nil {
		return nil, err
	}
	return s.st.stage(in)
}

func (s *procSession) alive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return stoppedError(s.id)
	}
	return nil
}

func stoppedError(id string) error {
	return fmt.Errorf("local: session %s was stopped; start a new session to run more code: %w", id, code.ErrStopped)
}

// Execute runs req.Code in a new process in the session's directory.
func (s *procSession) Execute(ctx context.Context, req code.ExecRequest) (code.Result, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return code.Result{}, stoppedError(s.id)
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()

	set := s.p.s
	lang := req.Language
	if lang == "" {
		lang = s.lang
	}
	prog, err := set.program(lang)
	if err != nil {
		return code.Result{}, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = set.timeout
	}
	work := workDir(s.cell)
	before, _ := snapshot(work)

	codeR, codeW, err := os.Pipe()
	if err != nil {
		return code.Result{}, fmt.Errorf("local: making pipes: %w", err)
	}
	defer closeAll(codeR, codeW)
	outs, err := newOutputs(set.maxChars)
	if err != nil {
		return code.Result{}, fmt.Errorf("local: making pipes: %w", err)
	}
	defer outs.close()

	l, err := set.prepare(s.cell, bootstrap(canonicalLanguage(lang), prog), set.environ(s.st.environ()), []*os.File{codeR})
	if err != nil {
		return code.Result{}, err
	}
	cmd := l.Cmd
	cmd.Stdout, cmd.Stderr = outs.out.writer(), outs.err.writer()
	oom := s.cell.OOMKills()
	cpu, _ := s.cell.Usage()
	if err := l.Start(); err != nil {
		return code.Result{}, fmt.Errorf("local: starting %s: %w", prog, err)
	}
	closeAll(codeR)
	outs.out.closeWrite()
	outs.err.closeWrite()
	if !s.track(cmd) {
		_ = cmd.Process.Kill()
	}
	defer s.untrack(cmd)

	outs.read()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = codeW.Write([]byte(req.Code))
		_ = codeW.Close()
	}()

	exited := make(chan error, 1)
	go func() { exited <- reap(cmd) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, cancelled bool
	select {
	case <-exited:
	case <-timer.C:
		timedOut = true
		_ = cmd.Process.Kill()
		<-exited
	case <-ctx.Done():
		cancelled = true
		_ = cmd.Process.Kill()
		<-exited
	}
	_ = codeW.SetWriteDeadline(time.Now())
	<-wrote
	outs.finish(grace)
	stdout, stderr := outs.stdout, outs.stderr
	after, _ := snapshot(work)

	res := code.Result{
		Stdout:    stdout.String(),
		Stderr:    stderr.String(),
		Truncated: truncation(stdout, stderr),
	}
	res.Artifacts, res.Truncated = artifacts(before, after, work, s.cell.View, res.Truncated)
	res.Sandbox = sandboxUsage(s.cell, cpu)
	switch {
	case s.isStopped():
		return res, stoppedError(s.id)
	case timedOut:
		return res, fmt.Errorf("local: the code ran past its %s timeout and its process group was killed: %w", timeout, code.ErrTimeout)
	case cancelled:
		return res, fmt.Errorf("local: the execution was cancelled and its process group killed: %w", context.Cause(ctx))
	}
	status := exitStatus(cmd)
	if err := set.jail.SetupError(status, res.Stderr); err != nil {
		return code.Result{}, err
	}
	res.Stderr = appendNote(res.Stderr, set.jail.Notes(s.cell, oom))
	res.ExitCode = &status
	res.OK = status == 0
	return res, nil
}

func (s *procSession) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (s *procSession) track(cmd *exec.Cmd) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[cmd] = struct{}{}
	return !s.stopped
}

func (s *procSession) untrack(cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, cmd)
}

// Stop kills what is running, waits for it (bounded by ctx), and removes
// the session's directory. It is idempotent.
func (s *procSession) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		for cmd := range s.running {
			_ = cmd.Process.Kill() // its reaper sweeps the group
		}
		s.mu.Unlock()
		idle := make(chan struct{})
		go func() { s.inflight.Wait(); close(idle) }()
		select {
		case <-idle:
		case <-ctx.Done():
			// The executes were killed; they return on their own. The
			// directory goes now regardless.
		}
		s.stopErr = s.cell.Remove(ctx)
	})
	return s.stopErr
}

// reap waits for cmd to exit, kills whatever it left in its process
// group (nothing outlives a call), and only then reaps it.
func reap(cmd *exec.Cmd) error { return jail.Reap(cmd) }

// prepare builds the process for argv in cell (extra become its
// descriptors 3, 4, …): jailed, bubblewrap's, which Start holds back
// until it is inside the session's caps; unjailed, argv itself, straight
// in the work directory.
func (s *settings) prepare(cell *jail.Cell, argv, env []string, extra []*os.File) (*jail.Launch, error) {
	if s.jail != nil {
		return s.jail.Command(cell, argv, env, extra)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = workDir(cell)
	cmd.Env = env
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = sysProcAttr()
	return &jail.Launch{Cmd: cmd}, nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

var _ code.Stager = (*procSession)(nil)

// Describe states what this runner's sessions get and what they cannot
// get on this machine (see Interpreter.Describe).
func (p *Process) Describe() string { return p.s.describeRunner(p.ID(), p.err) }

// LookInterpreter is Interpreter.LookInterpreter for this runner.
func (p *Process) LookInterpreter(language string) (string, error) {
	if p.err != nil {
		return "", p.err
	}
	return p.s.program(language)
}

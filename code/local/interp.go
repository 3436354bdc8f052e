package local

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/jail"
)

//go:embed driver.py
var driverSource string

// readersAfter is how long an execute runs before its output is read as
// it comes rather than when it ends; a pipe holds 64 KiB meanwhile.
const readersAfter = 2 * time.Millisecond

// stopGrace is how long Stop lets an idle interpreter leave on its own
// before it is killed.
const stopGrace = time.Second

// MaxFrame bounds one control frame. Frames carry code and facts, never
// the code's output, so they are small; a larger one is a broken peer.
const MaxFrame = 64 << 20

// Interpreter is the persistent-interpreter runner: one long-lived Python
// process per session, so variables, imports and files persist between
// executes. It is not a sandbox unless Options.Jail is set. Safe for
// concurrent use.
type Interpreter struct {
	s    *settings
	err  error
	pool *pool // nil: no pool
}

// NewInterpreter returns a persistent-interpreter runner (Python). Invalid
// options are reported by Start. With Options.Pool set, the pool starts
// filling at the first Start or Warm; Close stops it.
func NewInterpreter(opt Options) *Interpreter {
	s, err := newSettings(opt)
	r := &Interpreter{s: s, err: err}
	if err == nil && s.pool.Size > 0 {
		r.pool = newPool(r, s.pool)
	}
	return r
}

// Warm fills the pool and waits until it is full (bounded by ctx); without
// a pool it only readies the runner.
func (r *Interpreter) Warm(ctx context.Context) error {
	if r.err != nil {
		return r.err
	}
	if err := r.s.start(ctx, r.ID()); err != nil {
		return err
	}
	if r.pool == nil {
		return nil
	}
	return r.pool.warm(ctx)
}

// Pooled is how many started, unused interpreters the pool holds now.
func (r *Interpreter) Pooled() int {
	if r.pool == nil {
		return 0
	}
	return r.pool.len()
}

// Close stops the pool and the interpreters waiting in it, and removes the
// runner's control groups once its sessions are gone, bounded by ctx.
// Sessions already handed out are their holders' to stop. Start after
// Close starts interpreters without a pool.
func (r *Interpreter) Close(ctx context.Context) error {
	var err error
	if r.pool != nil {
		err = r.pool.close(ctx)
	}
	return err
}

// ID is "local-interpreter", or "local-interpreter+bwrap" when jailed.
func (r *Interpreter) ID() string {
	if r.s != nil && r.s.jail != nil {
		return "local-interpreter+bwrap"
	}
	return "local-interpreter"
}

// KeepsState is true: variables and imports persist between executes.
func (r *Interpreter) KeepsState() bool { return true }

// Describe states what this runner's sessions get and what they cannot
// get on this machine: "local-interpreter+bwrap: jailed with bubblewrap:
// seccomp filter …; NOT APPLIED: disk cap (…)". It readies the runner
// first (bounded), as its first Start would.
func (r *Interpreter) Describe() string { return r.s.describeRunner(r.ID(), r.err) }

// LookInterpreter resolves the program language's code runs with, as its
// sessions would (on the runner's PATH, visible in the jail), without
// starting one: a command can refuse at once, naming what to install,
// rather than fail at the first call. The error wraps
// ErrInterpreterMissing when the program is not there.
func (r *Interpreter) LookInterpreter(language string) (string, error) {
	if r.err != nil {
		return "", r.err
	}
	return r.s.program(language)
}

// Start launches the interpreter in the session's private directory and
// waits until it is ready (bounded by ctx and Options.StartTimeout), or
// takes one the pool has ready. The interpreter's life is the session's,
// not ctx's.
func (r *Interpreter) Start(ctx context.Context, req code.StartRequest) (code.Session, error) {
	if r.err != nil {
		return nil, r.err
	}
	if err := pythonOnly(req.Language); err != nil {
		return nil, err
	}
	prog, err := r.s.program("python")
	if err != nil {
		return nil, err
	}
	if err := r.s.start(ctx, r.ID()); err != nil {
		return nil, err
	}
	if r.pool != nil && !r.pool.isClosed() {
		if s := r.pool.take(); s != nil {
			if err := s.bind(req.Key); err != nil {
				s.Stop(context.Background())
				return nil, err
			}
			return s, nil
		}
	}
	return r.open(ctx, req.Key, "", prog)
}

// open starts a new interpreter session for key (prefix names a pool
// member's directory instead).
func (r *Interpreter) open(ctx context.Context, key, prefix, prog string) (*interpSession, error) {
	cell, err := openCell(r.s.dir, key, r.s.jail, prefix)
	if err != nil {
		return nil, err
	}
	s, err := r.launch(ctx, cell, prog)
	if err != nil {
		cell.Remove(context.Background())
		return nil, err
	}
	return s, nil
}

func pythonOnly(lang string) error {
	if lang == "" || canonicalLanguage(lang) == "python" {
		return nil
	}
	return fmt.Errorf("%w %q: the persistent interpreter runs python only; use local.New for other languages", ErrUnknownLanguage, lang)
}

func (r *Interpreter) launch(ctx context.Context, cell *jail.Cell, prog string) (*interpSession, error) {
	fds, err := socketPair()
	if err != nil {
		return nil, fmt.Errorf("local: making the control socket: %w", err)
	}
	ctl := newControl(fds[0])
	theirs := os.NewFile(uintptr(fds[1]), "agentry-driver")
	defer theirs.Close()
	log, err := os.OpenFile(filepath.Join(cell.Root(), "driver.log"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		ctl.close()
		return nil, fmt.Errorf("local: making the interpreter's log: %w", err)
	}
	defer log.Close()

	l, err := r.s.prepare(cell, []string{prog, "-u", "-c", driverSource}, r.s.environ("{}"), []*os.File{theirs})
	if err != nil {
		ctl.close()
		return nil, err
	}
	cmd := l.Cmd
	cmd.Stderr = log
	if err := l.Start(); err != nil {
		ctl.close()
		return nil, fmt.Errorf("local: starting %s: %w", prog, err)
	}
	s := &interpSession{
		r: r, id: filepath.Base(cell.Root()), cell: cell, st: newStager(cell),
		cmd: cmd, ctl: ctl, exited: make(chan struct{}), turn: make(chan struct{}, 1),
		watch: newDirWatch(workDir(cell)),
	}
	go func() {
		_ = reap(cmd)
		close(s.exited)
	}()

	deadline := time.Now().Add(r.s.startTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	err = ctl.setTimeout(max(time.Until(deadline), time.Microsecond))
	stop := context.AfterFunc(ctx, ctl.interrupt)
	var hello []byte
	if err == nil {
		hello, err = readFrame(ctl)
	}
	if !stop() && err == nil {
		err = context.Cause(ctx) // the socket was shut down: no session
	}
	if err == nil && (len(hello) == 0 || hello[0] != 'R') {
		err = errors.New("it did not say it was ready")
	}
	if err != nil {
		s.kill()
		ctl.close()
		s.watch.close()
		<-s.exited
		why := err.Error()
		if ctx.Err() != nil {
			why = context.Cause(ctx).Error()
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			why = fmt.Sprintf("not ready within %s (Options.StartTimeout)", r.s.startTimeout)
		}
		return nil, fmt.Errorf("local: the python interpreter %s did not start: %s; its output: %q", prog, why, logTail(log))
	}
	s.python = string(hello[1:])
	return s, nil
}

func logTail(f *os.File) string {
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	const n = 600
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	k, _ := f.ReadAt(b, off)
	return strings.TrimSpace(string(b[:k]))
}

type interpSession struct {
	r      *Interpreter
	id     string
	cell   *jail.Cell
	st     *stager
	cmd    *exec.Cmd
	ctl    *control
	exited chan struct{} // closed once the interpreter's process is reaped
	turn   chan struct{} // one execute at a time
	python string

	watch *dirWatch // nil: walk after every execute

	mu       sync.Mutex
	seq      uint64               // executes so far
	snap     map[string]fileStamp // the work directory after the last execute; nil: walk again
	stopped  bool
	broken   string // why the session can no longer run code
	stopOnce sync.Once
	stopErr  error
}

func (s *interpSession) ID() string { return s.id }

// Dir is the session's working directory on the host.
func (s *interpSession) Dir() string { return workDir(s.cell) }

// Pid is the host's process id of the interpreter's outermost process
// (bwrap when jailed).
func (s *interpSession) Pid() int { return s.cmd.Process.Pid }

func (s *interpSession) Stage(_ context.Context, in []code.Input) ([]code.Staged, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	staged, err := s.st.stage(in)
	s.mu.Lock()
	s.snap = nil // staged files are not the code's artifacts
	s.mu.Unlock()
	return staged, err
}

// before is the work directory as the last execute left it: executes take
// turns, so that is what the next one starts from — unless staging has
// changed it since. What a background process of the code writes between
// executes is reported by the next one.
func (s *interpSession) before() map[string]fileStamp {
	s.mu.Lock()
	snap := s.snap
	s.mu.Unlock()
	if snap == nil {
		var dirs []string
		snap, dirs = snapshot(workDir(s.cell))
		s.watch.track(dirs)
	}
	return snap
}

// after is the work directory once an execute is over: the snapshot it
// started from when the watch says nothing changed (the common case, one
// system call), a fresh walk otherwise.
func (s *interpSession) after(before map[string]fileStamp) map[string]fileStamp {
	if !s.watch.changed() {
		return before
	}
	snap, dirs := snapshot(workDir(s.cell))
	s.watch.track(dirs)
	return snap
}

func (s *interpSession) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return stoppedError(s.id)
	case s.broken != "":
		return fmt.Errorf("local: session %s is broken (%s) and its state is gone; start a new session: %w", s.id, s.broken, code.ErrBroken)
	}
	return nil
}

func (s *interpSession) breakWith(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == "" {
		s.broken = why
	}
}

func (s *interpSession) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// kill ends the interpreter (bwrap, when jailed, taking the jail with
// it); its reaper then sweeps the process group.
func (s *interpSession) kill() { _ = s.cmd.Process.Kill() }

// A request is the frame's length, the request id, the length of the
// inputs, the inputs (AGENTRY_INPUTS) and the code; a reply is the id, the
// exit status and ok. See driver.py.
const (
	requestHeader = 4 + 8 + 4
	replySize     = 8 + 4 + 1
)

func encodeRequest(id uint64, inputs, src string) []byte {
	n := requestHeader - 4 + len(inputs) + len(src)
	b := make([]byte, 4+n)
	binary.BigEndian.PutUint32(b, uint32(n))
	binary.BigEndian.PutUint64(b[4:], id)
	binary.BigEndian.PutUint32(b[12:], uint32(len(inputs)))
	copy(b[requestHeader:], inputs)
	copy(b[requestHeader+len(inputs):], src)
	return b
}

type reply struct {
	id   uint64
	exit int
	ok   bool
}

func decodeReply(b []byte) (reply, error) {
	if len(b) != replySize {
		return reply{}, fmt.Errorf("local: a reply of %d bytes, want %d", len(b), replySize)
	}
	return reply{
		id:   binary.BigEndian.Uint64(b),
		exit: int(int32(binary.BigEndian.Uint32(b[8:]))),
		ok:   b[12] == 1,
	}, nil
}

// Execute runs req.Code in the session's interpreter. Executes on one
// session take turns.
func (s *interpSession) Execute(ctx context.Context, req code.ExecRequest) (code.Result, error) {
	if err := pythonOnly(req.Language); err != nil {
		return code.Result{}, err
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return code.Result{}, context.Cause(ctx)
	}
	defer func() { <-s.turn }()
	if err := s.usable(); err != nil {
		return code.Result{}, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = s.r.s.timeout
	}
	s.mu.Lock()
	s.seq++
	id := s.seq
	s.mu.Unlock()
	frame := encodeRequest(id, s.st.environ(), req.Code)
	if len(frame)-4 > MaxFrame {
		return code.Result{}, fmt.Errorf("local: the code is %d bytes, more than the %d a request may carry; stage large data as an input instead", len(req.Code), MaxFrame)
	}
	outs, err := newOutputs(s.r.s.maxChars)
	if err != nil {
		return code.Result{}, fmt.Errorf("local: making pipes: %w", err)
	}
	defer outs.close()
	before := s.before()
	oom := s.cell.OOMKills()
	cpu, _ := s.cell.Usage()

	// One message: the frame, with the output pipes attached. The
	// interpreter is idle between executes, so the write does not wait on
	// it; a large frame's rest follows in plain writes.
	err = s.ctl.setTimeout(timeout)
	if err == nil {
		err = s.ctl.send(frame, syscall.UnixRights(outs.out.wfd, outs.err.wfd))
	}
	outs.out.closeWrite()
	outs.err.closeWrite()
	if err != nil {
		if s.isStopped() {
			return code.Result{}, stoppedError(s.id)
		}
		s.breakWith("its interpreter stopped listening")
		s.kill()
		return code.Result{}, s.usable()
	}
	lazy := outs.readLater(readersAfter)
	defer lazy.Stop()

	stop := context.AfterFunc(ctx, s.ctl.interrupt)
	var rep reply
	body, rerr := readFrame(s.ctl)
	if !stop() && rerr == nil {
		// Cancelled just as the reply came: the result stands, but the
		// socket is shut down, so the session cannot go on.
		s.breakWith("an execution was cancelled")
		s.kill()
	}
	if rerr == nil {
		rep, rerr = decodeReply(body)
	}
	if rerr == nil && rep.id != id {
		rerr = fmt.Errorf("reply %d to request %d", rep.id, id)
	}

	crashed, err2 := s.failure(ctx, rerr, timeout)
	outs.finish(grace)

	after := s.after(before)
	s.mu.Lock()
	s.snap = after
	s.mu.Unlock()
	res := code.Result{
		Stdout:    outs.stdout.String(),
		Stderr:    outs.stderr.String(),
		Truncated: truncation(outs.stdout, outs.stderr),
	}
	res.Stderr = appendNote(res.Stderr, s.r.s.jail.Notes(s.cell, oom))
	res.Sandbox = sandboxUsage(s.cell, cpu)
	res.Artifacts, res.Truncated = artifacts(before, after, workDir(s.cell), s.cell.View, res.Truncated)
	if err2 != nil {
		return res, err2
	}
	if crashed >= 0 || rerr != nil {
		if crashed < 0 {
			crashed = 1
		}
		res.Stderr = appendNote(res.Stderr, fmt.Sprintf("[the interpreter exited with status %d while running this code; the session's state is lost]", crashed))
		res.ExitCode = &crashed
		return res, nil
	}
	exit := rep.exit
	res.ExitCode = &exit
	res.OK = rep.ok && exit == 0
	if !res.OK && id == 1 {
		res.Stderr = code.NoteFreshState(res.Stderr)
	}
	return res, nil
}

// failure is what a failed read of an execute's reply means: the session
// was stopped, the execute cancelled or timed out (err), or the
// interpreter went away while running the code (crashed is its exit
// status; -1 when it did not crash). Every one but a stop breaks the
// session.
func (s *interpSession) failure(ctx context.Context, rerr error, timeout time.Duration) (crashed int, err error) {
	crashed = -1
	switch {
	case rerr == nil:
	case s.isStopped():
		err = stoppedError(s.id)
	case ctx.Err() != nil:
		s.breakWith("an execution was cancelled and the interpreter killed")
		s.kill()
		err = fmt.Errorf("local: the execution was cancelled and the interpreter killed; session %s is broken: %w", s.id, context.Cause(ctx))
	case errors.Is(rerr, os.ErrDeadlineExceeded):
		s.breakWith(fmt.Sprintf("an execution ran past its %s timeout and the interpreter was killed", timeout))
		s.kill()
		err = fmt.Errorf("local: the code ran past its %s timeout and the interpreter was killed, so session %s is broken: %w", timeout, s.id, code.ErrTimeout)
	default:
		// The interpreter went away (or spoke nonsense) while running
		// this code: the code's result is a failure, and the session is
		// broken from here on.
		t := time.NewTimer(stopGrace)
		select {
		case <-s.exited:
		case <-t.C:
			s.kill()
			<-s.exited
		}
		t.Stop()
		crashed = exitStatus(s.cmd)
		s.breakWith(fmt.Sprintf("its interpreter exited with status %d", crashed))
		s.kill()
	}
	return crashed, err
}

// Stop closes the control socket (the interpreter leaves on EOF), kills
// it after a short grace or when ctx ends, and removes the session's
// directory. It is idempotent, and a crashed interpreter is already gone:
// success.
func (s *interpSession) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.ctl.interrupt()
		t := time.NewTimer(stopGrace)
		select {
		case <-s.exited:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		// Whatever the code left in the process group goes too.
		s.kill()
		<-s.exited
		// The socket and the watch go once no execute is using them.
		s.turn <- struct{}{}
		s.ctl.close()
		s.watch.close()
		<-s.turn
		s.stopErr = s.cell.Remove(ctx)
	})
	return s.stopErr
}

// maxReply bounds a frame from the interpreter: replies are a few bytes.
const maxReply = 1 << 10

// readFrame reads one length-prefixed frame from the interpreter.
func readFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > maxReply {
		return nil, fmt.Errorf("local: a control frame of %d bytes is over the %d limit", n, maxReply)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

var _ code.Stager = (*interpSession)(nil)

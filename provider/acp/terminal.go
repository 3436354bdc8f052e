package acp

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/event"
)

// terminalWaitDelay bounds how long a finished command's output pipe is
// read after the command exited (a background child may hold it open).
const terminalWaitDelay = 2 * time.Second

// terminals are the commands one session's agent runs through
// terminal/create: each confined like the agent (Process.Command), its
// output kept up to a cap, at most a fixed number at once.
type terminals struct {
	proc   Process
	ws     *workspace
	env    []string
	maxOut int
	max    int
	emit   func(event.Type, any)

	mu     sync.Mutex
	byID   map[string]*terminal
	n      int
	closed bool
}

type terminal struct {
	id   string
	name string // the program's base name, for events
	cmd  *exec.Cmd
	out  *capBuffer
	done chan struct{}

	mu     sync.Mutex // guards reaped against a kill racing the reap
	reaped bool
	code   *int
	signal string
}

func newTerminals(proc Process, ws *workspace, env []string, maxOut, max int, emit func(event.Type, any)) *terminals {
	return &terminals{proc: proc, ws: ws, env: env, maxOut: maxOut, max: max, emit: emit, byID: map[string]*terminal{}}
}

// create starts a command. cwd is as the agent sent it ("" is the
// workspace); env adds to the definition's environment.
// setProcess gives the terminals the agent process they are confined
// like; until then terminal/create is refused.
func (ts *terminals) setProcess(p Process) {
	ts.mu.Lock()
	ts.proc = p
	ts.mu.Unlock()
}

// shellLine reports whether a terminal's command, given without
// arguments, is a command line for a shell rather than a program's name:
// agents such as claude-code-acp send their Bash tool's whole line as the
// command.
func shellLine(command string, args []string) bool {
	return len(args) == 0 && strings.ContainsAny(command, " \t\n|&;<>()$`\\\"'*?[#~=%")
}

func (ts *terminals) create(ctx context.Context, command string, args []string, cwd string, env []string, limit int) (string, error) {
	ev := &TerminalEvent{Op: "create", Command: filepath.Base(command)}
	if shellLine(command, args) {
		// The line itself may hold user data: the event names the shell.
		command, args = "/bin/sh", []string{"-c", command}
		ev.Command = "sh"
	}
	fail := func(refused bool, err error) (string, error) {
		ev.Refused, ev.Error = refused, err.Error()
		ts.emit(TypeTerminal, ev)
		return "", err
	}
	rel := "."
	if cwd != "" {
		r, err := ts.ws.rel(cwd)
		if err != nil {
			return fail(true, err)
		}
		fi, err := ts.ws.root.Stat(r)
		if err != nil {
			err = fsError(err)
			return fail(errors.Is(err, errOutside), err)
		}
		if !fi.IsDir() {
			return fail(false, errors.New("the terminal's working directory is not a directory"))
		}
		rel = r
	}
	ev.Cwd = rel
	for _, kv := range env {
		name, _, _ := splitEnv(kv)
		if err := checkEnvName(name); err != nil {
			return fail(true, fmt.Errorf("a terminal environment variable is malformed: %v", err))
		}
		if name == "HOME" {
			return fail(true, errors.New("a terminal may not set HOME"))
		}
	}
	if limit <= 0 || limit > ts.maxOut {
		limit = ts.maxOut
	}

	ts.mu.Lock()
	switch {
	case ts.closed:
		ts.mu.Unlock()
		return fail(false, errors.New("the session is closing"))
	case ts.proc == nil:
		ts.mu.Unlock()
		return fail(false, errors.New("the session is not open yet"))
	case len(ts.byID) >= ts.max:
		ts.mu.Unlock()
		return fail(true, fmt.Errorf("the session already holds %d terminals; release one first", ts.max))
	}
	ts.n++
	id := "term-" + strconv.Itoa(ts.n)
	proc := ts.proc
	ts.mu.Unlock()
	ev.TerminalID = id

	cmd, err := proc.Command(ctx, append([]string{command}, args...), rel, append(append([]string{}, ts.env...), env...))
	if err != nil {
		return fail(true, err)
	}
	t := &terminal{id: id, name: ev.Command, cmd: cmd, out: &capBuffer{limit: limit}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = t.out, t.out
	cmd.WaitDelay = terminalWaitDelay
	if err := cmd.Start(); err != nil {
		return fail(false, fmt.Errorf("the command did not start: %v", errors.Unwrap(err)))
	}
	go t.wait()

	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		t.kill()
		<-t.done
		return fail(false, errors.New("the session is closing"))
	}
	ts.byID[id] = t
	ts.mu.Unlock()
	ts.emit(TypeTerminal, ev)
	return id, nil
}

func splitEnv(kv string) (name, value string, ok bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

func (t *terminal) wait() {
	_ = t.cmd.Wait()
	t.mu.Lock()
	t.reaped = true
	if ps := t.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.signal = ws.Signal().String()
		} else {
			c := ps.ExitCode()
			t.code = &c
		}
	}
	t.mu.Unlock()
	close(t.done)
}

// kill kills the command's process group (or the command alone when it
// has none).
func (t *terminal) kill() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reaped || t.cmd.Process == nil {
		return
	}
	if a := t.cmd.SysProcAttr; a != nil && a.Setpgid {
		_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
		return
	}
	_ = t.cmd.Process.Kill()
}

// exit returns how the command ended, and whether it has.
func (t *terminal) exit() (code *int, signal string, exited bool) {
	select {
	case <-t.done:
	default:
		return nil, "", false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.code, t.signal, true
}

func (ts *terminals) get(op, id string) (*terminal, error) {
	ts.mu.Lock()
	t := ts.byID[id]
	ts.mu.Unlock()
	if t == nil {
		ts.emit(TypeTerminal, &TerminalEvent{Op: op, Refused: true, Error: "no such terminal"})
		return nil, errors.New("the session has no terminal with that id (it was released, or never created)")
	}
	return t, nil
}

func (ts *terminals) report(op string, t *terminal, set func(*TerminalEvent)) {
	ev := &TerminalEvent{Op: op, TerminalID: t.id, Command: t.name}
	if set != nil {
		set(ev)
	}
	ts.emit(TypeTerminal, ev)
}

func (ts *terminals) output(id string) (out string, truncated bool, code *int, signal string, exited bool, err error) {
	t, err := ts.get("output", id)
	if err != nil {
		return "", false, nil, "", false, err
	}
	out, truncated = t.out.snapshot()
	code, signal, exited = t.exit()
	ts.report("output", t, func(e *TerminalEvent) {
		e.Bytes, e.Truncated, e.ExitCode, e.Signal = len(out), truncated, code, signal
	})
	return out, truncated, code, signal, exited, nil
}

func (ts *terminals) waitForExit(ctx context.Context, id string) (*int, string, error) {
	t, err := ts.get("wait_for_exit", id)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return nil, "", context.Cause(ctx)
	}
	code, signal, _ := t.exit()
	ts.report("wait_for_exit", t, func(e *TerminalEvent) { e.ExitCode, e.Signal = code, signal })
	return code, signal, nil
}

func (ts *terminals) kill(id string) error {
	t, err := ts.get("kill", id)
	if err != nil {
		return err
	}
	t.kill()
	ts.report("kill", t, nil)
	return nil
}

func (ts *terminals) release(ctx context.Context, id string) error {
	t, err := ts.get("release", id)
	if err != nil {
		return err
	}
	ts.mu.Lock()
	delete(ts.byID, id)
	ts.mu.Unlock()
	t.kill()
	select {
	case <-t.done:
	case <-ctx.Done():
	}
	ts.report("release", t, nil)
	return nil
}

// closeAll kills every terminal and waits for them, bounded by ctx.
func (ts *terminals) closeAll(ctx context.Context) error {
	ts.mu.Lock()
	ts.closed = true
	all := make([]*terminal, 0, len(ts.byID))
	for _, t := range ts.byID {
		all = append(all, t)
	}
	clear(ts.byID)
	ts.mu.Unlock()
	var stuck int
	for _, t := range all {
		t.kill()
	}
	for _, t := range all {
		select {
		case <-t.done:
		case <-ctx.Done():
			stuck++
		}
	}
	if stuck > 0 {
		return fmt.Errorf("acp: %d terminal commands did not exit after SIGKILL before the close's deadline", stuck)
	}
	return nil
}

// capBuffer keeps the last limit bytes written to it, cut at a character
// boundary, and remembers whether anything was cut.
type capBuffer struct {
	limit int

	mu        sync.Mutex
	b         []byte
	truncated bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if len(p) > c.limit {
		p = p[len(p)-c.limit:]
		c.truncated = true
		c.b = c.b[:0]
	}
	c.b = append(c.b, p...)
	// Compact only past twice the limit, so a long stream costs linear
	// time, not a copy of the buffer per write.
	if len(c.b) > 2*c.limit {
		c.b = append(c.b[:0], c.b[len(c.b)-c.limit:]...)
		c.truncated = true
	}
	return n, nil
}

func (c *capBuffer) snapshot() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.b
	truncated := c.truncated
	if len(b) > c.limit {
		b = b[len(b)-c.limit:]
		truncated = true
	}
	if truncated {
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	return string(b), truncated
}

package code

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// Defaults of [ToolOptions].
const (
	DefaultToolName       = "run_code"
	DefaultLanguage       = "python"
	DefaultMaxOutputChars = 4000
	// DefaultStopTimeout bounds stopping a session the tool discards
	// (broken, timed out or lost).
	DefaultStopTimeout = 5 * time.Second
)

// ToolOptions configure [NewTool]. Zero values take the defaults.
type ToolOptions struct {
	// Name is the tool's name (default "run_code").
	Name string
	// Description, when set, opens the tool's description; the tool always
	// adds what persists between calls (by scope) and the advice to
	// compute over data rather than ask for it.
	Description string
	// Language is passed to Start and Execute (default "python").
	Language string
	// Scope is the teardown scope sessions are held under (default run):
	// call (nothing persists), run (this turn), session (the conversation).
	Scope toolsession.Scope
	// MaxOutputChars cuts each stream shown to the model (default 4000).
	MaxOutputChars int
	// Timeout bounds each execution; 0 takes the runner's default.
	Timeout time.Duration

	// Inputs, when set, is asked for the inputs of a session when the tool
	// opens one; they are staged as files (see [Stager]) before the first
	// execute. A runner whose sessions cannot stage is refused by name.
	Inputs func(ctx context.Context, c *tool.Call) ([]Input, error)
	// Events, when set, receives one agentry.tools.code_run event per call
	// that reached the runner (typically an event.Bus's Export). It must
	// not block. Meta carries the call's run, session and identity; the
	// bus numbers and stamps it. The payload holds facts only: OutputChars
	// counts the characters handed to the model, Truncated is true when the
	// runner or the tool cut a stream, ShapeHash is [ShapeHash] of the code;
	// the code and its output never travel in events.
	Events func(event.Event)
	// StopTimeout bounds stopping a session the tool discards because it
	// broke, timed out or was lost (default 5s).
	StopTimeout time.Duration
}

// NewTool returns a tool that runs the model's code on r, holding one
// session per isolation key.
//
// Every call derives the key from the call's facts with the configured
// scope, refusing before any Start when the door does not honour the scope
// or when the scope's id is missing. The first call under a key starts the
// session (concurrent first calls share one Start; a failed Start reaches
// every one of them and is not cached) and registers its cleanup with the
// door — remove the session from the tool, then Stop it — under {scope,
// key, runner id, language}. Later calls reuse it and register again,
// which is the touch that keeps it alive. Every call pins its session (or
// reserves room for a new one) for as long as it runs, through
// [tool.Call.Hold], so eviction never cuts code in flight; when every live
// session is busy the call waits, then fails with an error matching
// toolsession.ErrCapacity. The tool never runs the model's code twice: a
// session lost before or while running it is reported to the model as
// lost — the code may or may not have run — and the next call opens a new
// session, saying so.
func NewTool(r Runner, opt ToolOptions) tool.Tool {
	if r == nil {
		panic("code.NewTool: nil Runner") // a programming error, found at start-up
	}
	if opt.Name == "" {
		opt.Name = DefaultToolName
	}
	if opt.Language == "" {
		opt.Language = DefaultLanguage
	}
	if opt.Scope == "" {
		opt.Scope = toolsession.ScopeRun
	}
	if opt.MaxOutputChars <= 0 {
		opt.MaxOutputChars = DefaultMaxOutputChars
	}
	if opt.StopTimeout <= 0 {
		opt.StopTimeout = DefaultStopTimeout
	}
	keeps := true
	if k, ok := r.(StateKeeper); ok {
		keeps = k.KeepsState()
	}
	t := &codeTool{runner: r, opt: opt, slots: make(map[string]*slot)}
	t.spec = tool.Spec{
		Name:        opt.Name,
		Description: describe(opt, keeps),
		InputSchema: json.RawMessage(inputSchema),
	}
	v, err := tool.NewValidator(opt.Name, t.spec.InputSchema)
	if err != nil {
		panic(fmt.Sprintf("code.NewTool: %v", err)) // the schema is a constant
	}
	t.validator = v
	return t
}

const inputSchema = `{"type":"object","properties":{"code":{"type":"string","minLength":1,` +
	`"description":"The program to run. Print what you want to see."}},"required":["code"],"additionalProperties":false}`

func describe(opt ToolOptions, keepsState bool) string {
	var b strings.Builder
	if opt.Description != "" {
		b.WriteString(strings.TrimSpace(opt.Description))
		b.WriteString("\n\n")
	} else {
		fmt.Fprintf(&b, "Run %s code and see what it prints (stdout and stderr).\n\n", opt.Language)
	}
	switch opt.Scope {
	case toolsession.ScopeCall:
		b.WriteString("Nothing persists between calls: every call starts in a fresh session, so do everything you need in one call.")
	case toolsession.ScopeSession:
		if keepsState {
			b.WriteString("State persists across the conversation: variables, imports and files from earlier calls are still there.")
		} else {
			b.WriteString("Each call is a fresh process, so variables do not persist; files written in the working directory persist across the conversation.")
		}
	default:
		if keepsState {
			b.WriteString("State persists within this turn: variables, imports and files from earlier calls in this turn are still there; they are gone when the turn ends.")
		} else {
			b.WriteString("Each call is a fresh process, so variables do not persist; files written in the working directory persist within this turn.")
		}
	}
	fmt.Fprintf(&b, "\n\nCompute over data rather than asking for it: have the code read, filter and aggregate the data, "+
		"and print only the answer, a summary or a small slice. Each output stream is cut at %d characters, and a cut is always stated.", opt.MaxOutputChars)
	if opt.Inputs != nil {
		fmt.Fprintf(&b, "\n\nInput data is staged as files: the environment variable %s is a JSON object mapping each input's name to its path.", InputsEnv)
	}
	return b.String()
}

type codeTool struct {
	runner    Runner
	opt       ToolOptions
	spec      tool.Spec
	validator *tool.Validator

	mu    sync.Mutex // guards slots and every slot's fields; nothing slow under it
	slots map[string]*slot
}

// slot holds the session for one key under one registration. It outlives
// a lost session (the next call opens a new one in the same slot) and
// ends with its registration's cleanup.
type slot struct {
	gen    uint64 // the registration's generation (Lease.Gen); 0 when the door cannot pin
	sess   Session
	staged []Staged
	flight *flight // non-nil while a Start is under way
	// registered: a teardown was registered for this slot, so it must stay
	// until that cleanup runs. lost: its last session was discarded.
	registered, lost bool
	closed           bool // the cleanup ran: nothing may start here any more
}

// flight is one Start that every concurrent caller under the key waits for.
type flight struct {
	done   chan struct{}
	sess   Session
	staged []Staged
	err    error
}

func (t *codeTool) Spec() tool.Spec { return t.spec }

// RefusalError is the tool's refusal to key a session: the door does not
// honour the configured scope, or the call lacks the fact the scope needs.
// It is returned before any session is started.
type RefusalError struct {
	Tool  string
	Scope toolsession.Scope
	// Problem says what is missing; Fix is the one-line fix.
	Problem, Fix string
	Err          error // the underlying *tool.ScopeError or *tool.MissingFactError
}

func (e *RefusalError) Error() string {
	return fmt.Sprintf("tool %s: refusing to open a session for scope %q: %s; %s", e.Tool, e.Scope, e.Problem, e.Fix)
}

func (e *RefusalError) Unwrap() error { return e.Err }

// refuse checks, before any Start, that the call can key and register a
// session for the tool's scope.
func (t *codeTool) refuse(c *tool.Call) (string, error) {
	s := t.opt.Scope
	name := c.Tool
	if name == "" {
		name = t.opt.Name
	}
	switch s {
	case toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession:
	default:
		return "", &RefusalError{Tool: name, Scope: s, Problem: "this scope cannot key a session",
			Fix: "configure the tool with scope call, run or session"}
	}
	if !c.Honours(s) {
		// A door without a registrar honours nothing, whatever it lists.
		var honoured []string
		for _, h := range c.Scopes {
			if c.Honours(h) {
				honoured = append(honoured, string(h))
			}
		}
		fix := "this door cannot hold sessions; run the tool from a door that honours teardown scopes (the agent loop)"
		if len(honoured) > 0 {
			fix = fmt.Sprintf("configure the tool with a scope this door honours (%s)", strings.Join(honoured, ", "))
		}
		var hs []toolsession.Scope
		for _, h := range honoured {
			hs = append(hs, toolsession.Scope(h))
		}
		return "", &RefusalError{Tool: name, Scope: s, Problem: "the door does not honour this teardown scope", Fix: fix,
			Err: &tool.ScopeError{Tool: name, Scope: s, Honoured: hs}}
	}
	key, err := c.Key(s)
	if err != nil {
		var mf *tool.MissingFactError
		if errors.As(err, &mf) {
			fix := mf.Fix
			switch s {
			case toolsession.ScopeSession:
				fix = "bind the run to a conversation (pass a session id), or configure the tool with scope run"
			case toolsession.ScopeRun:
				fix = "this door has no runs: configure the tool with scope call"
			}
			return "", &RefusalError{Tool: name, Scope: s, Problem: "the call has no " + mf.Fact, Fix: fix, Err: err}
		}
		return "", err
	}
	return key, nil
}

type callArgs struct {
	Code string `json:"code"`
}

func (t *codeTool) Call(ctx context.Context, c *tool.Call, args json.RawMessage) (tool.Result, error) {
	if c == nil {
		return tool.Result{}, fmt.Errorf("tool %s: called without a *tool.Call; doors build one with tool.NewCall", t.opt.Name)
	}
	if err := t.validator.Validate(args); err != nil {
		return tool.Result{}, err
	}
	var in callArgs
	if err := json.Unmarshal(args, &in); err != nil {
		return tool.Result{}, &tool.ArgumentError{Tool: t.opt.Name, Problem: err.Error()}
	}
	key, err := t.refuse(c)
	if err != nil {
		return tool.Result{}, err
	}

	began := time.Now()
	run := RunReport{Tool: t.name(c), RunnerID: t.runner.ID(), Language: t.opt.Language,
		ShapeHash: ShapeHash(t.opt.Language, in.Code)}

	// Pin the session for the whole call, or reserve room for a new one
	// before anything starts: a session with code running is never
	// evicted. When every live session is busy this waits, then refuses.
	lease, err := c.Hold(ctx, t.options(key))
	if err != nil {
		run.Error = err.Error()
		t.emit(c, &run, began)
		return tool.Result{}, fmt.Errorf("tool %s: %w", t.name(c), err)
	}
	defer lease.Release()

	h, err := t.acquire(ctx, c, key, lease.Gen())
	if err != nil {
		run.Error = err.Error()
		t.emit(c, &run, began)
		return tool.Result{}, err
	}
	var notes []string
	if h.reopened {
		notes = append(notes, "[new session: the previous session was lost (it crashed, timed out or was closed), "+
			"so variables, imports and files from earlier calls are gone; recreate what you need]")
	}
	if h.fresh {
		notes = append(notes, stagedNote(h.staged))
	}
	run.StagedInputs = len(h.staged)

	req := ExecRequest{Code: in.Code, Language: t.opt.Language, Timeout: t.opt.Timeout}
	res, execErr := h.sess.Execute(ctx, req)

	timedOut := errors.Is(execErr, ErrTimeout)
	lost := errors.Is(execErr, ErrBroken) || errors.Is(execErr, ErrStopped)
	if lost || ctx.Err() != nil || (timedOut && t.keepsState()) {
		// This session cannot be trusted with more code. Drop it; the next
		// call opens a new one. The code is never run again on our own
		// initiative: it may have had effects before the session was lost.
		t.discard(ctx, h)
	}
	if lost && ctx.Err() == nil {
		run.StateLost = true
		run.Error = execErr.Error()
		notes = append(notes, "[session lost: the session broke or was closed before or while running this code, "+
			"so the code may or may not have run. It was not run again. Check for its effects (files, external changes) "+
			"before repeating anything; the next call opens a new session, and variables, imports and files from earlier calls are gone]")
		out := render(notes, res, t.opt.MaxOutputChars, true)
		run.OutputChars, run.Truncated = out.chars, out.cut
		t.emit(c, &run, began)
		return tool.Result{Content: out.content, IsError: true, Sandbox: res.Sandbox}, nil
	}
	if execErr != nil && !timedOut {
		run.Error = execErr.Error()
		t.emit(c, &run, began)
		return tool.Result{}, fmt.Errorf("tool %s: %w", t.name(c), execErr)
	}
	// On a timeout the output captured before the kill is still worth
	// showing.
	out := render(notes, res, t.opt.MaxOutputChars, timedOut)
	content := out.content
	if timedOut {
		msg := "[timed out: the code did not finish in time and was stopped"
		if t.keepsState() {
			msg += "; the session's state is lost and the next call starts fresh"
		}
		msg += ". Make it faster: work on a sample, or aggregate instead of looping in Python.]"
		content += "\n" + msg
		run.Error = execErr.Error()
	}
	run.OK = res.OK && !timedOut
	run.ExitCode = res.ExitCode
	run.OutputChars = out.chars
	run.Truncated = out.cut
	t.emit(c, &run, began)
	return tool.Result{Content: content, IsError: !run.OK, Sandbox: res.Sandbox}, nil
}

func (t *codeTool) keepsState() bool {
	k, ok := t.runner.(StateKeeper)
	return !ok || k.KeepsState()
}

func (t *codeTool) options(key string) toolsession.Options {
	return toolsession.Options{Scope: t.opt.Scope, Key: key, RunnerID: t.runner.ID(), Label: t.opt.Language}
}

func (t *codeTool) name(c *tool.Call) string {
	if c.Tool != "" {
		return c.Tool
	}
	return t.opt.Name
}

func (t *codeTool) emit(c *tool.Call, run *RunReport, began time.Time) {
	run.DurationMs = event.Ms(time.Since(began))
	p := *run
	e := event.Event{Type: TypeRun, Payload: &p}
	if t.opt.Events == nil {
		c.Emit(e) // the door's stream, when it has one
		return
	}
	e.Meta = event.Meta{RunID: c.RunID, SessionID: c.SessionID}
	if c.Identity != nil {
		e.Meta.Tenant, e.Meta.Principal = c.Identity.Tenant, c.Identity.Principal
	}
	t.opt.Events(e)
}

// held is the session one call runs on.
type held struct {
	s      *slot
	sess   Session
	staged []Staged
	// fresh: this call started the session; reopened: it replaces one
	// that was lost under the same registration.
	fresh, reopened bool
}

// acquire returns the session for key, starting one when there is none.
// gen is the generation of the registration the call's lease pins (0 when
// the door cannot pin): a slot bound to another generation belongs to a
// registration the tier already claimed, whose cleanup is on the way, so
// it is never handed out. acquire registers the teardown (or touches it)
// before it returns.
func (t *codeTool) acquire(ctx context.Context, c *tool.Call, key string, gen uint64) (held, error) {
	t.mu.Lock()
	s := t.slots[key]
	if s != nil && gen != 0 && s.gen != gen {
		// Detached, not stopped: its own cleanup stops what it holds.
		delete(t.slots, key)
		s = nil
	}
	if s == nil {
		s = &slot{gen: gen}
		t.slots[key] = s
	}
	if f := s.flight; f != nil {
		t.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return held{}, context.Cause(ctx)
		}
		if f.err != nil {
			return held{}, f.err
		}
		return held{s: s, sess: f.sess, staged: f.staged}, t.register(c, key, s)
	}
	if s.sess != nil {
		h := held{s: s, sess: s.sess, staged: s.staged}
		t.mu.Unlock()
		return h, t.register(c, key, s)
	}
	f := &flight{done: make(chan struct{})}
	s.flight = f
	reopened := s.lost
	t.mu.Unlock()

	f.sess, f.staged, f.err = t.start(ctx, c, key)

	t.mu.Lock()
	s.flight = nil
	closed := s.closed
	switch {
	case f.err != nil:
		// Cache nothing: the next call tries again from scratch. A slot
		// with a registration stays, so that registration's cleanup still
		// covers whatever the next call starts in it.
		if !s.registered {
			if t.slots[key] == s {
				delete(t.slots, key)
			}
			s.closed = true
		}
	case closed:
		f.err = fmt.Errorf("tool %s: the session's teardown ran while it was starting; call again: %w", t.name(c), ErrStopped)
	default:
		s.sess, s.staged, s.lost = f.sess, f.staged, false
	}
	t.mu.Unlock()
	if closed && f.sess != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opt.StopTimeout)
		_ = f.sess.Stop(sctx)
		cancel()
		f.sess = nil
	}
	close(f.done)
	if f.err != nil {
		return held{}, f.err
	}
	if err := t.register(c, key, s); err != nil {
		return held{}, err
	}
	return held{s: s, sess: f.sess, staged: f.staged, fresh: true, reopened: reopened}, nil
}

// discard drops a session that can no longer be trusted with code and
// stops it. The slot and its registration stay, so the next call under
// the key opens a new session there and says the old one was lost.
func (t *codeTool) discard(ctx context.Context, h held) {
	t.mu.Lock()
	mine := h.s.sess == h.sess
	if mine {
		h.s.sess, h.s.staged, h.s.lost = nil, nil, true
	}
	t.mu.Unlock()
	if !mine {
		return // another call already discarded it
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opt.StopTimeout)
	defer cancel()
	_ = h.sess.Stop(sctx) // "already gone" is success by contract
}

// start opens and stages one session.
func (t *codeTool) start(ctx context.Context, c *tool.Call, key string) (Session, []Staged, error) {
	var inputs []Input
	if t.opt.Inputs != nil {
		in, err := t.opt.Inputs(ctx, c)
		if err != nil {
			return nil, nil, fmt.Errorf("tool %s: gathering the inputs to stage: %w", t.name(c), err)
		}
		inputs = in
	}
	sess, err := t.runner.Start(ctx, StartRequest{Key: key, Language: t.opt.Language})
	if err != nil {
		return nil, nil, fmt.Errorf("tool %s: starting a %s session on runner %s: %w", t.name(c), t.opt.Language, t.runner.ID(), err)
	}
	if sess == nil {
		return nil, nil, fmt.Errorf("tool %s: runner %s returned no session and no error; fix the runner", t.name(c), t.runner.ID())
	}
	if len(inputs) == 0 {
		return sess, nil, nil
	}
	st, ok := sess.(Stager)
	var staged []Staged
	if !ok {
		err = &NoStagingError{Tool: t.name(c), RunnerID: t.runner.ID()}
	} else {
		staged, err = st.Stage(ctx, inputs)
		if err != nil {
			err = fmt.Errorf("tool %s: staging %d input(s): %w", t.name(c), len(inputs), err)
		}
	}
	if err != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opt.StopTimeout)
		_ = sess.Stop(sctx)
		cancel()
		return nil, nil, err
	}
	return sess, staged, nil
}

// NoStagingError refuses inputs on a runner whose sessions cannot stage
// them.
type NoStagingError struct{ Tool, RunnerID string }

func (e *NoStagingError) Error() string {
	return fmt.Sprintf("tool %s: runner %s cannot stage inputs (its sessions do not implement code.Stager); "+
		"use a runner that stages (code/local) or drop ToolOptions.Inputs", e.Tool, e.RunnerID)
}

// register hands the door the cleanup for the session in s, or touches
// the one it holds. The cleanup is bound to s: a slot detached from the
// map is still stopped by its own registration, and never by another's.
func (t *codeTool) register(c *tool.Call, key string, s *slot) error {
	_, err := c.OnTeardown(func(ctx context.Context) error { return t.closeSlot(ctx, key, s) }, t.options(key))
	if err != nil {
		// refuse checked the scope and the facts, so this is a door that
		// changed its mind: release what we hold rather than leak it.
		sctx, cancel := context.WithTimeout(context.Background(), t.opt.StopTimeout)
		defer cancel()
		_ = t.closeSlot(sctx, key, s)
		return fmt.Errorf("tool %s: registering the session's teardown: %w", t.name(c), err)
	}
	t.mu.Lock()
	s.registered = true
	t.mu.Unlock()
	return nil
}

// closeSlot is the cleanup: it removes s from the tool (when it is still
// the slot for key), then stops the session it holds. A Start under way
// when it runs is stopped by its starter.
func (t *codeTool) closeSlot(ctx context.Context, key string, s *slot) error {
	t.mu.Lock()
	if t.slots[key] == s {
		delete(t.slots, key)
	}
	s.closed = true
	sess := s.sess
	s.sess, s.staged = nil, nil
	t.mu.Unlock()
	if sess == nil {
		return nil
	}
	return sess.Stop(ctx)
}

// Workspace is the directory of the session a call with c's facts uses —
// the code's working directory, /work in a jail — starting the session
// when none is live, as a call would (its teardown registered under the
// conversation). Only a tool of scope session keeps one: a run's or a
// call's files are gone before a person could take them. The session is
// pinned while it is found, not after: an idle conversation's interpreter
// may still be evicted later, taking its files with it.
func (t *codeTool) Workspace(ctx context.Context, c *tool.Call) (string, error) {
	if t.opt.Scope != toolsession.ScopeSession {
		return "", fmt.Errorf("tool %s: its sessions last one %s, not the conversation: %w", t.opt.Name, t.opt.Scope, tool.ErrNoWorkspace)
	}
	key, err := t.refuse(c)
	if err != nil {
		return "", err
	}
	lease, err := c.Hold(ctx, t.options(key))
	if err != nil {
		return "", fmt.Errorf("tool %s: %w", t.name(c), err)
	}
	defer lease.Release()
	h, err := t.acquire(ctx, c, key, lease.Gen())
	if err != nil {
		return "", err
	}
	d, ok := h.sess.(interface{ Dir() string })
	if !ok {
		return "", fmt.Errorf("tool %s: runner %s keeps its files where this machine cannot reach them: %w", t.opt.Name, t.runner.ID(), tool.ErrNoWorkspace)
	}
	return d.Dir(), nil
}

var _ tool.Workspacer = (*codeTool)(nil)

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// workspaces is a real resource: one scratch directory per isolation key.
// Opening makes the directory; the teardown removes it. A second close of
// the same workspace is an error, so "exactly once" is checked by the
// resource itself, not by counting events.
type workspaces struct {
	root string

	mu     sync.Mutex
	open   map[string]*workspace // by isolation key
	opened int
	closed int
	calls  []seenCall
	// cleanupCtxErr records ctx.Err() as each cleanup began.
	cleanupCtxErr []error
}

type workspace struct {
	dir    string
	closed bool
}

// seenCall is what a tool call was told.
type seenCall struct {
	Tool, ToolCallID, RunID, SessionID string
	Identity                           *tool.Identity
	Reused                             bool
	Scopes                             []toolsession.Scope
}

func newWorkspaces(t *testing.T) *workspaces {
	return &workspaces{root: t.TempDir(), open: map[string]*workspace{}}
}

type noteArgs struct {
	Append string `json:"append,omitempty"`
}

// tool returns a notes tool holding one workspace per key of scope: it
// appends to a note in the workspace and returns the note so far.
func (w *workspaces) tool(name string, scope toolsession.Scope) tool.Tool {
	return tool.Func(name, "keeps a note in a private workspace", func(ctx context.Context, c *tool.Call, in noteArgs) (string, error) {
		dir, err := w.use(c, scope)
		if err != nil {
			return "", err
		}
		return appendNote(dir, in.Append)
	})
}

// use opens (or joins) the workspace for c under scope and registers its
// teardown. It asks the door first and trusts its answer: a workspace this
// tool still has in its map may be one the tier has just expired, so only
// Outcome.Reused says a session may be joined.
func (w *workspaces) use(c *tool.Call, scope toolsession.Scope) (string, error) {
	key := ""
	if scope != toolsession.ScopeShutdown {
		k, err := c.Key(scope)
		if err != nil {
			return "", err
		}
		key = k
	} else {
		key = "shutdown/" + c.ToolCallID
	}
	fresh := &workspace{}
	cleanup := func(ctx context.Context) error {
		w.mu.Lock()
		w.cleanupCtxErr = append(w.cleanupCtxErr, ctx.Err())
		if fresh.closed {
			w.mu.Unlock()
			return errors.New("workspace closed twice")
		}
		fresh.closed = true
		if w.open[key] == fresh {
			delete(w.open, key)
		}
		w.closed++
		dir := fresh.dir
		w.mu.Unlock()
		return os.RemoveAll(dir)
	}
	opt := toolsession.Options{Scope: scope, RunnerID: "tempdir", Label: "notes"}
	if scope != toolsession.ScopeShutdown {
		opt.Key = key
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out, err := c.OnTeardown(cleanup, opt)
	if err != nil {
		return "", err
	}
	ws := w.open[key]
	if !out.Reused || ws == nil {
		dir, err := os.MkdirTemp(w.root, "ws-")
		if err != nil {
			return "", err
		}
		fresh.dir = dir
		ws = fresh
		w.open[key] = ws
		w.opened++
	}
	w.calls = append(w.calls, seenCall{Tool: c.Tool, ToolCallID: c.ToolCallID, RunID: c.RunID, SessionID: c.SessionID,
		Identity: c.Identity, Reused: out.Reused, Scopes: slices.Clone(c.Scopes)})
	return ws.dir, nil
}

func appendNote(dir, text string) (string, error) {
	note := filepath.Join(dir, "note.txt")
	if text != "" {
		f, err := os.OpenFile(note, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return "", err
		}
		_, err = fmt.Fprintln(f, text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
	}
	b, err := os.ReadFile(note)
	if errors.Is(err, os.ErrNotExist) {
		return "(empty)", nil
	}
	return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", " | "), err
}

func (w *workspaces) stats() (open, opened, closed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.open), w.opened, w.closed
}

func (w *workspaces) seen() []seenCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// dirs returns the directories still open.
func (w *workspaces) dirs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, ws := range w.open {
		out = append(out, ws.dir)
	}
	return out
}

// recorder is an in-memory event.Sink.
type recorder struct {
	mu       sync.Mutex
	events   []event.Event
	flushes  int
	closes   int
	atClose  int // events received before the first Close
	afterEnd bool
}

func (r *recorder) Export(e event.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closes > 0 {
		r.afterEnd = true
	}
	r.events = append(r.events, e)
}

func (r *recorder) Flush(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
	return nil
}

func (r *recorder) Close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closes == 0 {
		r.atClose = len(r.events)
	}
	r.closes++
	return nil
}

func (r *recorder) all() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) of(types ...event.Type) []event.Event {
	var out []event.Event
	for _, e := range r.all() {
		if slices.Contains(types, e.Type) {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) closeEvents() []*tool.SessionClosed {
	var out []*tool.SessionClosed
	for _, e := range r.of(tool.TypeSessionClosed, tool.TypeSessionCloseFailed) {
		out = append(out, e.Payload.(*tool.SessionClosed))
	}
	return out
}

func (r *recorder) turnEnds() []*event.TurnEnd {
	var out []*event.TurnEnd
	for _, e := range r.of(event.TypeTurnEnd) {
		out = append(out, e.Payload.(*event.TurnEnd))
	}
	return out
}

// call is a scripted tool call.
func call(name, args string) llm.ToolCall {
	return llm.ToolCall{Name: name, Args: json.RawMessage(args)}
}

func calls(cs ...llm.ToolCall) scripted.Step { return scripted.Step{ToolCalls: cs} }

func answer(text string) scripted.Step { return scripted.Step{Text: text} }

// newAgent builds an agent with a recorder attached.
func newAgent(t *testing.T, opt agent.Options) (*agent.Agent, *recorder) {
	t.Helper()
	rec := &recorder{}
	opt.Sinks = append(opt.Sinks, rec)
	a, err := agent.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	return a, rec
}

// toolMessages returns the tool results in a conversation.
func toolMessages(c *agent.Conversation) []llm.Message {
	var out []llm.Message
	for _, m := range c.Messages {
		if m.Role == llm.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

// probe is an llm.Model that lets a test look at the world each time the
// agent calls the model, then answers from a script.
type probe struct {
	llm.Model
	before func(n int, req llm.Request)
	mu     sync.Mutex
	n      int
}

func (p *probe) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	if p.before != nil {
		p.before(n, req)
	}
	return p.Model.Generate(ctx, req)
}

func bg() context.Context { return context.Background() }

// gate is a tool that blocks until released (or its context ends), after
// opening a run-scoped workspace.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 16), release: make(chan struct{})} }

func (g *gate) tool(w *workspaces) tool.Tool {
	return tool.Func("gate", "waits", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
		if w != nil {
			if _, err := w.use(c, toolsession.ScopeRun); err != nil {
				return "", err
			}
		}
		g.entered <- struct{}{}
		select {
		case <-g.release:
			return "released", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
}

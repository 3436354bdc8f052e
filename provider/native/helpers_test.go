package native_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// promptModel stands in for a language model (none can be reached here):
// it answers the latest person's message by what it says, so one model
// serves every kind of turn the tests need.
//
//	ask                 call approve_me (a check-in tool), then answer with its result
//	hold                wait until the run is cancelled
//	call <tool> <json>  call the tool, then answer "the tool said: <result>"
//	calls <tool> <json> call the tool twice in one response, then answer
//	fail                the model fails
//	panic               the model panics
//	loop                call noop for ever (the iteration limit ends it)
//	say <text>          answer text, and nothing else
//	anything else       answer "echo: <message>"
type promptModel struct {
	mu       sync.Mutex
	requests []llm.Request
}

func (m *promptModel) Name() string { return "prompt-model (not a language model)" }

func (m *promptModel) seen() []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]llm.Request(nil), m.requests...)
}

func (m *promptModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	m.mu.Unlock()
	last := -1
	for i, msg := range req.Messages {
		if msg.Role == llm.RoleUser {
			last = i
		}
	}
	if last < 0 {
		return llm.Response{}, errors.New("prompt model: no person's message")
	}
	prompt := req.Messages[last].Content
	step := 0
	for _, msg := range req.Messages[last+1:] {
		if msg.Role == llm.RoleAssistant {
			step++
		}
	}
	result := ""
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleTool {
		result = req.Messages[n-1].Content
	}
	answer := func(text string) (llm.Response, error) {
		return llm.Response{Text: text, StopReason: llm.StopEnd}, nil
	}
	call := func(n int, name string, args string) (llm.Response, error) {
		r := llm.Response{Text: "let me use " + name, StopReason: llm.StopToolUse}
		for i := range n {
			r.ToolCalls = append(r.ToolCalls, llm.ToolCall{ID: fmt.Sprintf("c%d_%d", step, i), Name: name, Args: json.RawMessage(args)})
		}
		return r, nil
	}
	verb, rest, _ := strings.Cut(prompt, " ")
	switch verb {
	case "ask":
		if step == 0 {
			return call(1, "approve_me", `{}`)
		}
		return answer("done: " + result)
	case "hold":
		<-ctx.Done()
		return llm.Response{}, context.Cause(ctx)
	case "call", "calls":
		if step == 0 {
			name, args, _ := strings.Cut(rest, " ")
			if args == "" {
				args = "{}"
			}
			n := 1
			if verb == "calls" {
				n = 2
			}
			return call(n, name, args)
		}
		return answer("the tool said: " + result)
	case "fail":
		return llm.Response{}, errors.New("the model is down")
	case "panic":
		panic("the model lost its mind")
	case "loop":
		return call(1, "noop", `{}`)
	case "say":
		return answer(rest)
	}
	return answer("echo: " + prompt)
}

// streamingModel is the same model as an llm.Streamer: answers arrive a
// word at a time.
type streamingModel struct{ *promptModel }

func (s streamingModel) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		r, err := s.Generate(ctx, req)
		if err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		words := strings.SplitAfter(r.Text, " ")
		for _, w := range words {
			if w != "" && !yield(llm.Chunk{Text: w}, nil) {
				return
			}
		}
		for i := range r.ToolCalls {
			if !yield(llm.Chunk{ToolCall: &r.ToolCalls[i]}, nil) {
				return
			}
		}
		yield(llm.Chunk{Done: &r}, nil)
	}
}

// lab is what the agent's tools saw and what their sessions did.
type lab struct {
	mu         sync.Mutex
	identities []*tool.Identity // as each "who" call was told
	opened     map[string]int   // key hash → opens, for "workspace"
	closed     map[string]int   // key hash → closes
	approved   int
}

func newLab() *lab { return &lab{opened: map[string]int{}, closed: map[string]int{}} }

func (l *lab) closes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.closed {
		n += c
	}
	return n
}

func (l *lab) opens() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.opened {
		n += c
	}
	return n
}

type scopeArgs struct {
	Scope string `json:"scope"`
}

// tools are the agent's own tools in these tests.
func (l *lab) tools() []tool.Tool {
	approve := tool.WithCheckIn(tool.Func("approve_me", "does something a person must approve",
		func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
			l.mu.Lock()
			l.approved++
			l.mu.Unlock()
			return "the approved action ran", nil
		}))
	who := tool.Func("who", "says who the call acts for", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
		l.mu.Lock()
		l.identities = append(l.identities, c.Identity)
		l.mu.Unlock()
		if c.Identity == nil {
			return "nobody", nil
		}
		return c.Identity.Tenant + "/" + c.Identity.Principal, nil
	})
	noop := tool.Func("noop", "does nothing", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
		return "ok", nil
	})
	// workspace holds a session in the given scope, keyed by the call's
	// facts, and counts opens and closes per key.
	workspace := tool.Func("workspace", "opens a workspace held for a scope", func(ctx context.Context, c *tool.Call, in scopeArgs) (string, error) {
		scope := toolsession.Scope(in.Scope)
		key, err := c.Key(scope)
		if err != nil {
			return "", err
		}
		h := toolsession.HashKey(key)
		out, err := c.OnTeardown(func(context.Context) error {
			l.mu.Lock()
			l.closed[h]++
			l.mu.Unlock()
			return nil
		}, toolsession.Options{Scope: scope, Key: key})
		if err != nil {
			return "", err
		}
		if !out.Reused {
			l.mu.Lock()
			l.opened[h]++
			l.mu.Unlock()
		}
		return fmt.Sprintf("workspace %s reused=%v", h, out.Reused), nil
	})
	// midway asks a person from inside the call, holding a call-scoped
	// workspace while it waits.
	midway := tool.Func("midway", "asks a person halfway through", func(ctx context.Context, c *tool.Call, _ struct{}) (string, error) {
		if _, ok := tool.ApprovalFrom(ctx); ok {
			return "went on after the approval", nil
		}
		key, err := c.Key(toolsession.ScopeCall)
		if err != nil {
			return "", err
		}
		h := toolsession.HashKey(key)
		if _, err := c.OnTeardown(func(context.Context) error {
			l.mu.Lock()
			l.closed[h]++
			l.mu.Unlock()
			return nil
		}, toolsession.Options{Scope: toolsession.ScopeCall, Key: key}); err != nil {
			return "", err
		}
		l.mu.Lock()
		l.opened[h]++
		l.mu.Unlock()
		return "", tool.CheckIn("go on halfway?")
	})
	return []tool.Tool{approve, who, noop, workspace, midway}
}

// world is one registry holding one native instance.
type world struct {
	model *promptModel
	lab   *lab
	inst  *provider.Instance
	reg   *provider.Registry
	sink  *recordSink
	dir   string
	n     int
	mu    sync.Mutex
}

type worldOption func(*agent.Options)

func newWorld(t *testing.T, opts ...worldOption) *world {
	t.Helper()
	return newWorldOn(t, nil, nil, opts...)
}

// newWorldOn is newWorld over a given store and lab (nil: new ones): a
// second world on the first one's is the same agent after a restart.
func newWorldOn(t *testing.T, store native.Store, l *lab, opts ...worldOption) *world {
	t.Helper()
	if l == nil {
		l = newLab()
	}
	w := &world{model: &promptModel{}, lab: l, sink: &recordSink{}, dir: filepath.Clean(t.TempDir())}
	d, err := native.NewDriver(native.Config{Store: store, Agent: func(ctx context.Context, def provider.Definition) (agent.Options, error) {
		o := agent.Options{ID: "native-test", Model: w.model, Tools: w.lab.tools(), MaxIterations: 6,
			Sinks: []event.Sink{w.sink}}
		for _, f := range opts {
			f(&o)
		}
		return o, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	w.reg, err = provider.OpenRegistry(t.Context(), []provider.Driver{d},
		[]provider.Definition{{ID: "native", Provider: native.DefaultKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.reg.Dispose(context.Background()); err != nil {
			t.Errorf("dispose: %v", err)
		}
	})
	w.inst, err = w.reg.Instance("native")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) sessionID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	return fmt.Sprintf("session-%d", w.n)
}

// create opens a session (a fresh id and the world's directory unless req
// says) and closes it when the test ends.
func (w *world) create(t *testing.T, req provider.CreateRequest) *provider.ValidatedSession {
	t.Helper()
	if req.SessionID == "" {
		req.SessionID = w.sessionID()
	}
	if req.WorkingDirectory == "" {
		req.WorkingDirectory = w.dir
	}
	s, err := w.inst.Adapter().Create(t.Context(), req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	vs := s
	t.Cleanup(func() { vs.Close(context.Background(), provider.CloseRequested) })
	return vs
}

func (w *world) resume(t *testing.T, req provider.ResumeRequest) (*provider.ValidatedSession, error) {
	t.Helper()
	if req.SessionID == "" {
		req.SessionID = w.sessionID()
	}
	if req.WorkingDirectory == "" {
		req.WorkingDirectory = w.dir
	}
	s, err := w.inst.Adapter().Resume(t.Context(), req)
	if err != nil {
		return nil, err
	}
	vs := s
	t.Cleanup(func() { vs.Close(context.Background(), provider.CloseRequested) })
	return vs, nil
}

func (w *world) branch(t *testing.T, req provider.BranchRequest) (*provider.ValidatedSession, error) {
	t.Helper()
	if req.SessionID == "" {
		req.SessionID = w.sessionID()
	}
	if req.WorkingDirectory == "" {
		req.WorkingDirectory = w.dir
	}
	s, err := w.inst.Adapter().Branch(t.Context(), req)
	if err != nil {
		return nil, err
	}
	vs := s
	t.Cleanup(func() { vs.Close(context.Background(), provider.CloseRequested) })
	return vs, nil
}

// pull collects a turn's outputs and its error, if any.
func pull(seq iter.Seq2[provider.Output, error]) ([]provider.Output, error) {
	var outs []provider.Output
	for o, err := range seq {
		if err != nil {
			return outs, err
		}
		outs = append(outs, o)
	}
	return outs, nil
}

func turn(t *testing.T, s *provider.ValidatedSession, id, input string) []provider.Output {
	t.Helper()
	outs, err := pull(s.RunTurn(t.Context(), provider.TurnRequest{TurnID: id, Input: input}))
	if err != nil {
		t.Fatalf("turn %s: %v", id, err)
	}
	return outs
}

// shape renders outputs as kind[:text|outcome|request kind] for
// comparison, leaving out the usage reports (TestTurnReportsUsage checks
// them).
func shape(outs []provider.Output) []string {
	var out []string
	for _, o := range outs {
		switch o.Kind {
		case provider.OutputUsage:
		case provider.OutputText, provider.OutputActivity:
			out = append(out, string(o.Kind)+":"+o.Text)
		case provider.OutputTurnCompleted:
			out = append(out, string(o.Kind)+":"+string(o.Outcome))
		case provider.OutputRequest:
			out = append(out, string(o.Kind)+":"+string(o.Request.Kind)+":"+o.Request.Tool)
		default:
			out = append(out, string(o.Kind))
		}
	}
	return out
}

func last(outs []provider.Output) provider.Output {
	if len(outs) == 0 {
		return provider.Output{}
	}
	return outs[len(outs)-1]
}

// recordSink keeps the agent's events.
type recordSink struct {
	mu     sync.Mutex
	events []event.Event
	closed bool
}

func (r *recordSink) Export(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}
func (r *recordSink) Flush(context.Context) error { return nil }
func (r *recordSink) Close(context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

func (r *recordSink) of(typ event.Type) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (r *recordSink) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

func identityConfig(tenant, principal string) json.RawMessage {
	return native.SessionConfig{Identity: &tool.Identity{Tenant: tenant, Principal: principal}}.JSON()
}

package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// ErrShutdown is the cause given to calls cut by [Server.Shutdown], and the
// error a caller gets for a call that arrives after it began.
var ErrShutdown = errors.New("mcpserve: the server is shutting down")

// DefaultMaxCalls is Options.MaxCalls when unset.
const DefaultMaxCalls = 16

// Options configure a Server. The zero value serves with the defaults and
// logs failures with slog.
type Options struct {
	// Name and Version describe the server to clients (default "agentry"
	// and "devel").
	Name, Version string
	// Instructions are shown to clients that display them. Optional.
	Instructions string

	// TeardownTimeout bounds each cleanup a tool registers (default
	// toolsession.DefaultTimeout, 5s). A cleanup that outruns it is
	// abandoned and reported as a *toolsession.TimeoutError.
	TeardownTimeout time.Duration
	// MaxLiveSessions bounds the sessions held at once (default
	// toolsession.DefaultMaxLive, 64). A session with its call in flight is
	// never evicted: a call that needs a new session while every one is
	// busy waits up to SessionWait, then gets a tool error naming the
	// bound.
	MaxLiveSessions int
	// SessionWait bounds that wait (default toolsession.DefaultWait, 10s;
	// negative refuses at once).
	SessionWait time.Duration
	// MaxCalls bounds the tool calls served at once, across every
	// transport and client (default DefaultMaxCalls, 16). A call past it is
	// not run: its result is a tool error naming the bound, at once.
	MaxCalls int

	// Sink receives every event the door emits: tool start and end,
	// session started, reused, closed and close failed, and tool panics.
	// The door flushes it at Shutdown but never closes it: its owner does.
	Sink event.Sink
	// OnEvent receives the same events as Sink. Either, both or neither may
	// be set. It is called from many goroutines and must not block.
	OnEvent func(event.Event)
	// Report hears every teardown close, successful or not, as the tier
	// describes it.
	Report func(toolsession.Report)
	// OnError hears every failure that is not a tool result: a cleanup that
	// failed, panicked or timed out (*TeardownError), a tool that panicked
	// (*toolsession.PanicError), a sink or hook that panicked. Default: slog's default
	// logger at error level. It must not block.
	OnError func(error)

	// Logger receives the MCP SDK's own logs (default: none).
	Logger *slog.Logger
	// Now is the clock for event times and teardown durations (default
	// time.Now).
	Now func() time.Time
}

// Server serves a fixed set of tools over MCP. Build it with [New]; serve
// it with [Server.ServeStdio], [Server.Serve], [Server.Connect] or
// [Server.HTTPHandler], as many times and on as many transports as you
// like; stop it with [Server.Shutdown]. It is safe for concurrent use.
type Server struct {
	sdk   *mcp.Server
	tools map[string]*served
	names []string
	opt   Options

	tierMu sync.Mutex
	tier   atomic.Pointer[toolsession.Tier]

	flight inflight // tool calls being served
	// calls holds one token per call running, up to Options.MaxCalls.
	calls chan struct{}
	posts inflight // HTTP requests other than GET being answered
	// stop is cancelled when Shutdown stops waiting for calls in flight;
	// every call's context follows it.
	stop     context.Context
	stopCall context.CancelCauseFunc

	shutMu sync.Mutex
	shut   *shutdown
}

type served struct {
	t    tool.Tool
	spec tool.Spec
	v    *tool.Validator
}

type shutdown struct {
	done chan struct{}
	err  error
}

// New checks the tools and builds a server for them. It refuses, naming
// the tool, a nil tool, a name MCP does not allow, a name used twice, an
// input schema that is not a JSON Schema for an object, and a tool that
// asks for a check-in before every call (this door cannot pause for a
// person's approval).
func New(tools []tool.Tool, opt Options) (*Server, error) {
	if opt.Name == "" {
		opt.Name = "agentry"
	}
	if opt.Version == "" {
		opt.Version = "devel"
	}
	if opt.TeardownTimeout <= 0 {
		opt.TeardownTimeout = toolsession.DefaultTimeout
	}
	if opt.MaxLiveSessions <= 0 {
		opt.MaxLiveSessions = toolsession.DefaultMaxLive
	}
	if opt.MaxCalls <= 0 {
		opt.MaxCalls = DefaultMaxCalls
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	s := &Server{tools: make(map[string]*served, len(tools)), opt: opt, calls: make(chan struct{}, opt.MaxCalls)}
	s.stop, s.stopCall = context.WithCancelCause(context.Background())
	s.flight.zero = make(chan struct{})
	s.posts.zero = make(chan struct{})

	s.sdk = mcp.NewServer(&mcp.Implementation{Name: opt.Name, Version: opt.Version}, &mcp.ServerOptions{
		Instructions: opt.Instructions,
		Logger:       opt.Logger,
		// Advertise only what is served: tools (added below, which the SDK
		// announces itself), not the SDK's default logging capability.
		Capabilities: &mcp.ServerCapabilities{},
	})
	for i, t := range tools {
		sv, err := check(i, t)
		if err != nil {
			return nil, err
		}
		if _, dup := s.tools[sv.spec.Name]; dup {
			return nil, fmt.Errorf("mcpserve: two tools are named %q; give each tool its own name", sv.spec.Name)
		}
		s.tools[sv.spec.Name] = sv
		s.names = append(s.names, sv.spec.Name)
		s.sdk.AddTool(&mcp.Tool{
			Name:        sv.spec.Name,
			Description: sv.spec.Description,
			InputSchema: sv.spec.InputSchema,
		}, s.handler(sv))
	}
	return s, nil
}

// check validates one tool and compiles its argument validator.
func check(i int, t tool.Tool) (*served, error) {
	if t == nil {
		return nil, fmt.Errorf("mcpserve: tool %d is nil; pass only built tools", i)
	}
	spec := t.Spec()
	if err := checkName(spec.Name); err != nil {
		return nil, fmt.Errorf("mcpserve: tool %d: %w", i, err)
	}
	if spec.CheckIn {
		return nil, fmt.Errorf("mcpserve: tool %s asks for a person's approval before every call, and an MCP door cannot pause for one; serve it through an agent, or serve it without tool.WithCheckIn and rely on the MCP client's own approval prompt", spec.Name)
	}
	if len(spec.InputSchema) == 0 {
		spec.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	var top struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(spec.InputSchema, &top); err != nil {
		return nil, fmt.Errorf("mcpserve: tool %s: the input schema is not a JSON object: %v", spec.Name, err)
	}
	if top.Type != "object" {
		return nil, fmt.Errorf(`mcpserve: tool %s: MCP needs an input schema of "type": "object", and this one has %v; describe the arguments as an object`, spec.Name, top.Type)
	}
	v, err := tool.NewValidator(spec.Name, spec.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("mcpserve: %w", err)
	}
	return &served{t: t, spec: spec, v: v}, nil
}

// checkName applies MCP's rule for tool names: 1 to 128 characters, each a
// letter, digit, '_', '-' or '.'.
func checkName(name string) error {
	if name == "" {
		return errors.New("the tool has no name; set Spec().Name")
	}
	if len(name) > 128 {
		return fmt.Errorf("the tool name %.20q… is %d bytes long; MCP allows 128", name, len(name))
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
		if !ok {
			return fmt.Errorf("the tool name %q holds %q; MCP allows only letters, digits, '_', '-' and '.'", name, r)
		}
	}
	return nil
}

// Tools returns the names of the tools served, in the order given to New.
func (s *Server) Tools() []string {
	return slices.Clone(s.names)
}

// Tier returns the door's teardown tier, or nil until a tool has
// registered a cleanup: a door whose tools hold no sessions builds none.
func (s *Server) Tier() *toolsession.Tier { return s.tier.Load() }

// ensureTier builds the tier on first use.
func (s *Server) ensureTier() *toolsession.Tier {
	if t := s.tier.Load(); t != nil {
		return t
	}
	s.tierMu.Lock()
	defer s.tierMu.Unlock()
	if t := s.tier.Load(); t != nil {
		return t
	}
	t := toolsession.NewTier(toolsession.Config{
		Timeout: s.opt.TeardownTimeout,
		// Every registration here is call-scoped and fired when its call
		// settles; an idle sweep could only close a session under a call
		// that is still running.
		Idle:    -1,
		MaxLive: s.opt.MaxLiveSessions,
		Wait:    s.opt.SessionWait,
		Report:  s.report,
		Now:     s.opt.Now,
	})
	s.tier.Store(t)
	return t
}

// Serve serves one MCP session over t until the client goes away or ctx
// ends.
func (s *Server) Serve(ctx context.Context, t mcp.Transport) error {
	return s.sdk.Run(ctx, t)
}

// ServeStdio serves one MCP session over the process's stdin and stdout,
// the way an MCP client launches a local server. Nothing else may write to
// stdout while it runs.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.Serve(ctx, &mcp.StdioTransport{})
}

// Connect starts serving one session over t and returns at once; the
// session runs until either side closes it. Use it with in-memory
// transports.
func (s *Server) Connect(ctx context.Context, t mcp.Transport) (*mcp.ServerSession, error) {
	return s.sdk.Connect(ctx, t, nil)
}

// Shutdown stops serving calls and closes every session a tool still holds.
//
// New calls are refused from the moment it starts, and over HTTP every new
// request gets 503. Calls in flight may finish, and their HTTP answers be
// written, until ctx ends; the calls still running then are cancelled with
// cause [ErrShutdown] and given one teardown timeout to return, their
// call-scoped sessions closing as they do. Then every registration still
// held — those of tools that ignore cancellation — is fired with reason
// "shutdown", each cleanup bounded by the teardown timeout; the MCP
// sessions the HTTP handler opened are closed (ending their event
// streams); and the sink is flushed. So Shutdown returns within ctx's
// deadline plus about three teardown timeouts, whatever the tools do.
//
// Sessions served with ServeStdio, Serve or Connect belong to their caller:
// cancel the context given to ServeStdio or Serve, close what Connect
// returned.
//
// It is safe to call more than once and from several goroutines: they share
// one shutdown. The error says what did not finish in time.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutMu.Lock()
	if sh := s.shut; sh != nil {
		s.shutMu.Unlock()
		select {
		case <-sh.done:
			return sh.err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	sh := &shutdown{done: make(chan struct{})}
	s.shut = sh
	s.shutMu.Unlock()

	sh.err = s.shutdown(ctx)
	close(sh.done)
	return sh.err
}

func (s *Server) shutdown(ctx context.Context) error {
	var errs []error
	calls, posts := s.flight.close(), s.posts.close()
	if !drained(ctx, calls, posts) {
		n := s.flight.count()
		s.stopCall(ErrShutdown)
		// The caller's deadline has passed; from here each step is bounded
		// by the teardown timeout instead, so sessions still get closed.
		grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opt.TeardownTimeout)
		if drained(grace, calls, posts) {
			errs = append(errs, fmt.Errorf("mcpserve: %d calls were still running when the drain ended; they were cancelled", n))
		} else {
			errs = append(errs, fmt.Errorf("mcpserve: %d calls were still running when the drain ended, and %d did not return within %s of being cancelled; their sessions were closed under them",
				n, s.flight.count(), s.opt.TeardownTimeout))
		}
		cancel()
	}
	s.stopCall(ErrShutdown)

	bound := context.WithoutCancel(ctx)
	if t := s.tier.Load(); t != nil {
		t.FireShutdown(bound)
	}
	if err := s.closeHTTPSessions(bound); err != nil {
		errs = append(errs, err)
	}
	if s.opt.Sink != nil {
		fctx, cancel := context.WithTimeout(bound, s.opt.TeardownTimeout)
		if err := s.opt.Sink.Flush(fctx); err != nil {
			errs = append(errs, fmt.Errorf("mcpserve: flushing the event sink: %w", err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// drained waits until every channel is closed, or ctx ends.
func drained(ctx context.Context, zeros ...<-chan struct{}) bool {
	for _, z := range zeros {
		select {
		case <-z:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// closeHTTPSessions closes the MCP sessions the HTTP handler opened (those
// with a session id; stdio and in-memory sessions have none and belong to
// their caller). By now no HTTP request is in flight, so no answer is
// dropped; closing waits for the session's requests, so a tool that ignores
// cancellation is waited for up to the teardown timeout, then abandoned.
func (s *Server) closeHTTPSessions(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opt.TeardownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	n := 0
	for ss := range s.sdk.Sessions() {
		if ss.ID() == "" {
			continue
		}
		n++
		wg.Go(func() { _ = ss.Close() })
	}
	if n == 0 {
		return nil
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mcpserve: %d HTTP sessions did not close within %s: a tool is ignoring cancellation", n, s.opt.TeardownTimeout)
	}
}

// inflight counts calls being served and refuses new ones once closed.
type inflight struct {
	mu     sync.Mutex
	n      int
	closed bool
	zero   chan struct{} // closed when closed && n == 0
}

func (f *inflight) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.n++
	return true
}

func (f *inflight) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.closed && f.n == 0 {
		close(f.zero)
	}
}

func (f *inflight) close() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		if f.n == 0 {
			close(f.zero)
		}
	}
	return f.zero
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *inflight) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

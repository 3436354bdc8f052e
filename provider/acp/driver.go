package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/toolsession"
)

// DefaultKey is the provider key of a driver built without one.
const DefaultKey = "acp"

// Refusals and readiness causes. Openings refused with one of these reach
// the host as a *provider.OperationError wrapping it (errors.Is works).
var (
	// ErrUnsupportedVersion: the agent speaks another ACP protocol
	// version than 1.
	ErrUnsupportedVersion = errors.New("acp: the agent speaks another protocol version than ACP 1; use an agent (or adapter) release that speaks version 1")
	// ErrMissingCredentials: the agent asks for credentials the
	// definition's env does not give it.
	ErrMissingCredentials = errors.New("acp: the agent needs credentials the definition does not give it; add the variables its authentication method names to env")
	// ErrOutsideWorkspaceRoot: a session's working directory is not at or
	// under the definition's workspaceRoot.
	ErrOutsideWorkspaceRoot = errors.New("acp: the session's working directory is not inside the definition's workspaceRoot; open sessions in a directory under it")
	// ErrNotReady: the instance is not ready (see Readiness).
	ErrNotReady = errors.New("acp: the agent is not ready; check the instance's readiness")
	// ErrDisposed: the instance was disposed.
	ErrDisposed = errors.New("acp: the instance is disposed")
	// ErrAgentExited: the agent process is gone.
	ErrAgentExited = errors.New("acp: the agent process exited")
)

// Options configure a [Driver].
type Options struct {
	// Key is the provider key (default "acp").
	Key string
	// Launcher starts the agent processes. Required: the adapter never
	// runs an agent without an explicit choice of confinement — Jailed
	// (package jail), or Unjailed for one person's own machine.
	Launcher Launcher
	// Events receives the adapter's and the launcher's events (the acp
	// domain, and the MCP door's tool events for host tools), each with
	// the host's session id in Meta. It must not block. Optional.
	Events func(event.Event)
	// LookupEnv resolves NAME-only env entries (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// ClientName and ClientVersion describe agentry to agents (default
	// "agentry", "devel").
	ClientName, ClientVersion string
	// MaxClientRequests bounds the requests every agent of this driver
	// may have in flight with the client at once, across all sessions
	// (default 1024); past it a request is answered with an error at
	// once. Each session has its own bound too (limits.maxClientRequests).
	MaxClientRequests int
}

// Driver materialises ACP instances: each runs one agent command, one
// process per session. It supports multiple instances.
type Driver struct {
	opt      Options
	requests *hostRequests // every agent's requests in flight
}

var _ provider.Driver = (*Driver)(nil)

// NewDriver checks o and returns the driver.
func NewDriver(o Options) (*Driver, error) {
	if o.Key == "" {
		o.Key = DefaultKey
	}
	if err := provider.CheckProviderKey(o.Key); err != nil {
		return nil, fmt.Errorf("acp: Options.Key is not a provider key: %w", err)
	}
	if o.Launcher == nil {
		return nil, errors.New("acp: Options.Launcher is nil; pass the jail's launcher (acp.Jailed over package jail) to serve several people, or acp.Unjailed for a single-user run on your own machine")
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.ClientName == "" {
		o.ClientName = "agentry"
	}
	if o.ClientVersion == "" {
		o.ClientVersion = "devel"
	}
	switch {
	case o.MaxClientRequests == 0:
		o.MaxClientRequests = DefaultMaxHostClientRequests
	case o.MaxClientRequests < 0:
		return nil, errors.New("acp: Options.MaxClientRequests is negative; give a positive bound, or 0 for the default")
	}
	return &Driver{opt: o, requests: &hostRequests{max: int64(o.MaxClientRequests)}}, nil
}

func (d *Driver) ProviderKey() string             { return d.opt.Key }
func (d *Driver) SupportsMultipleInstances() bool { return true }

// Capabilities is what an instance declares given the agent's
// initialize answer: create; resume (session/load or session/resume of
// the binding when the agent offers one, else — or when it refuses — a
// new agent session under the binding, its memory new); interrupt (session/cancel), no steer; approval requests
// (session/request_permission); questions (elicitation/create); host bindings, with instructions placed
// as context, when the agent takes MCP servers over HTTP.
func Capabilities(key string, init sdk.InitializeResponse) provider.Capabilities {
	ac := init.AgentCapabilities
	c := provider.Capabilities{
		ProviderKey: key,
		Sessions:    provider.SessionCapabilities{Resume: true},
		Turns:       provider.TurnCapabilities{Interrupt: true},
		Requests:    provider.RequestCapabilities{Approval: true},
		// Elicitations (form and URL) are asked as questions.
		Interactions: provider.InteractionSupport{Kinds: []provider.InteractionKind{provider.InteractionQuestion}},
	}
	if ac.McpCapabilities.Http {
		c.HostBinding = provider.HostBindingSupport{Supported: true,
			InstructionPlacements: []provider.Placement{provider.PlacementContext}}
	}
	return c
}

// Materialize reads the definition's configuration, then starts the agent
// once to learn what it offers (initialize, authenticate) and stops it.
// An agent that cannot start is not an error here: the instance is built
// with what could be learnt, and its readiness says what is wrong.
func (d *Driver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	cfg, err := ParseConfig(def.Config)
	if err != nil {
		return provider.Materialized{}, err
	}
	for field, dir := range map[string]string{"home": cfg.Home, "workspaceRoot": cfg.WorkspaceRoot} {
		if dir == "" {
			continue
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return provider.Materialized{}, bad(field, "it is not a directory this process can see")
		}
	}
	env, _ := resolveEnv(cfg.Env, d.opt.LookupEnv)
	in := &instance{d: d, id: def.ID, cfg: cfg, env: env, sessions: map[*session]bool{}}
	if cfg.Pool > 0 {
		// The pool's first agent tells what a probe would.
		in.pool = newPool(in, cfg.Pool)
		pctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Limits.StartTimeout))
		in.readiness, in.init, in.probeErr = in.pool.first(pctx)
		cancel()
	} else {
		in.readiness, in.init, in.probeErr = in.probe(ctx)
	}
	caps := Capabilities(d.opt.Key, in.init)
	in.caps = caps
	var a provider.Adapter = adapter{in}
	if caps.Sessions.Resume {
		a = resumer{adapter{in}}
	}
	return provider.Materialized{Capabilities: caps, Adapter: a, Readiness: in.ready, Dispose: in.dispose}, nil
}

// ExpectHostTools is the host's word on the tools it lends every
// conversation: a pooled agent's session is opened ahead with an MCP
// server listing them, so a conversation lending them takes it without a
// second session/new (the agents waiting with other tools are replaced).
// Without a pool it changes nothing.
func (a adapter) ExpectHostTools(tools []provider.HostToolSpec) {
	if a.in.pool != nil {
		a.in.pool.expectHostTools(tools)
	}
}

var _ provider.HostToolsExpecter = adapter{}

// instance is one materialised definition and its open sessions.
type instance struct {
	d    *Driver
	id   string
	cfg  Config
	env  []string
	caps provider.Capabilities
	pool *agentPool // nil without Config.Pool

	probeMu   sync.Mutex
	readiness provider.Readiness
	init      sdk.InitializeResponse
	probeErr  error

	mu       sync.Mutex
	sessions map[*session]bool
	disposed bool
}

func (in *instance) emit(sessionID string, t event.Type, payload any) {
	if f := in.d.opt.Events; f != nil {
		f(event.Event{Type: t, Payload: payload, Meta: event.Meta{SessionID: sessionID}})
	}
}

func (in *instance) forward(sessionID string) func(event.Event) {
	return func(e event.Event) {
		if f := in.d.opt.Events; f != nil {
			if e.Meta.SessionID == "" {
				e.Meta.SessionID = sessionID
			}
			f(e)
		}
	}
}

// ready reports readiness: a ready instance stays ready; one that is not
// is probed again, so installing the agent or its key is picked up.
func (in *instance) ready(ctx context.Context) (provider.Readiness, error) {
	in.probeMu.Lock()
	defer in.probeMu.Unlock()
	if in.readiness == provider.Ready {
		return provider.Ready, nil
	}
	r, init, err := in.probe(ctx)
	in.readiness, in.probeErr = r, err
	if r == provider.Ready {
		in.init = init
		if in.pool != nil {
			in.pool.start()
		}
	}
	return r, nil
}

func (in *instance) currentReadiness() (provider.Readiness, error) {
	in.probeMu.Lock()
	defer in.probeMu.Unlock()
	return in.readiness, in.probeErr
}

// probe starts the agent in the workspace root, initialises and
// authenticates it, and stops it.
func (in *instance) probe(ctx context.Context) (provider.Readiness, sdk.InitializeResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(in.cfg.Limits.StartTimeout))
	defer cancel()
	label := "probe-" + toolsession.HashKey("acp-probe/"+in.id)
	ag, err := in.launch(ctx, launchRequest{label: label, workspace: in.cfg.WorkspaceRoot, events: in.forward(""), probe: true})
	if ag != nil {
		defer ag.shutdown(context.WithoutCancel(ctx), time.Duration(in.cfg.Limits.StopTimeout))
	}
	if err != nil {
		return readinessOf(err), sdk.InitializeResponse{}, err
	}
	return provider.Ready, ag.init, nil
}

func readinessOf(err error) provider.Readiness {
	switch {
	case errors.Is(err, ErrMissingExecutable), errors.Is(err, exec.ErrNotFound):
		return provider.MissingExecutable
	case errors.Is(err, ErrMissingCredentials):
		return provider.MissingCredentials
	case errors.Is(err, ErrUnsupportedVersion):
		return provider.UnsupportedVersion
	}
	return provider.Unavailable
}

func (in *instance) dispose(ctx context.Context) error {
	var perr error
	if in.pool != nil {
		perr = in.pool.close(ctx)
	}
	in.mu.Lock()
	in.disposed = true
	all := make([]*session, 0, len(in.sessions))
	for s := range in.sessions {
		all = append(all, s)
	}
	in.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() { errs[i] = s.Close(ctx, provider.CloseShutdown) })
	}
	wg.Wait()
	if err := errors.Join(append(errs, perr)...); err != nil {
		return fmt.Errorf("acp: stopping the agents of instance %s: %w", in.id, err)
	}
	return nil
}

// register adds an open session, unless the instance was disposed
// meanwhile.
func (in *instance) register(s *session) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.disposed {
		return false
	}
	in.sessions[s] = true
	return true
}

func (in *instance) forget(s *session) {
	in.mu.Lock()
	delete(in.sessions, s)
	in.mu.Unlock()
}

// launchRequest is one agent process to start.
type launchRequest struct {
	label     string
	workspace string
	events    func(event.Event)
	expose    []Exposed
	client    sdk.Client // nil for a probe: it answers nothing but refusals
	guard     *guard     // nil: a guard of its own
	// env is what the agent starts with (nil: the definition's); auth
	// the authentication method it is asked for.
	env  []string
	auth string
	// home is the agent's kept HOME (Config.KeepHome), "" for a private
	// one.
	home string
	// probe: the agent is started to learn what it offers, without the
	// session credentials the definition declares.
	probe bool
}

// newGuard is a guard with the definition's bound, the driver's host-wide
// bound, reporting to events.
func (in *instance) newGuard(label string, events func(event.Event)) *guard {
	return newGuard(label, in.cfg.Limits.MaxClientRequests, in.d.requests, events)
}

// agentProc is a started, initialised and authenticated agent.
type agentProc struct {
	proc  Process
	conn  *sdk.ClientSideConnection
	init  sdk.InitializeResponse
	input *agentInput
	guard *guard
	env   []string // what it was started with: its values are redacted from its stderr
	// watched is closed once the watch on the guard ended: the agent is
	// gone, or was stopped because the guard cut it off.
	watched chan struct{}
}

// launch starts an agent and brings it to where sessions can be opened.
// When it returns an agent with an error, the caller stops it.
func (in *instance) launch(ctx context.Context, r launchRequest) (*agentProc, error) {
	env := r.env
	if env == nil {
		env = in.env
	}
	proc, err := in.d.opt.Launcher.Launch(ctx, LaunchSpec{
		Argv: slices.Clone(in.cfg.Command), Env: slices.Clone(env), Workspace: r.workspace, Home: in.cfg.Home, HomeDir: r.home,
		AllowHosts: slices.Clone(in.cfg.AllowHosts), Label: r.label, Events: r.events, Expose: r.expose,
	})
	if err != nil {
		return nil, err
	}
	cl := r.client
	if cl == nil {
		cl = refusingClient{}
	}
	g := r.guard
	if g == nil {
		g = in.newGuard(r.label, r.events)
	}
	input := &agentInput{w: proc.Stdin(), g: g, stall: time.Duration(in.cfg.Limits.ClientRequestTimeout)}
	// The connection's reader starts at once, and SetLogger is not safe
	// to call once it runs: the reader waits at the gate until the logger
	// is set.
	gate := &gated{r: proc.Stdout(), open: make(chan struct{})}
	conn := sdk.NewClientSideConnection(cl, input, newAgentOutput(gate, g, input))
	conn.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	close(gate.open)
	ag := &agentProc{proc: proc, conn: conn, input: input, guard: g, env: env, watched: make(chan struct{})}
	go ag.watch(time.Duration(in.cfg.Limits.StopTimeout))
	if err := ag.handshake(ctx, in, r); err != nil {
		return ag, err
	}
	return ag, nil
}

// handshake runs initialize and, when the agent lists an env-var method
// the definition can satisfy, authenticate.
func (ag *agentProc) handshake(ctx context.Context, in *instance, r launchRequest) error {
	init, err := ag.conn.Initialize(ctx, sdk.InitializeRequest{
		ProtocolVersion: sdk.ProtocolVersionNumber,
		ClientCapabilities: sdk.ClientCapabilities{
			Fs:       sdk.FileSystemCapabilities{ReadTextFile: in.cfg.FS != FSWrite, WriteTextFile: true},
			Terminal: true,
			Elicitation: &sdk.ElicitationCapabilities{Form: &sdk.ElicitationFormCapabilities{},
				Url: &sdk.ElicitationUrlCapabilities{}},
		},
		ClientInfo: &sdk.Implementation{Name: in.d.opt.ClientName, Version: in.d.opt.ClientVersion},
	})
	if err != nil {
		return ag.failure("initialize", err)
	}
	if init.ProtocolVersion != sdk.ProtocolVersionNumber {
		return fmt.Errorf("%w (it answered version %d)", ErrUnsupportedVersion, init.ProtocolVersion)
	}
	ag.init = init
	env, want := ag.env, in.cfg.AuthMethod
	if r.env != nil || r.auth != "" {
		want = r.auth
	}
	later := len(in.cfg.Credentials) > 0 && (r.probe || r.env == nil)
	if later {
		// The sessions bring these: choose as if they were here, to
		// refuse an agent that offers no method for them, but ask for
		// nothing.
		want = in.cfg.sessionAuth()
		env = slices.Clone(env)
		for _, cr := range in.cfg.Credentials {
			env = append(env, cr.Var+"=later")
		}
	}
	method, needs, err := chooseAuth(init.AuthMethods, env, want)
	switch {
	case err != nil:
		return err
	case later && method != "":
		return nil
	case method != "":
		if _, err := ag.conn.Authenticate(ctx, sdk.AuthenticateRequest{MethodId: method}); err != nil {
			if ag.exited() {
				return ag.failure("authenticate", err)
			}
			return fmt.Errorf("%w: its authentication method %s refused the credentials given", ErrMissingCredentials, method)
		}
	case len(needs) > 0:
		return fmt.Errorf("%w: it asks for %s", ErrMissingCredentials, strings.Join(needs, " or "))
	}
	return nil
}

// authMethodID is a listed method's id, whatever its kind.
func authMethodID(m sdk.AuthMethod) string {
	switch {
	case m.EnvVar != nil:
		return m.EnvVar.Id
	case m.Terminal != nil:
		return m.Terminal.Id
	case m.Agent != nil:
		return m.Agent.Id
	}
	return ""
}

// authMethodIDs lists the ids of methods, for a refusal.
func authMethodIDs(methods []sdk.AuthMethod) string {
	ids := make([]string, 0, len(methods))
	for _, m := range methods {
		if id := authMethodID(m); id != "" {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

// chooseAuth picks the method to authenticate with. With want set (the
// definition's authMethod) it is that method, refused when the agent does
// not list it or, for an env-var method, when env lacks its variables.
// Otherwise it is the first env-var method whose required variables env
// has; when the agent lists only env-var methods and none is satisfied,
// needs names what each asks for; an agent that also lists a method of its
// own (it logs in by itself) is not authenticated by the client.
func chooseAuth(methods []sdk.AuthMethod, env []string, want string) (method string, needs []string, err error) {
	have := map[string]bool{}
	for _, kv := range env {
		name, v, _ := splitEnv(kv)
		have[name] = v != ""
	}
	missing := func(e *sdk.AuthMethodEnvVarInline) []string {
		var out []string
		for _, v := range e.Vars {
			if !v.Optional && !have[v.Name] {
				out = append(out, v.Name)
			}
		}
		return out
	}
	if want != "" {
		for _, m := range methods {
			if authMethodID(m) != want {
				continue
			}
			if m.EnvVar != nil {
				if miss := missing(m.EnvVar); len(miss) > 0 {
					return "", []string{strings.Join(miss, "+")}, nil
				}
			}
			return want, nil, nil
		}
		return "", nil, fmt.Errorf("%w: it does not offer the authentication method %q the definition names (authMethod, --agent-auth); it offers %s", ErrMissingCredentials, want, authMethodIDs(methods))
	}
	onlyEnv := len(methods) > 0
	for _, m := range methods {
		e := m.EnvVar
		if e == nil {
			onlyEnv = false
			continue
		}
		miss := missing(e)
		if len(miss) == 0 {
			return e.Id, nil, nil
		}
		needs = append(needs, strings.Join(miss, "+"))
	}
	if !onlyEnv {
		return "", nil, nil
	}
	return "", needs, nil
}

func (ag *agentProc) exited() bool {
	select {
	case <-ag.proc.Done():
		return true
	case <-ag.conn.Done():
		return true
	default:
		return false
	}
}

// watch stops the agent when its guard cuts it off (SIGTERM, then
// SIGKILL after grace); it ends when the agent is gone.
func (ag *agentProc) watch(grace time.Duration) {
	defer close(ag.watched)
	select {
	case <-ag.guard.cutOff():
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		_ = ag.proc.Stop(ctx)
	case <-ag.proc.Done():
	}
}

// failure describes a call that failed: the client cut the agent off, the
// process died, or the agent answered with an error.
func (ag *agentProc) failure(call string, err error) error {
	if cause := ag.guard.why(); cause != nil {
		return fmt.Errorf("%w during %s: the client stopped it: %w", ErrAgentExited, call, cause)
	}
	if ag.exited() || ag.input.failed() {
		return ag.gone(call)
	}
	var re *sdk.RequestError
	if errors.As(err, &re) {
		if re.Code == -32000 {
			return fmt.Errorf("%w: %s answered that authentication is required; name one of its authentication methods in authMethod (--agent-auth): it offers %s", ErrMissingCredentials, call, authMethodIDs(ag.init.AuthMethods))
		}
		return &agentRefusal{call: call, re: re}
	}
	return fmt.Errorf("acp: %s: %w", call, err)
}

// agentRefusal is a call the agent answered with a JSON-RPC error, which it
// unwraps to.
type agentRefusal struct {
	call string
	re   *sdk.RequestError
}

func (r *agentRefusal) Error() string {
	return fmt.Sprintf("acp: the agent refused %s (JSON-RPC error %d: %s)", r.call, r.re.Code, r.re.Message)
}

func (r *agentRefusal) Unwrap() error { return r.re }

// gone describes an agent whose connection ended, or whose stdin took
// no more: it exited, or is about to. The connection ends when the
// agent's stdout does, and a write fails when its stdin closes, a moment
// before the process is reaped: its exit status and last stderr lines
// are worth that wait.
func (ag *agentProc) gone(call string) error {
	t := time.NewTimer(connDrain)
	defer t.Stop()
	select {
	case <-ag.proc.Done():
	case <-t.C:
		if !ag.exited() {
			return fmt.Errorf("acp: the agent stopped reading its input during %s", call)
		}
		return fmt.Errorf("%w during %s: the connection to it ended while its process still ran", ErrAgentExited, call)
	}
	err := fmt.Errorf("%w during %s", ErrAgentExited, call)
	if perr := ag.proc.Err(); perr != nil {
		err = fmt.Errorf("%w during %s: %w", ErrAgentExited, call, perr)
	}
	if words := lastWords(ag.proc, ag.env); words != "" {
		err = fmt.Errorf("%w; the last lines of its standard error: %s", err, words)
	}
	return err
}

// connDrain bounds the wait for the connection to read the agent's last
// words after it exited.
const connDrain = time.Second

// shutdown ends the agent — SIGTERM, then SIGKILL after grace — and its
// connection.
func (ag *agentProc) shutdown(ctx context.Context, grace time.Duration) error {
	sctx, cancel := context.WithTimeout(ctx, grace)
	err := ag.proc.Stop(sctx)
	cancel()
	t := time.NewTimer(connDrain)
	select {
	case <-ag.conn.Done():
	case <-t.C:
	}
	t.Stop()
	// Whatever still holds the agent's stdout, the connection stops
	// reading here.
	ag.proc.Stdout().Close()
	ag.proc.Stdin().Close()
	<-ag.conn.Done()
	select {
	case <-ag.watched:
	case <-ctx.Done():
		// The process outlived its stop; Stop's own error says so.
	}
	return err
}

// checkWorkspace refuses a working directory outside the root, through
// symbolic links too.
func checkWorkspace(root, dir string) error {
	rr, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("acp: the workspace root cannot be resolved: %w", err)
	}
	rd, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return errors.New("acp: the session's working directory does not exist; make it before opening the session")
	}
	rel, err := filepath.Rel(rr, rd)
	if err != nil || (rel != "." && !filepath.IsLocal(rel)) {
		return ErrOutsideWorkspaceRoot
	}
	if fi, err := os.Stat(rd); err != nil || !fi.IsDir() {
		return errors.New("acp: the session's working directory is not a directory")
	}
	return nil
}

// gated is a reader whose reads wait until open is closed.
type gated struct {
	r    io.Reader
	open chan struct{}
}

func (g *gated) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}

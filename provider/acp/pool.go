package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/toolsession"
)

// pooled is an agent started ahead of need (Config.Pool): launched by
// the instance's launcher in a slot of its own — an empty workspace under
// the workspace root — initialised, authenticated, its session opened
// there (session/new) and set to the instance's mode and model, with a
// host-tools listener exposed to it. When the host said which tools it
// lends every conversation (ExpectHostTools), the session is opened with
// an MCP server listing them on that listener (lent), answering no call
// until the agent is taken. A session that takes it binds it: its client,
// its events, its host tools, its workspace. It is never given to a
// second session.
type pooled struct {
	ag *agentProc
	// pre is the session opened ahead in the slot: a conversation that
	// lends exactly the tools it lists (none, when lent is nil) takes it
	// as its own.
	pre    sdk.NewSessionResponse
	lent   *lateTools    // nil: opened without MCP servers
	hosts  *hostServer   // serving lent on ln
	label  string        // the launcher's name for it
	took   time.Duration // from its launch to its session opened
	slot   string        // its workspace, empty until taken
	ln     net.Listener  // exposed to it as hostToolsName
	late   *lateClient
	events *lateEvents
	// release lets the pool refill this agent's place (set by take).
	release func()
}

// agentPool keeps up to size pooled agents. One goroutine fills it, one
// agent at a time, and is woken when one is taken.
type agentPool struct {
	in   *instance
	size int

	life context.Context
	stop context.CancelFunc
	kick chan struct{}
	once sync.Once
	done chan struct{} // closed when the filler returned

	mu     sync.Mutex
	ready  []*pooled
	held   int // agents taken whose place is not released yet
	closed bool
	failed error // the last launch that failed; the filler waits for a take
	// expect are the tools the host lends every conversation
	// (ExpectHostTools); stale, the agents opened with others, which the
	// filler stops and replaces.
	expect []provider.HostToolSpec
	stale  []*pooled
}

func newPool(in *instance, size int) *agentPool {
	p := &agentPool{in: in, size: size, kick: make(chan struct{}, 1), done: make(chan struct{})}
	p.life, p.stop = context.WithCancel(context.Background())
	return p
}

// first launches the first pooled agent while the instance is
// materialised: its initialize answer is what a probe would have
// learnt, so the pool pays no probe process. On success the filler
// starts.
func (p *agentPool) first(ctx context.Context) (provider.Readiness, sdk.InitializeResponse, error) {
	pa, err := p.launch(ctx)
	if err != nil {
		return readinessOf(err), sdk.InitializeResponse{}, err
	}
	p.mu.Lock()
	n := 0
	if p.fits(pa) {
		p.ready = append(p.ready, pa)
		n = len(p.ready)
	} else {
		p.stale = append(p.stale, pa)
	}
	p.mu.Unlock()
	if n > 0 {
		p.pooled(pa, n)
	}
	p.start()
	return provider.Ready, pa.ag.init, nil
}

// start runs the filler (once).
func (p *agentPool) start() {
	p.once.Do(func() { go p.fill() })
}

// fill keeps the pool at its size until the pool closes. A launch that
// fails is not retried until a take or a release wakes the filler: a broken agent
// does not spin.
func (p *agentPool) fill() {
	defer close(p.done)
	for {
		p.mu.Lock()
		stale := p.stale
		p.stale = nil
		p.mu.Unlock()
		for _, pa := range stale {
			_ = pa.discard(context.Background(), time.Duration(p.in.cfg.Limits.StopTimeout))
		}
		p.mu.Lock()
		want := !p.closed && p.failed == nil && len(p.ready)+p.held < p.size
		p.mu.Unlock()
		if !want {
			select {
			case <-p.kick:
				p.mu.Lock()
				p.failed = nil
				p.mu.Unlock()
				continue
			case <-p.life.Done():
				return
			}
		}
		ctx, cancel := context.WithTimeout(p.life, time.Duration(p.in.cfg.Limits.StartTimeout))
		pa, err := p.launch(ctx)
		cancel()
		p.mu.Lock()
		n := 0
		if err != nil {
			p.failed = err
		} else if p.closed {
			err = ErrDisposed
		} else if !p.fits(pa) {
			p.stale = append(p.stale, pa) // the host changed its tools meanwhile
			pa = nil
		} else {
			p.ready = append(p.ready, pa)
			n = len(p.ready)
		}
		p.mu.Unlock()
		if pa != nil && err != nil {
			pa.discard(context.Background(), time.Duration(p.in.cfg.Limits.StopTimeout))
		} else if n > 0 {
			p.pooled(pa, n)
		}
	}
}

// pooled reports an agent that joined the pool, n waiting with it.
func (p *agentPool) pooled(pa *pooled, n int) {
	var names []string
	if pa.lent != nil {
		for _, t := range pa.lent.specs {
			names = append(names, t.Name)
		}
	}
	p.in.emit("", TypeAgentPooled, &AgentPooled{Label: pa.label, Waiting: n,
		TookMs: float64(pa.took.Microseconds()) / 1000, HostTools: names})
}

// fits reports whether pa's session lists the tools the host now lends
// (p.mu held).
func (p *agentPool) fits(pa *pooled) bool {
	var have []provider.HostToolSpec
	if pa.lent != nil {
		have = pa.lent.specs
	}
	return sameHostTools(have, p.expect)
}

// expectHostTools makes the tools the host lends every conversation the
// ones the pool's agents list from now on: the agents waiting with other
// tools are replaced.
func (p *agentPool) expectHostTools(tools []provider.HostToolSpec) {
	p.mu.Lock()
	p.expect = tools
	keep := p.ready[:0:0]
	for _, pa := range p.ready {
		if p.fits(pa) {
			keep = append(keep, pa)
		} else {
			p.stale = append(p.stale, pa)
		}
	}
	p.ready = keep
	p.mu.Unlock()
	p.wake()
}

// expected is what a new pooled agent lists.
func (p *agentPool) expected() []provider.HostToolSpec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.expect
}

// take hands out a ready agent, nil when none is (then the filler is
// woken at once). The refill of a taken agent waits for its release:
// launching its successor would compete for the CPU with the first turn
// of the person who took it, so the conversation releases it when that
// turn has ended, or when it closes, and the pool's start timeout
// releases it when neither came.
func (p *agentPool) take() *pooled {
	p.mu.Lock()
	var pa *pooled
	if n := len(p.ready); n > 0 && !p.closed {
		pa, p.ready = p.ready[0], p.ready[1:]
		p.held++
	}
	p.mu.Unlock()
	if pa == nil {
		p.wake()
		return nil
	}
	var once sync.Once
	free := func() {
		p.mu.Lock()
		p.held--
		p.mu.Unlock()
		p.wake()
	}
	t := time.AfterFunc(time.Duration(p.in.cfg.Limits.StartTimeout), func() { once.Do(free) })
	pa.release = func() {
		once.Do(func() {
			t.Stop()
			free()
		})
	}
	return pa
}

// wake wakes the filler.
func (p *agentPool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// size reports how many agents wait in the pool.
func (p *agentPool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// close stops the filler and every agent still waiting, and removes
// their (empty) workspaces and their HOMEs.
func (p *agentPool) close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	left := append(p.ready, p.stale...)
	p.ready, p.stale = nil, nil
	p.mu.Unlock()
	p.stop()
	p.once.Do(func() { close(p.done) }) // never started
	<-p.done
	errs := make([]error, len(left))
	var wg sync.WaitGroup
	for i, pa := range left {
		wg.Go(func() { errs[i] = pa.discard(ctx, time.Duration(p.in.cfg.Limits.StopTimeout)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// launch starts one pooled agent in a fresh slot.
func (p *agentPool) launch(ctx context.Context) (*pooled, error) {
	in := p.in
	begun := time.Now()
	slot, err := os.MkdirTemp(in.cfg.WorkspaceRoot, "pool-")
	if err != nil {
		return nil, fmt.Errorf("acp: making a pooled agent's workspace: %w", err)
	}
	if err := os.Chmod(slot, 0o700); err != nil {
		_ = os.Remove(slot)
		return nil, fmt.Errorf("acp: making a pooled agent's workspace: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = os.Remove(slot)
		return nil, fmt.Errorf("acp: listening for a pooled agent's host tools: %w", err)
	}
	label := "pool-" + toolsession.HashKey("acp-pool/"+slot)
	pa := &pooled{label: label, slot: slot, ln: ln, late: &lateClient{}, events: &lateEvents{in: in}}
	g := in.newGuard(label, pa.events.emit)
	if tools := p.expected(); len(tools) > 0 {
		pa.lent = &lateTools{specs: tools}
		if pa.hosts, err = startHostServer(pa.lent, pa.events.emit, g, in.cfg.Limits, ln); err != nil {
			_ = ln.Close()
			_ = os.Remove(slot)
			return nil, err
		}
	}
	pa.ag, err = in.launch(ctx, launchRequest{label: label, workspace: slot, home: in.keptHome(slot), events: pa.events.emit,
		expose: []Exposed{{Name: hostToolsName, Listener: ln}}, client: pa.late, guard: g})
	if err == nil {
		err = pa.openAhead(ctx, in.cfg.Mode, in.cfg.Model)
	}
	if err != nil {
		pa.discard(context.WithoutCancel(ctx), time.Duration(in.cfg.Limits.StopTimeout))
		return nil, err
	}
	pa.took = time.Since(begun)
	return pa, nil
}

// openAhead opens the pooled agent's session in its slot, with the
// host-tools server when it has one, and configures it.
func (pa *pooled) openAhead(ctx context.Context, mode, model string) error {
	servers := []sdk.McpServer{}
	if pa.hosts != nil {
		addr := pa.ag.proc.Addr(hostToolsName)
		if addr == "" {
			return errors.New("acp: the launcher did not make the host-tools server reachable from inside the agent's confinement")
		}
		servers = append(servers, pa.hosts.server(addr))
	}
	var err error
	pa.pre, err = pa.ag.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: pa.slot, McpServers: servers})
	if err != nil {
		return pa.ag.failure("session/new", err)
	}
	return pa.configureAhead(ctx, mode, model)
}

// configureAhead applies the instance's mode and model to the session
// opened ahead, so that a conversation keeping them pays no round trip
// when it takes the agent (claude-agent-acp answers each only after its
// own start-up work, a few hundred milliseconds). Neither is about a
// person. A value the agent does not offer is left for Create to refuse
// by name.
func (pa *pooled) configureAhead(ctx context.Context, mode, model string) error {
	sid := pa.pre.SessionId
	if m := pa.pre.Modes; mode != "" && m != nil && string(m.CurrentModeId) != mode &&
		slices.ContainsFunc(m.AvailableModes, func(o sdk.SessionMode) bool { return string(o.Id) == mode }) {
		if _, err := pa.ag.conn.SetSessionMode(ctx, sdk.SetSessionModeRequest{SessionId: sid, ModeId: sdk.SessionModeId(mode)}); err != nil {
			return pa.ag.failure("session/set_mode", err)
		}
		set := *m
		set.CurrentModeId = sdk.SessionModeId(mode)
		pa.pre.Modes = &set
	}
	sel := modelOption(pa.pre.ConfigOptions)
	if model == "" || sel == nil || string(sel.CurrentValue) == model || !slices.Contains(selectValues(sel), model) {
		return nil
	}
	resp, err := pa.ag.conn.SetSessionConfigOption(ctx, sdk.SetSessionConfigOptionRequest{ValueId: &sdk.SetSessionConfigOptionValueId{
		SessionId: sid, ConfigId: sel.Id, Value: sdk.SessionConfigValueId(model)}})
	if err != nil {
		return pa.ag.failure("session/set_config_option", err)
	}
	if modelOption(resp.ConfigOptions) != nil {
		pa.pre.ConfigOptions = resp.ConfigOptions
		return nil
	}
	// An answer without the options: the session's, the model changed.
	opts := slices.Clone(pa.pre.ConfigOptions)
	for i, o := range opts {
		if o.Select != nil && o.Select.Id == sel.Id {
			c := *o.Select
			c.CurrentValue = sdk.SessionConfigValueId(model)
			opts[i].Select = &c
		}
	}
	pa.pre.ConfigOptions = opts
	return nil
}

// discard stops an agent no session took and removes its workspace.
func (pa *pooled) discard(ctx context.Context, grace time.Duration) error {
	var err error
	if pa.release != nil {
		pa.release()
	}
	if pa.ag != nil {
		err = pa.ag.shutdown(ctx, grace)
	}
	if pa.hosts != nil {
		err = errors.Join(err, pa.hosts.close(ctx))
	}
	_ = pa.ln.Close()
	_ = os.RemoveAll(pa.slot)
	_ = os.RemoveAll(homeOf(pa.slot))
	return err
}

// adoptable reports whether workDir is an empty directory (not a link):
// a new conversation's, which a pooled agent's workspace can replace.
func adoptable(workDir string) bool {
	fi, err := os.Lstat(workDir)
	if err != nil || !fi.IsDir() {
		return false
	}
	f, err := os.Open(workDir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && errors.Is(err, io.EOF)
}

// adopt makes the pooled agent's workspace the session's: workDir, which
// the host made for a new conversation and which must still be an empty
// directory, becomes a symbolic link to the slot, so the conversation
// finds its files there from now on (a later cold start resolves it).
// It returns the slot.
func (pa *pooled) adopt(workDir string) (string, error) {
	fi, err := os.Lstat(workDir)
	if err != nil || !fi.IsDir() {
		return "", errors.New("acp: the working directory is not a plain directory")
	}
	entries, err := os.ReadDir(workDir)
	if err != nil || len(entries) > 0 {
		return "", errors.New("acp: the working directory is not empty")
	}
	if err := os.Remove(workDir); err != nil {
		return "", err
	}
	if err := os.Symlink(pa.slot, workDir); err != nil {
		_ = os.Mkdir(workDir, fi.Mode().Perm())
		return "", err
	}
	return pa.slot, nil
}

// lateEvents forwards a pooled agent's events with the session id it is
// bound to ("" while it waits).
type lateEvents struct {
	in  *instance
	sid atomic.Pointer[string]
}

func (l *lateEvents) bind(sessionID string) { l.sid.Store(&sessionID) }

func (l *lateEvents) emit(e event.Event) {
	if id := l.sid.Load(); id != nil && e.Meta.SessionID == "" {
		e.Meta.SessionID = *id
	}
	if f := l.in.d.opt.Events; f != nil {
		f(e)
	}
}

// lateClient answers a pooled agent: refusals until a session binds it,
// then that session's client.
type lateClient struct{ c atomic.Pointer[client] }

var _ sdk.Client = (*lateClient)(nil)

func (l *lateClient) bind(c *client) { l.c.Store(c) }

func (l *lateClient) ReadTextFile(ctx context.Context, p sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.ReadTextFile(ctx, p)
	}
	return refusingClient{}.ReadTextFile(ctx, p)
}

func (l *lateClient) WriteTextFile(ctx context.Context, p sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.WriteTextFile(ctx, p)
	}
	return refusingClient{}.WriteTextFile(ctx, p)
}

func (l *lateClient) RequestPermission(ctx context.Context, p sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.RequestPermission(ctx, p)
	}
	return refusingClient{}.RequestPermission(ctx, p)
}

func (l *lateClient) SessionUpdate(ctx context.Context, n sdk.SessionNotification) error {
	if c := l.c.Load(); c != nil {
		return c.SessionUpdate(ctx, n)
	}
	return nil
}

func (l *lateClient) UnstableCreateElicitation(ctx context.Context, p sdk.UnstableCreateElicitationRequest) (sdk.UnstableCreateElicitationResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.UnstableCreateElicitation(ctx, p)
	}
	return sdk.UnstableCreateElicitationResponse{}, errNoSession
}

func (l *lateClient) UnstableCompleteElicitation(ctx context.Context, n sdk.UnstableCompleteElicitationNotification) error {
	if c := l.c.Load(); c != nil {
		return c.UnstableCompleteElicitation(ctx, n)
	}
	return nil
}

func (l *lateClient) CreateTerminal(ctx context.Context, p sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.CreateTerminal(ctx, p)
	}
	return refusingClient{}.CreateTerminal(ctx, p)
}

func (l *lateClient) KillTerminal(ctx context.Context, p sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.KillTerminal(ctx, p)
	}
	return refusingClient{}.KillTerminal(ctx, p)
}

func (l *lateClient) TerminalOutput(ctx context.Context, p sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.TerminalOutput(ctx, p)
	}
	return refusingClient{}.TerminalOutput(ctx, p)
}

func (l *lateClient) ReleaseTerminal(ctx context.Context, p sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.ReleaseTerminal(ctx, p)
	}
	return refusingClient{}.ReleaseTerminal(ctx, p)
}

func (l *lateClient) WaitForTerminalExit(ctx context.Context, p sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	if c := l.c.Load(); c != nil {
		return c.WaitForTerminalExit(ctx, p)
	}
	return refusingClient{}.WaitForTerminalExit(ctx, p)
}

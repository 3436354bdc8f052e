package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/toolsession"
)

// Engine runs the turns. An *agent.Agent is one, as it is; a provider
// adapter fits behind the same methods.
type Engine interface {
	Run(ctx context.Context, in agent.Input) (agent.Result, error)
	Resume(ctx context.Context, cp agent.Checkpoint, d agent.Decision) (agent.Result, error)
	// CloseToolSessionsReason closes a conversation's tool sessions and
	// abandons its pauses.
	CloseToolSessionsReason(ctx context.Context, sessionID string, r toolsession.Reason) int
	// AbandonCheckpoint gives up a pause nobody will answer.
	AbandonCheckpoint(ctx context.Context, cp agent.Checkpoint) (int, error)
	LiveToolSessions() int
	// Bus is where the host's own events go, beside the engine's.
	Bus() *event.Bus
	// Shutdown closes every tool session and flushes and closes the sinks.
	Shutdown(ctx context.Context) error
}

// Defaults for a zero Options.
const (
	DefaultMaxTurns             = 256
	DefaultMaxTurnsPerPrincipal = 32
	DefaultMaxOpenSessions      = 100
	DefaultIdleEvict            = 15 * time.Minute
	DefaultEvictEvery           = time.Minute
	DefaultTurnTimeout          = 10 * time.Minute
	DefaultMaxBodyBytes         = 1 << 20
	DefaultCutGrace             = 5 * time.Second
	DefaultKeepAlive            = 15 * time.Second
)

// Options configure a Host. Engine, Store and Auth are required.
type Options struct {
	Engine Engine
	Store  Store
	Auth   Authenticator
	// Router streams turn events (SSE) and feeds the metrics. Give
	// Router.Route() to the agent's Options.Routes, or leave it nil: New
	// then makes one and attaches it to Engine.Bus().
	Router *Router

	// MaxTurns bounds the turns running at once across the host (default
	// 256); MaxTurnsPerPrincipal bounds them per principal (default 32).
	MaxTurns, MaxTurnsPerPrincipal int
	// MaxOpenSessions bounds the conversations a principal has open, not
	// closed (default 100).
	MaxOpenSessions int
	// IdleEvict is how long a conversation stays in memory untouched
	// before it is evicted: its tool sessions close (reason evicted), a
	// pause it waits on is abandoned, its transcript stays in the store
	// (default 15m; negative: never).
	IdleEvict time.Duration
	// EvictEvery is how often the host looks for idle conversations
	// (default 1m; negative: never in the background — call EvictIdle).
	EvictEvery time.Duration
	// TurnTimeout bounds one turn (default 10m). A turn is not cancelled
	// when its client goes away: it finishes and is saved.
	TurnTimeout time.Duration
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64
	// KeepAlive is how often an SSE stream that has nothing to say sends a
	// comment line, so proxies and load balancers do not close a long
	// turn's stream as idle (default 15s; negative: never).
	KeepAlive time.Duration
	// CutGrace is how long Shutdown waits, after cutting the turns still
	// running at its deadline, for them to be recorded (default 5s).
	CutGrace time.Duration
	// Now is the clock for idle eviction and timestamps (default time.Now).
	Now func() time.Time
	// Logger hears what clients are not told (store failures in detail).
	Logger *slog.Logger
	// NoConsole leaves the web console out: / is a 404 like any unknown path.
	NoConsole bool
}

// Host serves conversations over HTTP. It is an http.Handler; the caller
// owns the listener, and calls Shutdown on the way out.
type Host struct {
	opt     Options
	engine  Engine
	store   Store
	auth    Authenticator
	router  *Router
	bus     *event.Bus
	metrics *metrics
	log     *slog.Logger
	now     func() time.Time
	handler http.Handler

	mu       sync.Mutex
	live     map[string]*liveConv
	draining bool
	inflight int
	idle     chan struct{} // closed when inflight drops to 0 while draining
	running  map[*turnCtl]struct{}
	turns    int
	byOwner  map[Owner]int
	createMu sync.Mutex // creates run one at a time, so the open-session bound holds

	stopJanitor chan struct{}
	janitorDone chan struct{}

	shutOnce sync.Once
	shutDone chan struct{}
	shutErr  error
}

// liveConv is a conversation held in memory. Fields other than the ones
// noted are guarded by busy: only the request that set busy touches them.
type liveConv struct {
	id    string
	owner Owner
	// guarded by Host.mu
	busy     bool
	lastUsed time.Time
	// guarded by busy
	conv Conversation
	cp   *agent.Checkpoint // the paused turn's checkpoint, when known
}

type turnCtl struct{ cancel context.CancelCauseFunc }

// errCut is the cause of a turn cut by the shutdown drain bound.
var errCut = errors.New("host: the turn was cut by the shutdown drain bound")

// New builds a host. It starts one goroutine (the idle sweep) unless
// EvictEvery is negative; Shutdown stops it.
func New(opt Options) (*Host, error) {
	switch {
	case opt.Engine == nil:
		return nil, errors.New("host: Options.Engine is nil; pass an *agent.Agent")
	case opt.Store == nil:
		return nil, errors.New("host: Options.Store is nil; open one with host.OpenStore(ctx, \"agentry.db\")")
	case opt.Auth == nil:
		return nil, errors.New("host: Options.Auth is nil; pass a *host.Tokens (host.LoadTokens) or another Authenticator")
	}
	if opt.MaxTurns == 0 {
		opt.MaxTurns = DefaultMaxTurns
	}
	if opt.MaxTurnsPerPrincipal == 0 {
		opt.MaxTurnsPerPrincipal = DefaultMaxTurnsPerPrincipal
	}
	if opt.MaxOpenSessions == 0 {
		opt.MaxOpenSessions = DefaultMaxOpenSessions
	}
	if opt.MaxTurns < 0 || opt.MaxTurnsPerPrincipal < 0 || opt.MaxOpenSessions < 0 || opt.MaxBodyBytes < 0 || opt.TurnTimeout < 0 || opt.CutGrace < 0 {
		return nil, errors.New("host: bounds in Options must not be negative; use 0 for the default")
	}
	if opt.IdleEvict == 0 {
		opt.IdleEvict = DefaultIdleEvict
	}
	if opt.EvictEvery == 0 {
		opt.EvictEvery = DefaultEvictEvery
	}
	if opt.TurnTimeout == 0 {
		opt.TurnTimeout = DefaultTurnTimeout
	}
	if opt.MaxBodyBytes == 0 {
		opt.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opt.CutGrace == 0 {
		opt.CutGrace = DefaultCutGrace
	}
	if opt.KeepAlive == 0 {
		opt.KeepAlive = DefaultKeepAlive
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	bus := opt.Engine.Bus()
	if bus == nil {
		return nil, errors.New("host: Options.Engine.Bus() is nil; the host needs the engine's event bus")
	}
	r := opt.Router
	if r == nil {
		r = NewRouter()
		if err := bus.Add(r, event.Filter{Tier: event.TierFull}); err != nil {
			return nil, fmt.Errorf("host: attaching the router: %w", err)
		}
	}
	if r.owned.Swap(true) {
		return nil, errors.New("host: this Router already serves another host; make one Router per host")
	}
	h := &Host{
		opt:      opt,
		engine:   opt.Engine,
		store:    opt.Store,
		auth:     opt.Auth,
		router:   r,
		bus:      bus,
		log:      opt.Logger,
		now:      opt.Now,
		live:     make(map[string]*liveConv),
		running:  make(map[*turnCtl]struct{}),
		byOwner:  make(map[Owner]int),
		shutDone: make(chan struct{}),
	}
	h.metrics = newMetrics(func() float64 { return float64(h.engine.LiveToolSessions()) }, func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return float64(len(h.live))
	})
	r.metrics.Store(h.metrics)
	h.handler = h.routes()
	if opt.EvictEvery > 0 && opt.IdleEvict > 0 {
		h.stopJanitor = make(chan struct{})
		h.janitorDone = make(chan struct{})
		go h.janitor(opt.EvictEvery)
	}
	return h, nil
}

// ServeHTTP serves the API.
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.handler.ServeHTTP(w, r) }

// newSessionID returns "ses_" and 32 hex digits (128 random bits).
func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "ses_" + hex.EncodeToString(b[:])
}

// validSessionID accepts only ids newSessionID could have made, so no
// other string reaches the store.
func validSessionID(id string) bool {
	if len(id) != 36 || id[:4] != "ses_" {
		return false
	}
	for i := 4; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// enter admits a request, or refuses it once Shutdown has begun.
func (h *Host) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.draining {
		return false
	}
	h.inflight++
	return true
}

func (h *Host) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inflight--
	if h.draining && h.inflight == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// Drain begins a shutdown without waiting for it: from its return, /readyz
// fails and new requests get 503, while requests in flight go on. Shutdown
// calls it first; a caller may call it earlier (for example to tell a load
// balancer before anything else). It is idempotent.
func (h *Host) Drain() {
	h.mu.Lock()
	h.draining = true
	h.mu.Unlock()
}

// Draining reports whether Drain or Shutdown has begun.
func (h *Host) Draining() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.draining
}

// emit sends a host event with the conversation's meta.
func (h *Host) emit(typ event.Type, payload any, id string, o Owner) {
	h.bus.Export(event.Event{Type: typ, Payload: payload, Meta: event.Meta{SessionID: id, Tenant: o.Tenant, Principal: o.Principal}})
}

// Shutdown stops the host: new requests get 503 and /readyz fails at
// once; requests in flight may finish until ctx ends; turns still running
// then are cut (recorded as failed, outcome cut) and given CutGrace to be
// recorded; then the engine shuts down (every tool session closed, sinks
// flushed and closed) and the store closes. It is idempotent. It installs
// no signal handler: the command wires signals to it.
func (h *Host) Shutdown(ctx context.Context) error {
	first := false
	h.shutOnce.Do(func() { first = true })
	if !first {
		select {
		case <-h.shutDone:
			return h.shutErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.shutErr = h.shutdown(ctx)
	close(h.shutDone)
	return h.shutErr
}

func (h *Host) shutdown(ctx context.Context) error {
	h.Drain()
	h.mu.Lock()
	var idle chan struct{}
	if h.inflight > 0 {
		h.idle = make(chan struct{})
		idle = h.idle
	}
	h.mu.Unlock()

	var errs []error
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			h.mu.Lock()
			n := len(h.running)
			for t := range h.running {
				t.cancel(errCut)
			}
			h.mu.Unlock()
			if n > 0 {
				errs = append(errs, fmt.Errorf("host: shutdown: %d turns were still running at the drain deadline and were cut", n))
			}
			t := time.NewTimer(h.opt.CutGrace)
			select {
			case <-idle:
			case <-t.C:
				errs = append(errs, fmt.Errorf("host: shutdown: requests were still in flight %s after the cut", h.opt.CutGrace))
			}
			t.Stop()
		}
	}
	if h.stopJanitor != nil {
		close(h.stopJanitor)
		<-h.janitorDone
	}
	if err := h.engine.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		errs = append(errs, fmt.Errorf("host: shutdown: %w", err))
	}
	if err := h.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("host: shutdown: closing the store: %w", err))
	}
	return errors.Join(errs...)
}

// janitor evicts idle conversations every period until Shutdown.
func (h *Host) janitor(every time.Duration) {
	defer close(h.janitorDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stopJanitor:
			return
		case <-t.C:
			h.EvictIdle(context.Background())
		}
	}
}

type sweeper interface{ SweepIdleToolSessions() }

// EvictIdle evicts the conversations untouched for Options.IdleEvict: their
// tool sessions close (reason evicted), a pause they wait on is abandoned
// (recorded in the turn log), and they leave memory; their transcripts
// stay in the store, and the next request loads them again. It returns
// how many it evicted. The background sweep calls it; so can a caller.
func (h *Host) EvictIdle(ctx context.Context) int {
	if s, ok := h.engine.(sweeper); ok {
		s.SweepIdleToolSessions()
	}
	if h.opt.IdleEvict < 0 {
		return 0
	}
	cutoff := h.now().Add(-h.opt.IdleEvict)
	var picked []*liveConv
	h.mu.Lock()
	for _, lc := range h.live {
		if !lc.busy && !lc.lastUsed.After(cutoff) {
			lc.busy = true
			picked = append(picked, lc)
		}
	}
	h.mu.Unlock()
	for _, lc := range picked {
		h.evict(ctx, lc)
	}
	return len(picked)
}

func (h *Host) evict(ctx context.Context, lc *liveConv) {
	n := h.engine.CloseToolSessionsReason(ctx, lc.id, toolsession.ReasonEvicted)
	if lc.conv.State == StatePaused {
		n += h.abandon(ctx, lc)
		c := lc.conv
		c.State, c.Pending, c.UpdatedAt = StateOpen, nil, h.now()
		now := h.now()
		turn := &Turn{RunID: c.LastRunID, Kind: "evict", Outcome: TurnAbandoned, Started: now, Ended: now,
			Error: "host: the conversation idled past the eviction bound while waiting for a decision; the pause was abandoned; send a new message"}
		if _, err := h.store.Save(ctx, Update{Conversation: c, Turn: turn}); err != nil {
			h.metrics.failures.WithLabelValues("store").Inc()
			h.log.Error("host: recording an evicted pause", "session", lc.id, "err", err)
		}
	}
	h.mu.Lock()
	delete(h.live, lc.id)
	h.mu.Unlock()
	h.metrics.evicted.Inc()
	h.emit(event.TypeHostSessionEvicted, &event.HostSession{ToolSessionsClosed: n, Reason: string(toolsession.ReasonEvicted)}, lc.id, lc.owner)
}

// abandon gives up the conversation's pause: the engine closes what it
// held (if this process paused it) and refuses the checkpoint from now on.
func (h *Host) abandon(ctx context.Context, lc *liveConv) int {
	cp := lc.cp
	if cp == nil {
		b, err := h.store.LoadCheckpoint(ctx, lc.owner, lc.id)
		if err != nil {
			return 0
		}
		c, err := agent.ParseCheckpoint(b)
		if err != nil {
			return 0
		}
		cp = &c
	}
	n, _ := h.engine.AbandonCheckpoint(ctx, *cp) // already abandoned by CloseToolSessionsReason: nothing more to close
	lc.cp = nil
	return n
}

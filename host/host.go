package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/internal/undo"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// Defaults for a zero Options.
const (
	DefaultMaxTurns                     = 256
	DefaultMaxTurnsPerPrincipal         = 32
	DefaultMaxConversationsPerPrincipal = 100
	DefaultMaxRulesPerPrincipal         = 256
	DefaultIdleEvict                    = 15 * time.Minute
	DefaultEvictEvery                   = time.Minute
	DefaultTurnTimeout                  = 30 * time.Minute
	DefaultMaxBodyBytes                 = 1 << 20
	DefaultCutGrace                     = 5 * time.Second
	DefaultKeepAlive                    = 15 * time.Second
	DefaultCloseTimeout                 = 10 * time.Second
	DefaultCleanupRetry                 = time.Second
	DefaultCleanupRetryMax              = time.Minute
)

// Options configure a Host. A provider (Provider or Adapter), Store and
// Auth are required.
type Options struct {
	// Provider drives the agents: an instance of a provider registry
	// (provider.OpenRegistry, then Registry.Instance). The host opens one
	// provider session per conversation through it and never disposes
	// it: the registry's owner does, after Shutdown.
	Provider *provider.Instance
	// Adapter is the alternative to Provider: an adapter already behind
	// the contract (provider.Validate). Set exactly one of the two, or
	// neither and Agents.
	Adapter *provider.Validated
	// Agents are several agents offered side by side, each driven by its
	// own provider; a person picks one when opening a conversation
	// (POST /v1/sessions {"agent": NAME}) and GET /v1/agents lists them.
	// DefaultAgent names the one a conversation gets when its person
	// picks none (default: the first). A host of one agent sets Provider
	// or Adapter instead; that agent is named after its instance (or its
	// provider key).
	Agents       []Agent
	DefaultAgent string

	Store Store
	Auth  Authenticator
	// Leases, when set, makes this host one of several replicas sharing
	// the store (PostgreSQL): a conversation is served by the replica
	// holding its lease, requests landing elsewhere are forwarded there,
	// and a conversation whose holder stopped renewing is taken over
	// (host/sqlstore's Store.Leases). Nil (or OneReplica): this host is
	// the only one.
	Leases Leases

	// Bus is where the host's own events (agentry.host.*) go. Leave it nil
	// for a bus of the host's own that feeds only the EventSink. The host
	// never closes a bus it was given.
	Bus *event.Bus
	// EventSink streams turn events (SSE) and feeds the metrics. It must see
	// the provider's events: attach it where they go (for a native agent,
	// agent.Route{Sink: router, Filter: router.Filter()}), or send them
	// to Bus. Leave it nil for one of the host's own. The host attaches
	// the router to Bus, unless the caller gave both (then the caller
	// wires them).
	EventSink *EventSink

	// HostTools are lent to every provider session of a host of one agent
	// (with Agents, each Agent has its own) through a host binding
	// (provider.HostBinding): the provider sees them as tools it may call.
	// Each call is one call: its tool.Call has the conversation's identity
	// and honours the call scope only.
	HostTools []tool.Tool
	// SessionConfig is the configuration each session opening passes the
	// provider (default: {"identity":{tenant, principal, conversationId}},
	// which provider/native reads).
	SessionConfig func(owner tool.Identity, sessionID string) json.RawMessage
	// WorkingDirectory is each session's working directory, absolute and
	// clean (default "/": the native agent does not use one).
	WorkingDirectory func(owner tool.Identity, sessionID string) (string, error)
	// DropWorkspace, when set, is called once a conversation is closed
	// for good (DELETE), after its provider session closed: it removes
	// what WorkingDirectory made for it, so a workspace lasts as long as
	// its conversation. A failure is logged; the close stands. The
	// retention sweep calls it again for each conversation it removes
	// (what is already gone must not be an error).
	DropWorkspace func(owner tool.Identity, sessionID string) error

	// MaxTurns bounds the turns running at once across the host (default
	// 256); MaxTurnsPerPrincipal bounds them per principal (default 32).
	MaxTurns, MaxTurnsPerPrincipal int
	// MaxConversationsPerPrincipal bounds the conversations a principal has open, not
	// closed (default 100).
	MaxConversationsPerPrincipal int
	// IdleEvict is how long a conversation stays in memory untouched
	// before it is evicted: its provider session closes (reason evicted),
	// its transcript and binding stay in the store, and a paused turn is
	// resumed from the binding when it is answered (default 15m;
	// negative: never).
	IdleEvict time.Duration
	// EvictEvery is how often the host looks for idle conversations
	// (default 1m; negative: never in the background — call EvictIdle).
	EvictEvery time.Duration
	// TurnTimeout bounds one turn (default 30m): past it the turn is
	// interrupted through the contract and recorded timed_out, and its
	// client told so (504 turn_timed_out). A turn is not cancelled when its
	// client goes away: it finishes and is saved.
	TurnTimeout time.Duration
	// CloseTimeout bounds one provider session's close (default 10s).
	CloseTimeout time.Duration
	// CleanupRetry is the first wait before a failed close is retried;
	// each further retry waits twice as long, up to CleanupRetryMax
	// (defaults 1s and 1m).
	CleanupRetry, CleanupRetryMax time.Duration
	// MaxBodyBytes caps request bodies (default 1 MiB).
	MaxBodyBytes int64
	// WorkspaceMaxBytes bounds the bytes of the files one workspace
	// upload (PUT /v1/sessions/{id}/workspace) holds (default 1 GiB);
	// WorkspaceMaxEntries bounds its entries (default 100000). An upload
	// is not a request body of MaxBodyBytes.
	WorkspaceMaxBytes   int64
	WorkspaceMaxEntries int
	// KeepAlive is how often an SSE stream that has nothing to say sends a
	// comment line, so proxies and load balancers do not close a long
	// turn's stream as idle (default 15s; negative: never).
	KeepAlive time.Duration
	// CutGrace is how long Shutdown waits, after cutting the turns still
	// running at its deadline, for them to be recorded (default 5s). It is
	// also how long a turn that was interrupted (cut, cancelled or timed
	// out) is given to end before its provider's context is cancelled.
	CutGrace time.Duration
	// ForwardTimeout bounds how long a replica (Leases set) waits for the
	// replica holding a conversation once that one stops answering its
	// health probe, before it answers 503 replica_unavailable (default
	// DefaultForwardTimeout). A holder that answers is waited for however
	// long its turn takes.
	ForwardTimeout time.Duration
	// Now is the clock for idle eviction and timestamps (default time.Now).
	Now func() time.Time
	// Logger hears what clients are not told (store failures in detail).
	Logger *slog.Logger
	// NoConsole leaves the web console out: / is a 404 like any unknown path.
	NoConsole bool
	// Credentials keeps people's credentials (PUT /v1/credentials/{name}),
	// sealed with CredentialKeys, which it requires. Nil: the credentials
	// endpoints answer 501 credentials_unavailable.
	Credentials    CredentialStore
	CredentialKeys *Keyring
	// AgentCredentials are the person's credentials every conversation's
	// agent gets, each as a variable: a conversation is refused at open
	// (412 credential_missing) until the person has stored them all. It
	// serves a host of one agent; with Options.Agents, give each agent
	// its Credentials.
	AgentCredentials []AgentCredential
	// Cloner, when set, lets POST /v1/sessions clone a git repository
	// into the new conversation's workspace, each clone bounded by
	// CloneTimeout (default 10m): into its WorkingDirectory before its
	// session opens when its agent has one (an ACP agent), and otherwise
	// into the workspace of its provider session, opened for the clone
	// (provider.Workspacer: the native agent's interpreter's /work). Nil,
	// or an agent keeping no workspace: a clone is refused (501
	// clone_unsupported).
	Cloner       Cloner
	CloneTimeout time.Duration
	// MaxRulesPerPrincipal bounds the standing rules one person keeps
	// (default 256).
	MaxRulesPerPrincipal int
	// Prices turns each turn's tokens into its estimated cost, stored
	// with the turn's usage record (default price.Default(), the table
	// agentry ships).
	Prices *price.Table
	// Budgets are the caps and turn rates turns are held to (nil: none);
	// SetBudgets replaces them while serving. See ParseBudgets.
	Budgets *Budgets

	// BodyMinRate is the slowest a request body may arrive, in bytes a
	// second judged over each BodyRateWindow: a body that brings less in
	// a window is cut and answered 408 body_too_slow, whatever its size
	// (defaults 1024 and 10s; negative BodyMinRate: no floor). It needs
	// a server that sets no ReadTimeout of its own for long uploads.
	BodyMinRate    int64
	BodyRateWindow time.Duration
	// MaxRequestsPerPrincipal bounds one principal's requests in flight
	// at once (default 64; negative: none): past it, 429
	// too_many_requests with Retry-After.
	MaxRequestsPerPrincipal int
	// MaxCreatesPerMinute bounds how fast a principal opens
	// conversations: a token bucket of this many, refilled at this many
	// a minute on Now (default 60; negative: none); past it, 429
	// rate_limited with Retry-After.
	MaxCreatesPerMinute int
	// RetainClosed is how long a closed conversation is kept (default 30
	// days; negative: forever). Past it the sweep, every RetentionEvery
	// (default 1h; negative: never in the background, call
	// SweepClosed), removes it with its transcript, turn log and the
	// rules scoped to it; its usage records stay (they are what was
	// billed), and so do rules that hold everywhere.
	RetainClosed, RetentionEvery time.Duration
}

// Host serves conversations over HTTP. It is an http.Handler; the caller
// owns the listener, and calls Shutdown on the way out.
type Host struct {
	opt      Options
	agents   []*hostedAgent // in Options order
	byName   map[string]*hostedAgent
	def      *hostedAgent // the default agent
	key      string       // the default agent's provider key
	store    Store
	auth     Authenticator
	router   *EventSink
	bus      *event.Bus
	ownBus   bool
	metrics  *metrics
	log      *slog.Logger
	now      func() time.Time
	handler  http.Handler
	cleanups *cleanups
	rep      *replicas // nil: the only replica
	prices   *price.Table
	creds    *credentials // nil: no credentials kept
	budgets  atomic.Pointer[Budgets]
	rates    rateWindows
	totals   usageTotals

	mu       sync.Mutex
	live     map[string]*liveConv
	draining bool
	drained  chan struct{} // closed by Drain: long streams end
	feed     *feed         // each person's notices (GET /v1/events)
	inflight int
	idle     chan struct{} // closed when inflight drops to 0 while draining
	running  map[*turnCtl]struct{}
	turns    int
	byOwner  map[tool.Identity]int
	createMu sync.Mutex     // creates run one at a time, so the open-session bound holds
	requests *inflight      // each principal's requests in flight
	creates  *createBuckets // each principal's rate of opening conversations

	stopJanitor chan struct{}
	janitorDone chan struct{}
	retain      *retention // nil: no background retention sweep

	shutOnce sync.Once
	shutDone chan struct{}
	shutErr  error
}

// liveConv is a conversation held in memory. Fields other than the ones
// noted are guarded by busy: only the request that set busy touches them.
type liveConv struct {
	id    string
	owner tool.Identity
	// guarded by Host.mu
	busy     bool
	lastUsed time.Time
	asking   map[string]*asking // questions the provider asked, waiting for the person
	turn     *turnCtl           // the turn holding busy, when a turn does
	// guarded by busy
	conv   Conversation
	budget *turnBudget                // the running turn's share of its caps; nil: none bound it
	sess   *provider.ValidatedSession // nil until a turn opens it
}

// turnCtl is how a turn is stopped from outside its request: cut by the
// shutdown drain bound (cancel), or cancelled by a person (stop). Both
// are set before the turn takes its conversation and never change; done
// is closed once the turn is saved and its conversation let go.
type turnCtl struct {
	cancel context.CancelCauseFunc
	stop   context.CancelCauseFunc
	runID  string // guarded by Host.mu: "" until the turn has one
	done   chan struct{}
}

// errCut is the cause of a turn cut by the shutdown drain bound.
var errCut = errors.New("host: the turn was cut by the shutdown drain bound")

// New builds a host. It starts one goroutine (the idle sweep) unless
// EvictEvery is negative; Shutdown stops it.
//
// It is a sequence of small steps. The first ones only check and complete
// the options, so a refusal changes nothing; the ones after them acquire
// (the host's own bus, the router's ownership, the replicas' heartbeat)
// and share one cleanup stack, so a failure part way gives back what the
// steps before it took. Attaching the router to the bus, which cannot be
// taken back, is the last step that can fail.
func New(opt Options) (_ *Host, err error) {
	agents, def, unnamed, err := agentsOf(opt)
	if err != nil {
		return nil, err
	}
	if opt, err = withDefaults(opt); err != nil {
		return nil, err
	}
	var stack undo.Stack
	defer stack.OnError(&err)
	h := &Host{
		opt:      opt,
		store:    opt.Store,
		auth:     opt.Auth,
		log:      opt.Logger,
		now:      opt.Now,
		live:     make(map[string]*liveConv),
		running:  make(map[*turnCtl]struct{}),
		byOwner:  make(map[tool.Identity]int),
		shutDone: make(chan struct{}),
		drained:  make(chan struct{}),
		feed:     newFeed(opt.Now()),
		prices:   opt.Prices,
		requests: &inflight{max: opt.MaxRequestsPerPrincipal, n: make(map[tool.Identity]int)},
		creates:  &createBuckets{perMinute: opt.MaxCreatesPerMinute, now: opt.Now, b: make(map[tool.Identity]bucket)},
	}
	if h.prices == nil {
		h.prices = price.Default()
	}
	if h.creds, err = newCredentials(opt); err != nil {
		return nil, err
	}
	h.budgets.Store(opt.Budgets)
	if err := h.takeBusAndEventSink(&stack); err != nil {
		return nil, err
	}
	if err := h.hostAgents(agents, def, unnamed); err != nil {
		return nil, err
	}
	h.cleanups = newCleanups(h)
	h.metrics = newMetrics(func() float64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return float64(len(h.live))
	}, h.cleanups.pending)
	h.router.metrics.Store(h.metrics)
	h.handler = h.routes()
	if err := h.joinReplicas(&stack); err != nil {
		return nil, err
	}
	if err := h.attachEventSink(); err != nil {
		return nil, err
	}
	h.startJanitor()
	h.startRetention()
	stack.Keep()
	return h, nil
}

// withDefaults refuses negative bounds and fills in every zero option with
// its default.
func withDefaults(opt Options) (Options, error) {
	if opt.MaxTurns < 0 || opt.MaxTurnsPerPrincipal < 0 || opt.MaxConversationsPerPrincipal < 0 || opt.MaxRulesPerPrincipal < 0 || opt.MaxBodyBytes < 0 || opt.TurnTimeout < 0 ||
		opt.CutGrace < 0 || opt.CloseTimeout < 0 || opt.CleanupRetry < 0 || opt.CleanupRetryMax < 0 {
		return opt, errors.New("host: bounds in Options must not be negative; use 0 for the default")
	}
	orDefault(&opt.MaxTurns, DefaultMaxTurns)
	orDefault(&opt.MaxTurnsPerPrincipal, DefaultMaxTurnsPerPrincipal)
	orDefault(&opt.MaxConversationsPerPrincipal, DefaultMaxConversationsPerPrincipal)
	orDefault(&opt.MaxRulesPerPrincipal, DefaultMaxRulesPerPrincipal)
	orDefault(&opt.IdleEvict, DefaultIdleEvict)
	orDefault(&opt.EvictEvery, DefaultEvictEvery)
	orDefault(&opt.TurnTimeout, DefaultTurnTimeout)
	orDefault(&opt.CloseTimeout, DefaultCloseTimeout)
	orDefault(&opt.CleanupRetry, DefaultCleanupRetry)
	orDefault(&opt.CleanupRetryMax, DefaultCleanupRetryMax)
	opt.CleanupRetryMax = max(opt.CleanupRetryMax, opt.CleanupRetry)
	orDefault(&opt.MaxBodyBytes, DefaultMaxBodyBytes)
	orDefault(&opt.WorkspaceMaxBytes, DefaultWorkspaceMaxBytes)
	orDefault(&opt.WorkspaceMaxEntries, DefaultWorkspaceMaxEntries)
	orDefault(&opt.CutGrace, DefaultCutGrace)
	orDefault(&opt.KeepAlive, DefaultKeepAlive)
	orDefault(&opt.CloneTimeout, DefaultCloneTimeout)
	orDefault(&opt.BodyMinRate, DefaultBodyMinRate)
	orDefault(&opt.BodyRateWindow, DefaultBodyRateWindow)
	orDefault(&opt.MaxRequestsPerPrincipal, DefaultMaxRequestsPerPrincipal)
	orDefault(&opt.MaxCreatesPerMinute, DefaultMaxCreatesPerMinute)
	orDefault(&opt.RetainClosed, DefaultRetainClosed)
	orDefault(&opt.RetentionEvery, DefaultRetentionEvery)
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.SessionConfig == nil {
		opt.SessionConfig = identityConfig
	}
	return opt, nil
}

// orDefault sets *v to def when it is zero.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// takeBusAndEventSink gives the host its bus (the caller's, or one of its
// own) and its router (the caller's, or a new one), whose ownership it
// takes: one router serves one host. Each pushes its undo on stack.
func (h *Host) takeBusAndEventSink(stack *undo.Stack) error {
	h.bus = h.opt.Bus
	if h.bus == nil {
		bus := event.NewBus(event.BusOptions{Now: h.opt.Now})
		h.bus, h.ownBus = bus, true
		stack.PushFunc(func() { _ = bus.Close(context.Background()) })
	}
	r := h.opt.EventSink
	if r == nil {
		r = NewEventSink()
	}
	if r.owned.Swap(true) {
		return errors.New("host: this EventSink already serves another host; make one EventSink per host")
	}
	stack.PushFunc(func() { r.owned.Store(false) })
	h.router = r
	return nil
}

// attachEventSink has the router hear the host's bus, unless the caller gave
// both (then the caller wires them).
func (h *Host) attachEventSink() error {
	if h.opt.EventSink != nil && !h.ownBus {
		return nil
	}
	if err := h.bus.Add(h.router, h.router.Filter()); err != nil {
		return fmt.Errorf("host: attaching the router: %w", err)
	}
	return nil
}

// joinReplicas makes the host one of several replicas when Options.Leases
// names more than this one: the leases' heartbeat starts, and stops
// again if a later step fails.
func (h *Host) joinReplicas(stack *undo.Stack) error {
	l := h.opt.Leases
	if _, one := l.(OneReplica); l == nil || one {
		return nil
	}
	rep, err := newReplicas(h, l)
	if err != nil {
		return err
	}
	h.rep = rep
	stack.PushFunc(func() { _ = rep.close(context.Background()) })
	return nil
}

// startJanitor starts the idle sweep, unless eviction is off or the sweep
// is left to the caller (EvictEvery negative).
func (h *Host) startJanitor() {
	if h.opt.EvictEvery <= 0 || h.opt.IdleEvict <= 0 {
		return
	}
	h.stopJanitor = make(chan struct{})
	h.janitorDone = make(chan struct{})
	go h.janitor(h.opt.EvictEvery)
}

// identityConfig is the default session configuration: who the session
// acts for, as provider/native reads it.
func identityConfig(owner tool.Identity, sessionID string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"identity": tool.Identity{Tenant: owner.Tenant, Principal: owner.Principal, ConversationID: sessionID}})
	return b
}

// ServeHTTP serves the API.
// Every request body is held to the rate floor (Options.BodyMinRate).
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer h.floorBody(w, r)()
	h.handler.ServeHTTP(w, r)
}

// ProviderKey is the key of the provider the host drives (its default
// agent's, when it offers several).
func (h *Host) ProviderKey() string { return h.key }

// newID returns prefix and 32 hex digits (128 random bits): the ids the
// host makes (conversations, turns, rules, forwards).
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b[:])
}

// validID accepts only ids newID(prefix) could have made, so no other
// string reaches the store.
func validID(id, prefix string) bool {
	if len(id) != len(prefix)+32 || id[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// newSessionID returns "ses_" and 32 hex digits.
func newSessionID() string { return newID("ses_") }

// newRunID returns "run-" and 32 hex digits: the id of one turn, given to
// the provider as its turn id.
func newRunID() string { return newID("run-") }

func validSessionID(id string) bool { return validID(id, "ses_") }

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
	if !h.draining {
		close(h.drained)
	}
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
func (h *Host) emit(typ event.Type, payload any, id string, o tool.Identity) {
	h.bus.Export(event.Event{Type: typ, Payload: payload, Meta: event.Meta{SessionID: id, Tenant: o.Tenant, Principal: o.Principal}})
}

// Shutdown stops the host: new requests get 503 and /readyz fails at
// once; requests in flight may finish until ctx ends; turns still running
// then are interrupted and cut (recorded as failed, outcome cut) and
// given CutGrace to be recorded; then every provider session closes
// (reason shutdown), failed cleanups are retried once more, and the store
// closes. It is idempotent. It installs no signal handler, and it leaves
// the provider's registry to its owner: dispose it after Shutdown.
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
	h.stopRetention()
	if h.stopJanitor != nil {
		close(h.stopJanitor)
		<-h.janitorDone
	}
	// Every live session closes; nothing is left for the provider to hold.
	h.mu.Lock()
	var open []*liveConv
	for _, lc := range h.live {
		if !lc.busy {
			lc.busy = true
			open = append(open, lc)
		}
	}
	h.live = map[string]*liveConv{}
	h.mu.Unlock()
	cctx := context.WithoutCancel(ctx)
	for _, lc := range open {
		h.closeSession(cctx, lc, provider.CloseShutdown, "shutdown")
	}
	if n := h.cleanups.final(cctx); n > 0 {
		errs = append(errs, fmt.Errorf("host: shutdown: %d provider session cleanups still fail after their last retry; the events and turn logs name them", n))
	}
	if h.rep != nil {
		// Only now, with every session here closed, may another replica
		// open them.
		if err := h.rep.close(cctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range h.agents {
		a.lent.close(cctx)
	}
	if h.ownBus {
		_ = h.bus.Close(cctx)
	} else {
		_ = h.bus.Flush(cctx)
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

// EvictIdle evicts the conversations untouched for Options.IdleEvict:
// their provider sessions close (reason evicted) and they leave memory;
// their transcripts, bindings and pending requests stay in the store, and
// the next request resumes them from the binding. It returns how many it
// evicted. The background sweep calls it; so can a caller.
func (h *Host) EvictIdle(ctx context.Context) int {
	if h.opt.IdleEvict < 0 {
		return 0
	}
	cutoff := h.now().Add(-h.opt.IdleEvict)
	var picked []*liveConv
	h.mu.Lock()
	for _, lc := range h.live {
		if !lc.busy && len(lc.asking) == 0 && !lc.lastUsed.After(cutoff) {
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
	closed := h.closeSession(ctx, lc, provider.CloseEvicted, "evict")
	h.mu.Lock()
	delete(h.live, lc.id)
	h.mu.Unlock()
	h.releaseLease(ctx, lc.id)
	h.metrics.evicted.Inc()
	n := 0
	if closed {
		n = 1
	}
	h.emit(TypeConversationEvicted, &ConversationEvent{ToolSessionsClosed: n, Reason: string(toolsession.ReasonEvicted)}, lc.id, lc.owner)
}

// closeSession closes the conversation's provider session, if one is
// open. A cleanup error is recorded and handed to the retry loop; the
// session is forgotten either way (the provider has quarantined it). It
// reports whether a session was open.
func (h *Host) closeSession(ctx context.Context, lc *liveConv, reason provider.CloseReason, kind string) bool {
	s := lc.sess
	if s == nil {
		return false
	}
	lc.sess = nil
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opt.CloseTimeout)
	defer cancel()
	if err := s.Close(cctx, reason); err != nil {
		h.cleanups.add(ctx, lc, kind, err)
	}
	return true
}

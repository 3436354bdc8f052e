package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// Defaults for a zero Options.
const (
	DefaultMaxIterations    = 16
	DefaultTeardownTimeout  = toolsession.DefaultTimeout
	DefaultMaxParallelTools = 8
)

// Options configure an Agent. Model is required; every other zero value
// takes its default.
type Options struct {
	// ID names the agent in event meta and in checkpoints; a checkpoint is
	// resumed only by an agent with the same ID and tool names.
	ID     string
	Model  llm.Model
	System string
	Tools  []tool.Tool
	// Sinks receive the agent's events at the standard tier (everything but
	// streamed text and whole messages). Shutdown flushes and closes them.
	Sinks []event.Sink
	// MaxIterations bounds the model calls of one run, across pauses
	// (default 16).
	MaxIterations int
	// TeardownTimeout bounds each tool-session cleanup, and each step of
	// Shutdown after the drain (default 5s).
	TeardownTimeout time.Duration

	// Routes are sinks with a filter of their own (a tier, types,
	// sampling); Shutdown flushes and closes them too.
	Routes []Route
	// OnError hears about sinks that panicked or failed to flush or close
	// (default: log with slog).
	OnError func(error)
	// SessionIdle is how long an untouched tool session lives before the
	// lazy idle sweep closes it (default 15m; negative turns the sweep off).
	SessionIdle time.Duration
	// MaxLiveSessions bounds live tool sessions; past it the coldest idle
	// one is evicted (default 64). A session with a call in flight is never
	// evicted.
	MaxLiveSessions int
	// SessionWait bounds how long a tool call that needs a new session
	// waits for room when every live one has a call in flight (default
	// toolsession.DefaultWait, 10s; negative refuses at once). Then the run
	// ends with an error matching toolsession.ErrCapacity.
	SessionWait time.Duration
	// MaxParallelTools bounds how many tool calls of one model response run
	// at once (default 8).
	MaxParallelTools int
	// Now is the clock for tool-session idle expiry and event times
	// (default time.Now).
	Now func() time.Time
	// CheckpointKey, when set, signs every checkpoint (HMAC-SHA256) and
	// makes Resume and AbandonCheckpoint refuse one whose signature is
	// missing or wrong. Give every process that resumes the same key.
	CheckpointKey []byte
}

// Route is a sink behind its own filter.
type Route struct {
	Sink   event.Sink
	Filter event.Filter
}

// Agent runs turns. It is safe for concurrent use.
type Agent struct {
	id        string
	model     llm.Model
	modelName string
	system    string
	tools     map[string]*toolEntry
	defs      []llm.ToolDef
	toolNames []string // sorted
	maxIter   int
	maxPar    int
	teardown  time.Duration
	idle      time.Duration
	maxLive   int
	wait      time.Duration
	now       func() time.Time
	cpKey     []byte
	bus       *event.Bus

	tierOnce sync.Once
	tier     atomic.Pointer[toolsession.Tier]

	validators validatorCache

	mu       sync.Mutex
	closing  bool
	inflight int
	drained  chan struct{} // closed when inflight reaches 0 after closing
	runs     map[*run]struct{}
	busy     map[string]struct{}  // session ids in use
	paused   map[string]pausedRun // by checkpoint id
	spent    map[string]error     // checkpoint id → why it cannot be resumed again
	spentLog []string             // insertion order, to bound spent
	fired    bool                 // FireShutdown has run

	shutOnce sync.Once
	shutDone chan struct{}
	shutErr  error
}

// maxSpent bounds how many resumed or abandoned checkpoint ids an agent
// remembers; older ones are forgotten (the refusal is "while the agent can
// know it").
const maxSpent = 16384

type pausedRun struct {
	runID, sessionID string
	// asked are door call ids of calls paused mid-call: their call-scoped
	// sessions are open and close when the pause ends.
	asked []string
}

type toolEntry struct {
	tool  tool.Tool
	spec  tool.Spec
	valid *tool.Validator
}

// New builds an agent. It refuses a nil model, a nil or unnamed tool, two
// tools of one name, and a tool whose input schema does not compile.
func New(opt Options) (*Agent, error) {
	if opt.Model == nil {
		return nil, errors.New("agent: Options.Model is nil; pass an llm.Model (llm/scripted works offline)")
	}
	if opt.MaxIterations < 0 {
		return nil, fmt.Errorf("agent: Options.MaxIterations is %d; use 0 for the default (%d) or a positive bound", opt.MaxIterations, DefaultMaxIterations)
	}
	if opt.TeardownTimeout < 0 || opt.MaxParallelTools < 0 || opt.MaxLiveSessions < 0 {
		return nil, errors.New("agent: TeardownTimeout, MaxParallelTools and MaxLiveSessions must not be negative; use 0 for the default")
	}
	a := &Agent{
		id:        opt.ID,
		model:     opt.Model,
		modelName: llm.NameOf(opt.Model),
		system:    opt.System,
		tools:     make(map[string]*toolEntry, len(opt.Tools)),
		maxIter:   opt.MaxIterations,
		maxPar:    opt.MaxParallelTools,
		teardown:  opt.TeardownTimeout,
		idle:      opt.SessionIdle,
		maxLive:   opt.MaxLiveSessions,
		wait:      opt.SessionWait,
		now:       opt.Now,
		cpKey:     slices.Clone(opt.CheckpointKey),
		runs:      make(map[*run]struct{}),
		busy:      make(map[string]struct{}),
		paused:    make(map[string]pausedRun),
		spent:     make(map[string]error),
		shutDone:  make(chan struct{}),
	}
	if a.maxIter == 0 {
		a.maxIter = DefaultMaxIterations
	}
	if a.maxPar == 0 {
		a.maxPar = DefaultMaxParallelTools
	}
	if a.teardown == 0 {
		a.teardown = DefaultTeardownTimeout
	}
	if a.now == nil {
		a.now = time.Now
	}
	for _, t := range opt.Tools {
		e, err := newEntry(t)
		if err != nil {
			return nil, err
		}
		if _, dup := a.tools[e.spec.Name]; dup {
			return nil, fmt.Errorf("%w: %q appears twice in Options.Tools; rename one", ErrToolConflict, e.spec.Name)
		}
		a.tools[e.spec.Name] = e
		a.defs = append(a.defs, llm.ToolDef{Name: e.spec.Name, Description: e.spec.Description, InputSchema: e.spec.InputSchema})
		a.toolNames = append(a.toolNames, e.spec.Name)
	}
	slices.Sort(a.toolNames)

	a.bus = event.NewBus(event.BusOptions{OnError: opt.OnError, Now: opt.Now})
	for _, s := range opt.Sinks {
		if err := a.bus.Add(s, event.Filter{}); err != nil {
			return nil, fmt.Errorf("agent: Options.Sinks: %w", err)
		}
	}
	for _, r := range opt.Routes {
		if err := a.bus.Add(r.Sink, r.Filter); err != nil {
			return nil, fmt.Errorf("agent: Options.Routes: %w", err)
		}
	}
	return a, nil
}

func newEntry(t tool.Tool) (*toolEntry, error) {
	if t == nil {
		return nil, errors.New("agent: a tool is nil; remove it from the list")
	}
	spec := t.Spec()
	if spec.Name == "" {
		return nil, fmt.Errorf("agent: a tool of type %T has no name; set Spec().Name", t)
	}
	v, err := tool.NewValidator(spec.Name, spec.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return &toolEntry{tool: t, spec: spec, valid: v}, nil
}

// ID returns the agent's ID.
func (a *Agent) ID() string { return a.id }

// ToolNames returns the names of the agent's own tools, sorted.
func (a *Agent) ToolNames() []string { return slices.Clone(a.toolNames) }

// Bus returns the agent's event bus, so a caller can attach more sinks.
// Sinks attached here are flushed and closed by Shutdown too.
func (a *Agent) Bus() *event.Bus { return a.bus }

// LiveToolSessions returns how many tool sessions are registered and not
// yet closed (0 when no tool ever registered one).
func (a *Agent) LiveToolSessions() int {
	if t := a.tier.Load(); t != nil {
		return t.Live()
	}
	return 0
}

// SweepIdleToolSessions closes, in the background, tool sessions untouched
// for Options.SessionIdle. Registering a session sweeps too; the agent
// installs no timer, so a host that wants a sweep between turns calls this.
func (a *Agent) SweepIdleToolSessions() {
	if t := a.tier.Load(); t != nil {
		t.SweepIdle()
	}
}

// SettleToolSessions waits until the background closes (idle, evicted)
// have settled, or ctx ends.
func (a *Agent) SettleToolSessions(ctx context.Context) error {
	if t := a.tier.Load(); t != nil {
		return t.Settled(ctx)
	}
	return nil
}

// tierFor builds the teardown tier on the first registration. Everything
// else only loads it, so an agent whose tools never hold a session builds
// none.
func (a *Agent) tierFor() *toolsession.Tier {
	if t := a.tier.Load(); t != nil {
		return t
	}
	a.tierOnce.Do(func() {
		a.tier.Store(toolsession.NewTier(toolsession.Config{
			Timeout: a.teardown,
			Idle:    a.idle,
			MaxLive: a.maxLive,
			Wait:    a.wait,
			Now:     a.now,
			Report:  a.reportClose,
		}))
	})
	return a.tier.Load()
}

// reportClose turns a teardown report into its event. The meta is the
// registration's origin, never whatever run is current.
func (a *Agent) reportClose(rep toolsession.Report) {
	e := tool.CloseEvent(rep)
	e.Meta.AgentID = a.id
	a.bus.Export(e)
}

// fireCall, fireRun and fireSession are no-ops until a tier exists.
func (a *Agent) fireCall(ctx context.Context, doorID string) int {
	if t := a.tier.Load(); t != nil {
		return t.FireCall(context.WithoutCancel(ctx), doorID)
	}
	return 0
}

func (a *Agent) fireRun(ctx context.Context, runID string) int {
	if t := a.tier.Load(); t != nil {
		return t.FireRun(context.WithoutCancel(ctx), runID)
	}
	return 0
}

func (a *Agent) emit(typ event.Type, payload any, meta event.Meta) {
	if a.wants(typ) {
		a.bus.Export(event.Event{Type: typ, Payload: payload, Meta: meta})
	}
}

// validatorCache holds validators for per-run tools (Input.Tools), keyed
// by name and schema, so a host binding's tools are compiled once.
type validatorCache struct {
	mu sync.Mutex
	m  map[string]*tool.Validator
}

const maxCachedValidators = 256

func (c *validatorCache) get(spec tool.Spec) (*tool.Validator, error) {
	k := spec.Name + "\x00" + string(spec.InputSchema)
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := tool.NewValidator(spec.Name, spec.InputSchema)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedValidators {
		c.m = make(map[string]*tool.Validator)
	}
	c.m[k] = v
	c.mu.Unlock()
	return v, nil
}

// extraEntries checks per-run tools: named, no clash with the agent's
// tools or each other, schemas that compile.
func (a *Agent) extraEntries(ts []tool.Tool) ([]*toolEntry, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	out := make([]*toolEntry, 0, len(ts))
	for _, t := range ts {
		if t == nil {
			return nil, errors.New("agent: Input.Tools holds a nil tool; remove it")
		}
		spec := t.Spec()
		if spec.Name == "" {
			return nil, fmt.Errorf("agent: a tool of type %T in Input.Tools has no name; set Spec().Name", t)
		}
		if _, clash := a.tools[spec.Name]; clash {
			return nil, fmt.Errorf("%w: %q in Input.Tools is also one of the agent's tools; rename one", ErrToolConflict, spec.Name)
		}
		for _, e := range out {
			if e.spec.Name == spec.Name {
				return nil, fmt.Errorf("%w: %q appears twice in Input.Tools; rename one", ErrToolConflict, spec.Name)
			}
		}
		v, err := a.validators.get(spec)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		out = append(out, &toolEntry{tool: t, spec: spec, valid: v})
	}
	return out, nil
}

func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b[:])
}

// emitting reports whether any sink is attached, so the loop can skip
// building payloads nobody reads. It is read per event, so sinks added
// later through Bus see everything from then on.
// wants reports whether a sink would receive an event of type t, so a
// payload nobody reads is never built.
func (a *Agent) wants(t event.Type) bool { return a.bus.Enabled(t) }

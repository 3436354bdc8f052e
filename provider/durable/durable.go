package durable

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// DefaultKey is the provider key of a driver built without one.
const DefaultKey = "agentry-durable"

// DefaultTaskQueue is the shared task queue of turn workflows, model calls
// and conversation writes.
const DefaultTaskQueue = "agentry-turns"

// Config configures a [Driver]. Client, Replica, Model and Store are
// required.
type Config struct {
	// Key is the provider key (default "agentry-durable").
	Key string
	// Client is a connected Temporal client. The driver does not close it.
	Client client.Client
	// TaskQueue is the shared task queue (default "agentry-turns"); every
	// replica polls it.
	TaskQueue string
	// Replica names this replica. Its tool calls run on the task queue
	// TaskQueue + "@" + Replica, so keep it the same across restarts: a
	// restarted replica continues the turns it was running.
	Replica string
	// Model is the model every turn calls.
	Model llm.Model
	// System is the system prompt.
	System string
	// Tools are the agent's tools. A tool whose Spec().CheckIn is set
	// waits for a person's decision before every call.
	Tools []tool.Tool
	// Store keeps the conversations; every replica must share it (the
	// host's SQL store: native.HostStore(st)).
	Store native.Store
	// MaxIterations bounds the model calls of one turn (default 16).
	MaxIterations int
	// Heartbeat is how long a tool call may go without its worker's
	// heartbeat before it is reported lost (default 5s).
	Heartbeat time.Duration
	// ToolTimeout bounds one tool call (default 10m).
	ToolTimeout time.Duration
	// ToolStart bounds how long a tool call waits for its replica to take
	// it (default 1m): a replica down longer loses the call.
	ToolStart time.Duration
	// ModelTimeout bounds one model attempt (default 5m); ModelAttempts
	// is how many attempts a model call gets (default 5).
	ModelTimeout  time.Duration
	ModelAttempts int32
	// TeardownTimeout bounds each tool-session cleanup (default 5s).
	TeardownTimeout time.Duration
	// MaxLiveSessions bounds the live tool sessions of this replica
	// (default 64).
	MaxLiveSessions int
	// PinnedStart is how long a model call waits for the replica holding
	// the session to take it (default 5s): there its text reaches the
	// caller as it comes; past it the call goes to any replica. The
	// turn's marks (its end, a pause) wait as long, then are skipped.
	PinnedStart time.Duration
	// Events, if set, hears the agent events of what this replica does
	// for durable turns (agentry.agent.*, agentry.llm.*, agentry.tool.*,
	// agentry.tools.*, agentry.pause.*): each from the replica that ran
	// the activity, never a key or a secret. Give it a bus (event.Bus
	// Export) and let its filters choose.
	Events func(event.Event)
}

// Driver materialises durable instances. One process runs one instance:
// it owns the replica's task queue.
type Driver struct{ cfg Config }

var _ provider.Driver = (*Driver)(nil)

// NewDriver checks cfg, fills its defaults and returns the driver.
func NewDriver(cfg Config) (*Driver, error) {
	if cfg.Key == "" {
		cfg.Key = DefaultKey
	}
	if err := provider.CheckProviderKey(cfg.Key); err != nil {
		return nil, fmt.Errorf("durable: Config.Key is not a provider key: %w", err)
	}
	switch {
	case cfg.Client == nil:
		return nil, errors.New("durable: Config.Client is nil; pass a client from client.Dial")
	case cfg.Replica == "":
		return nil, errors.New("durable: Config.Replica is empty; name this replica (the same name across its restarts)")
	case cfg.Model == nil:
		return nil, errors.New("durable: Config.Model is nil; pass the model turns call")
	case cfg.Store == nil:
		return nil, errors.New("durable: Config.Store is nil; pass the store every replica shares (native.HostStore on the host's store)")
	}
	if cfg.TaskQueue == "" {
		cfg.TaskQueue = DefaultTaskQueue
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Heartbeat, 5*time.Second)
	def(&cfg.ToolTimeout, 10*time.Minute)
	def(&cfg.ToolStart, time.Minute)
	def(&cfg.ModelTimeout, 5*time.Minute)
	def(&cfg.TeardownTimeout, 5*time.Second)
	def(&cfg.PinnedStart, 5*time.Second)
	if cfg.MaxIterations <= 0 {
		cfg.MaxIterations = 16
	}
	if cfg.ModelAttempts <= 0 {
		cfg.ModelAttempts = 5
	}
	return &Driver{cfg: cfg}, nil
}

// ProviderKey returns the driver's provider key.
func (d *Driver) ProviderKey() string { return d.cfg.Key }

// SupportsMultipleInstances is false: an instance owns the replica's task
// queue.
func (d *Driver) SupportsMultipleInstances() bool { return false }

// ToolQueue is the task queue this replica's tool calls run on.
func (d *Driver) ToolQueue() string { return d.cfg.TaskQueue + "@" + d.cfg.Replica }

// Capabilities is what a durable instance declares: create and resume (a
// paused turn comes back waiting), interrupt, approval requests (a
// check-in pause), host bindings with instructions placed as context (as
// native sessions take them). No branch, steer or authentication.
func Capabilities(key string) provider.Capabilities {
	return provider.Capabilities{
		ProviderKey: key,
		Sessions:    provider.SessionCapabilities{Resume: true, ResumePending: true},
		Turns:       provider.TurnCapabilities{Interrupt: true},
		Requests:    provider.RequestCapabilities{Approval: true},
		HostBinding: provider.HostBindingSupport{Supported: true,
			InstructionPlacements: []provider.Placement{provider.PlacementContext}},
	}
}

// Materialize starts the instance's workers: one on the shared task queue
// (turn workflows, model calls, conversation writes), one on the
// replica's (tool calls).
func (d *Driver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	cfg := d.cfg
	in := &instance{cfg: cfg, toolQueue: d.ToolQueue(), tools: map[string]boundTool{}, sessions: map[string]*session{},
		watches: map[string]*watch{}}
	in.beat = cfg.Heartbeat / 4
	in.tier = toolsession.NewTier(toolsession.Config{Timeout: cfg.TeardownTimeout, MaxLive: cfg.MaxLiveSessions, Report: in.reportClose})
	for _, t := range cfg.Tools {
		spec := t.Spec()
		if _, dup := in.tools[spec.Name]; dup {
			return provider.Materialized{}, fmt.Errorf("durable: two tools are named %s; rename one", spec.Name)
		}
		v, err := tool.NewValidator(spec.Name, spec.InputSchema)
		if err != nil {
			return provider.Materialized{}, fmt.Errorf("durable: tool %s: %w", spec.Name, err)
		}
		in.tools[spec.Name] = boundTool{Tool: t, valid: v}
		in.defs = append(in.defs, llm.ToolDef{Name: spec.Name, Description: spec.Description, InputSchema: spec.InputSchema})
		if spec.CheckIn {
			in.checkIns = append(in.checkIns, spec.Name)
		}
	}
	acts := activities{in}
	shared := worker.New(cfg.Client, cfg.TaskQueue, worker.Options{})
	shared.RegisterWorkflowWithOptions(TurnWorkflow, workflow.RegisterOptions{Name: WorkflowName})
	shared.RegisterActivityWithOptions(acts.model, activity.RegisterOptions{Name: modelActivity})
	shared.RegisterActivityWithOptions(acts.record, activity.RegisterOptions{Name: recordActivity})
	pinned := worker.New(cfg.Client, in.toolQueue, worker.Options{})
	pinned.RegisterActivityWithOptions(acts.tool, activity.RegisterOptions{Name: toolActivity})
	pinned.RegisterActivityWithOptions(acts.model, activity.RegisterOptions{Name: modelActivity})
	pinned.RegisterActivityWithOptions(acts.mark, activity.RegisterOptions{Name: markActivity})
	pinned.RegisterActivityWithOptions(acts.limit, activity.RegisterOptions{Name: limitActivity})
	if err := shared.Start(); err != nil {
		return provider.Materialized{}, fmt.Errorf("durable: starting the worker on task queue %s: %w", cfg.TaskQueue, err)
	}
	if err := pinned.Start(); err != nil {
		shared.Stop()
		return provider.Materialized{}, fmt.Errorf("durable: starting the worker on task queue %s: %w", in.toolQueue, err)
	}
	in.workers = []worker.Worker{pinned, shared}
	return provider.Materialized{
		Capabilities: Capabilities(cfg.Key),
		Adapter:      adapter{in},
		Readiness:    in.readiness,
		Dispose:      in.dispose,
	}, nil
}

type boundTool struct {
	tool.Tool
	valid *tool.Validator
}

// instance is one replica's workers and open sessions.
type instance struct {
	cfg       Config
	toolQueue string
	tools     map[string]boundTool
	defs      []llm.ToolDef
	checkIns  []string
	beat      time.Duration
	tier      *toolsession.Tier
	phrases   native.Phrasebook

	mu       sync.Mutex
	workers  []worker.Worker
	sessions map[string]*session
	watches  map[string]*watch // by workflow id: the turns followed here
}

func (in *instance) readiness(ctx context.Context) (provider.Readiness, error) {
	if _, err := in.cfg.Client.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return provider.Unavailable, nil
	}
	return provider.Ready, nil
}

// dispose stops the workers (a tool call in flight is cancelled; its turn
// reports it lost unless this replica comes back in time) and closes
// every tool session.
func (in *instance) dispose(ctx context.Context) error {
	in.mu.Lock()
	ws := in.workers
	in.workers = nil
	in.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
	in.tier.FireShutdown(ctx)
	return in.tier.Settled(ctx)
}

type adapter struct{ in *instance }

var (
	_ provider.Adapter = adapter{}
	_ provider.Resumer = adapter{}
)

func (a adapter) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	cfg, err := native.ParseSessionConfig(req.Configuration)
	if err != nil {
		return nil, err
	}
	b := newBinding()
	s, err := a.in.open(req.SessionID, b, cfg.Identity, req.HostTools, nil)
	if err != nil {
		return nil, err
	}
	rec := native.Record{}
	rec.Conversation.Version = 1
	rec.Conversation.Identity = cfg.Identity
	if err := a.in.cfg.Store.Save(ctx, b, rec); err != nil {
		a.in.forget(s)
		return nil, fmt.Errorf("durable: saving the new conversation: %w", err)
	}
	req.OnBinding(b)
	return s, nil
}

func (a adapter) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	cfg, err := native.ParseSessionConfig(req.Configuration)
	if err != nil {
		return nil, err
	}
	rec, err := a.in.cfg.Store.Load(ctx, req.Binding)
	switch {
	case errors.Is(err, native.ErrNotStored):
		return nil, native.ErrConversationNotFound
	case err != nil:
		return nil, fmt.Errorf("durable: loading the conversation: %w", err)
	case !rec.Conversation.Identity.Equal(cfg.Identity):
		return nil, native.ErrConversationNotFound
	}
	return a.in.open(req.SessionID, req.Binding, cfg.Identity, req.HostTools, rec.Pending)
}

// open registers a session, with the tools and instructions its host
// binding lends (the validated wrapper claimed the binding and releases
// it when the session closes).
func (in *instance) open(id string, b provider.Binding, identity *tool.Identity, ht provider.HostTools, pending *native.PendingTurn) (*session, error) {
	s := &session{in: in, id: id, binding: b, identity: identity.Clone(), pending: pending, defs: in.defs}
	if ht != nil {
		s.lent = map[string]tool.Tool{}
		for _, t := range provider.AsTools(ht) {
			spec := t.Spec()
			if _, clash := in.tools[spec.Name]; clash {
				return nil, fmt.Errorf("%w (%s)", native.ErrHostToolConflict, spec.Name)
			}
			s.lent[spec.Name] = t
			s.defs = append(slices.Clip(s.defs), llm.ToolDef{Name: spec.Name, Description: spec.Description, InputSchema: spec.InputSchema})
		}
		if instr := ht.Instructions(); instr != nil {
			if instr.Placement != provider.PlacementContext {
				return nil, fmt.Errorf("durable: instructions placed %q are not supported; place them as %q", instr.Placement, provider.PlacementContext)
			}
			s.context = &llm.Message{Role: llm.RoleUser, Content: instr.Text}
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.sessions[id] != nil {
		return nil, native.ErrSessionIDInUse
	}
	for _, o := range in.sessions {
		if o.binding == b {
			return nil, native.ErrConversationOpen
		}
	}
	in.sessions[id] = s
	return s, nil
}

func (in *instance) forget(s *session) {
	in.mu.Lock()
	if in.sessions[s.id] == s {
		delete(in.sessions, s.id)
	}
	in.mu.Unlock()
}

// newBinding returns a fresh conversation identity: 128 random bits.
func newBinding() provider.Binding {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	return provider.Binding("durable-" + hex.EncodeToString(raw[:]))
}

// workflowID names the workflow of one turn of one conversation.
func workflowID(b provider.Binding, turnID string) string {
	return "agentry/" + string(b) + "/" + turnID
}

// InstanceID is the id of the instance Open makes.
const InstanceID = "agentry"

// Open is the short way to one durable instance: a registry holding a
// single definition (instance id "agentry") of a driver built from cfg,
// opened with opts. Disposing the registry stops the replica's workers.
func Open(ctx context.Context, cfg Config, opts ...provider.Option) (*provider.Registry, *provider.Instance, error) {
	d, err := NewDriver(cfg)
	if err != nil {
		return nil, nil, err
	}
	return provider.OpenOne(ctx, d, InstanceID, opts...)
}

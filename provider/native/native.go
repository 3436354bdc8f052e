package native

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// DefaultKey is the provider key of a driver built without one.
const DefaultKey = "agentry-native"

// Config configures a [Driver].
type Config struct {
	// Key is the provider key (default "agentry-native").
	Key string
	// Agent returns the options of the agent one instance wraps. Required.
	// It is called once per materialised instance, with the instance's
	// definition (its ID and Config are the factory's to read). The
	// instance builds the agent with agent.New, owns it, and shuts it
	// down when it is disposed; give every call its own sinks.
	Agent func(ctx context.Context, def provider.Definition) (agent.Options, error)
	// Store keeps the instances' conversations. nil gives every instance
	// its own NewMemoryStore(0).
	Store Store
	// TurnRunIDs makes each turn's id the agent's run id, so the agent's
	// events name the run the host answers with. Set it only when the
	// host's turn ids are unique across every session and every owner
	// (agentry's host makes 128 random bits for each): run-scoped tool
	// sessions are keyed by owner and run id. Off, the agent makes a run
	// id of its own for every turn.
	TurnRunIDs bool
}

// Driver materialises native instances: each an *agent.Agent behind the
// provider contract. It supports multiple instances, each with its own
// agent.
type Driver struct {
	key        string
	build      func(context.Context, provider.Definition) (agent.Options, error)
	store      Store
	turnRunIDs bool
}

var _ provider.Driver = (*Driver)(nil)

// NewDriver checks cfg and returns the driver.
func NewDriver(cfg Config) (*Driver, error) {
	key := cfg.Key
	if key == "" {
		key = DefaultKey
	}
	if err := provider.CheckProviderKey(key); err != nil {
		return nil, fmt.Errorf("native: Config.Key is not a provider key: %w", err)
	}
	if cfg.Agent == nil {
		return nil, errors.New("native: Config.Agent is nil; pass a function that returns the agent.Options of an instance")
	}
	return &Driver{key: key, build: cfg.Agent, store: cfg.Store, turnRunIDs: cfg.TurnRunIDs}, nil
}

// ProviderKey returns the driver's provider key.
func (d *Driver) ProviderKey() string { return d.key }

// SupportsMultipleInstances is true: every instance has its own agent.
func (d *Driver) SupportsMultipleInstances() bool { return true }

// Capabilities is what every native instance declares, under key: create,
// resume (a paused turn comes back waiting) and branch through a turn; interrupt (no steer: a running agent
// takes no new input); approval requests (a check-in pause), no
// elicitation; host bindings with instructions placed as context (the
// agent's system prompt is fixed when it is built); no authentication.
func Capabilities(key string) provider.Capabilities {
	return provider.Capabilities{
		ProviderKey: key,
		Sessions:    provider.SessionCapabilities{Resume: true, ResumePending: true, Branch: provider.BranchThroughTurn},
		Turns:       provider.TurnCapabilities{Interrupt: true},
		Requests:    provider.RequestCapabilities{Approval: true},
		HostBinding: provider.HostBindingSupport{Supported: true,
			InstructionPlacements: []provider.Placement{provider.PlacementContext}},
	}
}

// Materialize builds the agent of one instance. Each session's runs
// report their progress to it directly (agent.Input.Progress). Its model
// and tools are put behind the host's step check (provider.CheckStep):
// a turn whose host no longer stands behind it takes no further step.
func (d *Driver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	opt, err := d.build(ctx, def)
	if err != nil {
		return provider.Materialized{}, fmt.Errorf("native: building the options of instance %s: %w", def.ID, err)
	}
	in := &instance{key: d.key, store: d.store, turnRunIDs: d.turnRunIDs, sessions: map[string]*session{}, bindings: map[provider.Binding]bool{}}
	if in.store == nil {
		in.store = NewMemoryStore(0)
	}
	// Every step checks that the host still stands behind its turn.
	opt.Model, opt.Tools = guardModel(opt.Model), guardTools(opt.Tools)
	a, err := agent.New(opt)
	if err != nil {
		return provider.Materialized{}, fmt.Errorf("native: building the agent of instance %s: %w", def.ID, err)
	}
	in.agent = a
	in.toolNames = a.ToolNames()
	return provider.Materialized{
		Capabilities: Capabilities(d.key),
		Adapter:      adapter{in},
		Dispose:      disposer(a),
	}, nil
}

// disposer shuts the agent down. Shutdown runs to its end the first time
// (it cancels what does not drain and fires every tool session) and
// reports what went wrong then; it cannot be redone, so a retry after a
// failed first attempt has nothing left to do.
func disposer(a *agent.Agent) func(context.Context) error {
	var ran atomic.Bool
	return func(ctx context.Context) error {
		if ran.Swap(true) {
			return nil
		}
		return a.Shutdown(ctx)
	}
}

// instance is one materialised agent and its open sessions.
type instance struct {
	key       string
	agent     *agent.Agent
	toolNames []string
	store     Store
	phrases   Phrasebook
	// turnRunIDs: the host's turn ids are the agent's run ids.
	turnRunIDs bool

	mu       sync.Mutex
	sessions map[string]*session       // open sessions by session id
	bindings map[provider.Binding]bool // conversations open in a session
}

// adapter is the instance's provider.Adapter, with the Resumer and
// Brancher ports.
type adapter struct{ in *instance }

var (
	_ provider.Adapter  = adapter{}
	_ provider.Resumer  = adapter{}
	_ provider.Brancher = adapter{}
)

// opening is what create, resume and branch share once parsed.
type opening struct {
	sessionID string
	binding   provider.Binding
	identity  *tool.Identity
	hostTools provider.HostTools
	record    Record
}

func (a adapter) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	cfg, err := ParseSessionConfig(req.Configuration)
	if err != nil {
		return nil, err
	}
	rec := Record{Conversation: agent.Conversation{Version: agent.ConversationVersion, Identity: cfg.Identity}}
	s, err := a.in.open(ctx, opening{sessionID: req.SessionID, binding: newBinding(), identity: cfg.Identity,
		hostTools: req.HostTools, record: rec}, true)
	if err != nil {
		return nil, err
	}
	req.OnBinding(s.binding)
	return s, nil
}

func (a adapter) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	cfg, err := ParseSessionConfig(req.Configuration)
	if err != nil {
		return nil, err
	}
	rec, err := a.in.load(ctx, req.Binding, cfg.Identity)
	if err != nil {
		return nil, err
	}
	return a.in.open(ctx, opening{sessionID: req.SessionID, binding: req.Binding, identity: cfg.Identity,
		hostTools: req.HostTools, record: rec}, false)
}

func (a adapter) Branch(ctx context.Context, req provider.BranchRequest) (provider.Session, error) {
	cfg, err := ParseSessionConfig(req.Configuration)
	if err != nil {
		return nil, err
	}
	src, err := a.in.load(ctx, req.Source.Binding, cfg.Identity)
	if err != nil {
		return nil, err
	}
	rec, ok := src.through(req.Source.TurnID)
	if !ok {
		return nil, ErrTurnNotFound
	}
	s, err := a.in.open(ctx, opening{sessionID: req.SessionID, binding: newBinding(), identity: cfg.Identity,
		hostTools: req.HostTools, record: rec}, true)
	if err != nil {
		return nil, err
	}
	req.OnBinding(s.binding)
	return s, nil
}

// newBinding returns a fresh conversation identity: 128 random bits, so a
// binding cannot be guessed.
func newBinding() provider.Binding {
	var raw [16]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	var hexed [32]byte
	hex.Encode(hexed[:], raw[:])
	var b strings.Builder
	b.Grow(len("native-") + len(hexed))
	b.WriteString("native-")
	b.Write(hexed[:])
	return provider.Binding(b.String())
}

// load returns the conversation b names, if it was created under identity.
func (in *instance) load(ctx context.Context, b provider.Binding, identity *tool.Identity) (Record, error) {
	rec, err := in.store.Load(ctx, b)
	switch {
	case errors.Is(err, ErrNotStored):
		return Record{}, ErrConversationNotFound
	case err != nil:
		return Record{}, fmt.Errorf("native: loading the conversation: %w", err)
	case !rec.Conversation.Identity.Equal(identity):
		return Record{}, ErrConversationNotFound
	}
	return rec, nil
}

// open registers a session. save stores its record first (create and
// branch make a new conversation).
func (in *instance) open(ctx context.Context, o opening, save bool) (*session, error) {
	s := &session{in: in, id: o.sessionID, binding: o.binding, identity: o.identity.Clone(), record: o.record,
		pending: o.record.Pending}
	if ht := o.hostTools; ht != nil {
		for _, spec := range ht.Tools() {
			if slices.Contains(in.toolNames, spec.Name) {
				return nil, fmt.Errorf("%w (%s)", ErrHostToolConflict, spec.Name)
			}
		}
		s.tools = guardTools(provider.AsTools(ht))
		if instr := ht.Instructions(); instr != nil {
			if instr.Placement != provider.PlacementContext {
				return nil, fmt.Errorf("native: instructions placed %q are not supported; place them as %q", instr.Placement, provider.PlacementContext)
			}
			s.context = &llm.Message{Role: llm.RoleUser, Content: instr.Text}
		}
	}
	in.mu.Lock()
	switch {
	case in.sessions[o.sessionID] != nil:
		in.mu.Unlock()
		return nil, ErrSessionIDInUse
	case in.bindings[o.binding]:
		in.mu.Unlock()
		return nil, ErrConversationOpen
	}
	in.sessions[o.sessionID] = s
	in.bindings[o.binding] = true
	in.mu.Unlock()
	if save {
		if err := in.save(ctx, o.binding, o.record.view()); err != nil {
			in.forget(s)
			return nil, fmt.Errorf("native: saving the new conversation: %w", err)
		}
	}
	return s, nil
}

// save stores a session's record.
func (in *instance) save(ctx context.Context, b provider.Binding, r Record) error {
	return in.store.Save(ctx, b, r)
}

// forget unregisters a closed session.
func (in *instance) forget(s *session) {
	in.mu.Lock()
	if in.sessions[s.id] == s {
		delete(in.sessions, s.id)
		delete(in.bindings, s.binding)
	}
	in.mu.Unlock()
}

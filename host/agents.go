package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// Agent is one agent a host offers: a profile a person picks when opening
// a conversation (POST /v1/sessions {"agent": NAME}), driven by its own
// provider. Several agents run side by side in one host; the conversation
// record keeps the name (and the model chosen), so a restart or another
// replica serves it with the same agent.
type Agent struct {
	// Name is what people pick it by: 1 to 64 of a-z, 0-9, '-' and '_',
	// starting with a letter. Unique among Options.Agents.
	Name string
	// Provider or Adapter drives its conversations (exactly one), as
	// Options.Provider and Options.Adapter do for a host of one agent.
	Provider *provider.Instance
	Adapter  *provider.Validated
	// Models are the models a person may choose for a conversation with
	// this agent; empty: none to choose (the agent's default). Model is
	// the one used when a person chooses none ("" keeps the agent's own
	// default); it is listed first when Models does not hold it.
	Models []string
	Model  string
	// HostTools are lent to this agent's sessions (see
	// Options.HostTools, which serves a host of one agent).
	HostTools []tool.Tool
	// SessionConfig is the configuration each of its sessions opens with,
	// given the conversation's model ("" when none was chosen and Model
	// is ""). Required when Models or Model is set; nil otherwise takes
	// Options.SessionConfig.
	SessionConfig func(owner tool.Identity, sessionID, model string) json.RawMessage
	// WorkingDirectory overrides Options.WorkingDirectory for its
	// sessions (nil: the host's).
	WorkingDirectory func(owner tool.Identity, sessionID string) (string, error)
	// Credentials are the person's credentials its sessions get, each as
	// a variable (see Options.AgentCredentials, which serves a host of
	// one agent); they need Options.Credentials and CredentialKeys.
	Credentials []AgentCredential
}

// MaxAgentModels bounds Agent.Models.
const MaxAgentModels = 64

var agentName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// CheckAgentName refuses a name an agent profile cannot have.
func CheckAgentName(name string) error {
	if !agentName.MatchString(name) {
		return fmt.Errorf("host: agent name %q: use 1 to 64 of a-z, 0-9, '-' and '_', starting with a letter", name)
	}
	return nil
}

// hostedAgent is an Agent as the host drives it.
type hostedAgent struct {
	name string
	// stored is what a conversation opened with it records: its name, or
	// "" for the one agent of a host given Options.Provider or Adapter
	// (so such conversations follow the default agent when the host
	// later offers several).
	stored        string
	prov          *provider.Validated
	key           string
	models        []string // what a person may choose; the default first
	model         string   // the default
	lent          *lending
	sessionConfig func(owner tool.Identity, sessionID, model string) json.RawMessage
	workingDir    func(owner tool.Identity, sessionID string) (string, error)
	// ownDir: workingDir is the agent's (an ACP agent's workspace), not
	// the "/" of an agent that uses none; a clone lands there before the
	// session opens, and otherwise in the session's workspace.
	ownDir bool
	creds  []AgentCredential // the person's credentials its sessions need
}

// agentsOf makes the host's agents: Options.Agents, or the one agent of
// Options.Provider or Options.Adapter (named after its instance, or its
// provider key). It also refuses options missing the store or the
// authenticator. unnamed is true for the one agent of Options.Provider or
// Adapter.
func agentsOf(opt Options) (agents []Agent, def string, unnamed bool, err error) {
	switch {
	case opt.Store == nil:
		return nil, "", false, errors.New("host: Options.Store is nil; open one with host/sqlstore (sqlite.Open or postgres.Open)")
	case opt.Auth == nil:
		return nil, "", false, errors.New("host: Options.Auth is nil; pass a *host.Tokens (host.LoadTokens) or another Authenticator")
	}
	if len(opt.Agents) > 0 {
		if opt.Provider != nil || opt.Adapter != nil || len(opt.HostTools) > 0 || len(opt.AgentCredentials) > 0 {
			return nil, "", false, errors.New("host: with Options.Agents, give each agent its Provider (or Adapter), HostTools and Credentials; leave Options.Provider, Adapter, HostTools and AgentCredentials unset")
		}
		def = opt.DefaultAgent
		if def == "" {
			def = opt.Agents[0].Name
		}
		return opt.Agents, def, false, nil
	}
	if opt.DefaultAgent != "" {
		return nil, "", false, errors.New("host: Options.DefaultAgent names one of Options.Agents, and there are none")
	}
	a := Agent{Provider: opt.Provider, Adapter: opt.Adapter, HostTools: opt.HostTools, Credentials: opt.AgentCredentials}
	switch {
	case opt.Provider != nil && opt.Adapter != nil:
		return nil, "", false, errors.New("host: set Options.Provider or Options.Adapter, not both")
	case opt.Provider != nil:
		a.Name = opt.Provider.ID()
	case opt.Adapter != nil:
		a.Name = opt.Adapter.ProviderKey()
	default:
		return nil, "", false, errors.New("host: no provider; set Options.Provider to a registry instance (provider.OpenRegistry) or Options.Adapter to provider.Validate(...), or list Options.Agents")
	}
	return []Agent{a}, a.Name, true, nil
}

// hostAgents checks the agents and builds what the host drives them with.
func (h *Host) hostAgents(agents []Agent, def string, unnamed bool) error {
	h.byName = make(map[string]*hostedAgent, len(agents))
	for i, a := range agents {
		if err := CheckAgentName(a.Name); err != nil {
			return fmt.Errorf("host: Options.Agents[%d]: %w", i, err)
		}
		if h.byName[a.Name] != nil {
			return fmt.Errorf("host: two agents are named %q; agent names are unique", a.Name)
		}
		ha, err := h.hostAgent(a)
		if err != nil {
			return fmt.Errorf("host: agent %q: %w", a.Name, err)
		}
		if !unnamed {
			ha.stored = a.Name
		}
		h.agents = append(h.agents, ha)
		h.byName[a.Name] = ha
	}
	h.def = h.byName[def]
	if h.def == nil {
		return fmt.Errorf("host: the default agent %q is not one of the agents (%s)", def, strings.Join(h.agentNames(), ", "))
	}
	h.key = h.def.key
	return nil
}

func (h *Host) hostAgent(a Agent) (*hostedAgent, error) {
	ha := &hostedAgent{name: a.Name, model: a.Model, sessionConfig: a.SessionConfig, workingDir: a.WorkingDirectory,
		creds: slices.Clone(a.Credentials)}
	if err := CheckAgentCredentials(ha.creds); err != nil {
		return nil, err
	}
	if len(ha.creds) > 0 && h.creds == nil {
		return nil, errors.New("its Credentials need Options.Credentials and Options.CredentialKeys (the store and the keys that seal them)")
	}
	switch {
	case a.Provider != nil && a.Adapter != nil:
		return nil, errors.New("set Provider or Adapter, not both")
	case a.Provider != nil:
		ha.prov = a.Provider.Adapter()
	case a.Adapter != nil:
		ha.prov = a.Adapter
	default:
		return nil, errors.New("no provider; set its Provider or Adapter")
	}
	ha.key = ha.prov.ProviderKey()
	if len(a.Models) > MaxAgentModels {
		return nil, fmt.Errorf("%d models; at most %d", len(a.Models), MaxAgentModels)
	}
	if a.Model != "" {
		ha.models = append(ha.models, a.Model)
	}
	for _, m := range a.Models {
		if err := checkModelName(m); err != nil {
			return nil, err
		}
		if !slices.Contains(ha.models, m) {
			ha.models = append(ha.models, m)
		}
	}
	if len(ha.models) > 0 && ha.sessionConfig == nil {
		return nil, errors.New("models are offered but no SessionConfig passes the chosen one to the provider")
	}
	if ha.sessionConfig == nil {
		sc := h.opt.SessionConfig
		ha.sessionConfig = func(o tool.Identity, id, _ string) json.RawMessage { return sc(o, id) }
	}
	if ha.workingDir == nil {
		ha.workingDir = h.opt.WorkingDirectory
	}
	ha.ownDir = ha.workingDir != nil
	if ha.workingDir == nil {
		ha.workingDir = func(tool.Identity, string) (string, error) { return "/", nil }
	}
	var err error
	if ha.lent, err = newLending(a.HostTools, h.bus); err != nil {
		return nil, err
	}
	// Every session of this agent is lent the same tools: a provider that
	// prepares sessions ahead (an ACP agent's warm pool) can list them
	// before a conversation comes.
	if specs := ha.lent.specs(); len(specs) > 0 {
		if err := ha.prov.ExpectHostTools(specs); err != nil {
			return nil, fmt.Errorf("its HostTools: %w", err)
		}
	}
	return ha, nil
}

// checkModelName refuses a model name no agent has: empty, too long, or
// with control characters.
func checkModelName(m string) error {
	if m == "" || len(m) > 256 || strings.ContainsFunc(m, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("model %q: a model is 1 to 256 printable characters", m)
	}
	return nil
}

func (h *Host) agentNames() []string {
	names := make([]string, len(h.agents))
	for i, a := range h.agents {
		names[i] = a.name
	}
	return names
}

// pickAgent is what POST /v1/sessions chose: the agent named (the default
// when none is) and the model (checked against the agent's).
func (h *Host) pickAgent(req CreateRequest) (*hostedAgent, string, *apiError) {
	a := h.def
	if req.Agent != "" {
		if a = h.byName[req.Agent]; a == nil {
			return nil, "", fieldError(CodeUnknownAgent, "agent",
				fmt.Sprintf("host: there is no agent %q here; pick one of %s (GET /v1/agents lists them)", req.Agent, strings.Join(h.agentNames(), ", ")))
		}
	}
	if req.Model == "" || req.Model == a.model {
		return a, req.Model, nil
	}
	if len(a.models) == 0 {
		return nil, "", fieldError(CodeModelNotOffered, "model",
			fmt.Sprintf("host: agent %q offers no choice of model; open the session without one", a.name))
	}
	if !slices.Contains(a.models, req.Model) {
		return nil, "", fieldError(CodeModelNotOffered, "model",
			fmt.Sprintf("host: agent %q does not offer model %q; it offers %s", a.name, req.Model, strings.Join(a.models, ", ")))
	}
	return a, req.Model, nil
}

// agentOf is the agent serving a conversation: the one it was opened
// with, or the default for one opened before agents had names. A
// conversation whose agent this host does not offer, or whose provider
// is another, is refused (409 provider_mismatch).
func (h *Host) agentOf(c Conversation) (*hostedAgent, *apiError) {
	a := h.def
	if c.Agent != "" {
		if a = h.byName[c.Agent]; a == nil {
			return nil, newError(http.StatusConflict, CodeProviderMismatch,
				fmt.Sprintf("host: this session was opened with agent %q, which this host does not offer (it offers %s); serve it with a configuration that has that agent, or open a new session",
					c.Agent, strings.Join(h.agentNames(), ", ")))
		}
	}
	if c.Provider != "" && c.Provider != a.key {
		return nil, newError(http.StatusConflict, CodeProviderMismatch,
			fmt.Sprintf("host: this session is held by provider %q and this host drives %q for it; serve it with that provider, or open a new session", c.Provider, a.key))
	}
	return a, nil
}

// AgentView is one agent of GET /v1/agents.
type AgentView struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Default  bool   `json:"default,omitempty"`
	// Models are the models a person may choose ([] when none); Model is
	// the one a conversation gets when its person chooses none.
	Models []string `json:"models"`
	Model  string   `json:"model,omitempty"`
}

// agentsView is the body of GET /v1/agents.
type agentsView struct {
	Agents  []AgentView `json:"agents"`
	Default string      `json:"default"`
}

// handleAgents lists the agents a person may open a conversation with.
func (h *Host) handleAgents(w http.ResponseWriter, _ *http.Request, _ tool.Identity) {
	out := agentsView{Default: h.def.name, Agents: make([]AgentView, len(h.agents))}
	for i, a := range h.agents {
		out.Agents[i] = AgentView{Name: a.name, Provider: a.key, Default: a == h.def, Models: append([]string{}, a.models...), Model: a.model}
	}
	writeJSON(w, http.StatusOK, out)
}

package host_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/tool"
)

// configDriver is the fake behind a wrapper that keeps the configuration
// each session opened with, by instance.
type configDriver struct {
	*conformance.FakeDriver
	mu      sync.Mutex
	configs map[string][]string // instance id → configurations, in order
}

func (d *configDriver) Materialize(ctx context.Context, def provider.Definition) (provider.Materialized, error) {
	m, err := d.FakeDriver.Materialize(ctx, def)
	if err != nil {
		return m, err
	}
	// The wrapper implements creating and resuming only.
	caps := conformance.FakeCapabilities()
	caps.Sessions.Branch = provider.BranchUnsupported
	caps.Turns = provider.TurnCapabilities{}
	caps.Sessions.ResumePending = false
	caps.Interactions = provider.InteractionSupport{}
	m.Capabilities = caps
	m.Adapter = configAdapter{d: d, id: def.ID, Adapter: m.Adapter}
	return m, nil
}

func (d *configDriver) seen(id string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.configs[id])
}

type configAdapter struct {
	provider.Adapter
	d  *configDriver
	id string
}

func (a configAdapter) note(cfg json.RawMessage) {
	a.d.mu.Lock()
	a.d.configs[a.id] = append(a.d.configs[a.id], string(cfg))
	a.d.mu.Unlock()
}

func (a configAdapter) Create(ctx context.Context, req provider.CreateRequest) (provider.Session, error) {
	a.note(req.Configuration)
	s, err := a.Adapter.Create(ctx, req)
	if err != nil {
		return nil, err
	}
	return configSession{s}, nil
}

func (a configAdapter) Resume(ctx context.Context, req provider.ResumeRequest) (provider.Session, error) {
	a.note(req.Configuration)
	s, err := a.Adapter.(provider.Resumer).Resume(ctx, req)
	if err != nil {
		return nil, err
	}
	return configSession{s}, nil
}

// configSession shows a fake session's contract methods only.
type configSession struct{ provider.Session }

// agentsHost is a host offering two agents, each a fake instance of its
// own: "claude" (models opus and sonnet, sonnet by default) and "codex"
// (no choice of model), "codex" the default.
type agentsHost struct {
	t      *testing.T
	drv    *configDriver
	reg    *provider.Registry
	h      *host.Host
	url    string
	tokens map[string]string
	close  func()
}

func newAgentsHost(t *testing.T, dsn string, toks map[string]string, agents func(claude, codex *provider.Instance) []host.Agent, def string,
	more ...func(*host.Options)) *agentsHost {
	t.Helper()
	drv := &configDriver{FakeDriver: conformance.NewFakeDriver(), configs: map[string][]string{}}
	ctx := context.Background()
	reg, err := provider.OpenRegistry(ctx, []provider.Driver{drv}, []provider.Definition{
		{ID: "claude", Provider: conformance.FakeKey}, {ID: "codex", Provider: conformance.FakeKey}})
	if err != nil {
		t.Fatal(err)
	}
	claude, _ := reg.Instance("claude")
	codex, _ := reg.Instance("codex")
	auth, toks := tokensFor(t, toks)
	opt := host.Options{Agents: agents(claude, codex), DefaultAgent: def, Store: openStore(t, dsn), Auth: auth, EvictEvery: -1}
	for _, m := range more {
		m(&opt)
	}
	h, err := host.New(opt)
	if err != nil {
		_ = reg.Dispose(ctx)
		t.Fatal(err)
	}
	srv := httptest.NewServer(validating(t, h))
	a := &agentsHost{t: t, drv: drv, reg: reg, h: h, url: srv.URL, tokens: toks}
	var once sync.Once
	a.close = func() {
		once.Do(func() {
			srv.Close()
			if err := h.Shutdown(ctx); err != nil {
				t.Error(err)
			}
			if err := reg.Dispose(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(a.close)
	return a
}

func modelConfig(_ tool.Identity, _, model string) json.RawMessage {
	if model == "" {
		return nil
	}
	b, _ := json.Marshal(map[string]string{"model": model})
	return b
}

func twoAgents(claude, codex *provider.Instance) []host.Agent {
	return []host.Agent{
		{Name: "claude", Provider: claude, Models: []string{"opus", "sonnet"}, Model: "sonnet", SessionConfig: modelConfig},
		{Name: "codex", Provider: codex},
	}
}

func (a *agentsHost) do(method, path string, body any) resp {
	a.t.Helper()
	f := &fixture{t: a.t, url: a.url, tokens: a.tokens}
	return f.do(method, path, "alice", body)
}

func TestAgentsSideBySide(t *testing.T) {
	a := newAgentsHost(t, filepath.Join(t.TempDir(), "a.db"), nil, twoAgents, "codex")

	r := a.do("GET", "/v1/agents", nil)
	want(t, r, http.StatusOK, "")
	var list struct {
		Agents []struct {
			Name, Provider, Model string
			Default               bool
			Models                []string
		}
		Default string
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	if list.Default != "codex" || len(list.Agents) != 2 || list.Agents[0].Name != "claude" || list.Agents[0].Default ||
		!slices.Equal(list.Agents[0].Models, []string{"sonnet", "opus"}) || list.Agents[0].Model != "sonnet" ||
		list.Agents[1].Name != "codex" || !list.Agents[1].Default || len(list.Agents[1].Models) != 0 || list.Agents[1].Provider != conformance.FakeKey {
		t.Fatalf("GET /v1/agents: %s", r.body)
	}

	// Each agent answers a turn of its own conversation.
	open := func(body any) map[string]any {
		t.Helper()
		r := a.do("POST", "/v1/sessions", body)
		want(t, r, http.StatusCreated, "")
		return r.json(t)
	}
	byDefault := open(nil)
	if byDefault["agent"] != "codex" || byDefault["model"] != nil {
		t.Fatalf("opened without an agent: %v", byDefault)
	}
	opus := open(map[string]string{"agent": "claude", "model": "opus"})
	if opus["agent"] != "claude" || opus["model"] != "opus" {
		t.Fatalf("opened claude with opus: %v", opus)
	}
	plain := open(map[string]string{"agent": "claude"})
	for _, id := range []any{byDefault["sessionId"], opus["sessionId"], plain["sessionId"]} {
		r := a.do("POST", "/v1/sessions/"+id.(string)+"/turns", map[string]string{"message": "hi"})
		want(t, r, http.StatusOK, "")
		if out := r.json(t)["output"]; out != "echo: hi" {
			t.Fatalf("turn on %s: %s", id, r.body)
		}
	}
	// The model a person chose, else the agent's default, reached the
	// agent's provider; the other agent's provider opened one session,
	// with no model.
	if got := a.drv.seen("claude"); !slices.Equal(got, []string{`{"model":"opus"}`, `{"model":"sonnet"}`}) {
		t.Fatalf("claude's sessions opened with %q", got)
	}
	if got := a.drv.seen("codex"); len(got) != 1 || !strings.Contains(got[0], `"identity"`) || strings.Contains(got[0], "model") {
		t.Fatalf("codex's sessions opened with %q", got)
	}
	r = a.do("GET", "/v1/sessions/"+opus["sessionId"].(string), nil)
	if m := r.json(t); m["agent"] != "claude" || m["model"] != "opus" || m["provider"] != conformance.FakeKey {
		t.Fatalf("GET the session: %s", r.body)
	}
}

func TestAgentsRefusals(t *testing.T) {
	a := newAgentsHost(t, filepath.Join(t.TempDir(), "a.db"), nil, twoAgents, "")
	for _, c := range []struct {
		body       any
		code, says string
	}{
		{map[string]string{"agent": "gemini"}, "unknown_agent", "pick one of claude, codex"},
		{map[string]string{"agent": "claude", "model": "haiku"}, "model_not_offered", "it offers sonnet, opus"},
		{map[string]string{"agent": "codex", "model": "gpt-5"}, "model_not_offered", "offers no choice of model"},
		{map[string]string{"model": "gpt-5"}, "model_not_offered", `does not offer model`}, // the default is the first
		{map[string]string{"agent": "Claude"}, "invalid_field", "GET /v1/agents lists them"},
		{map[string]any{"agent": 7}, "invalid_json", ""},
		{map[string]string{"agent": "claude", "mode": "plan"}, "unknown_field", ""},
	} {
		r := a.do("POST", "/v1/sessions", c.body)
		want(t, r, http.StatusBadRequest, c.code)
		if !strings.Contains(string(r.body), c.says) {
			t.Fatalf("%v: %s does not say %q", c.body, r.body, c.says)
		}
	}
}

// A conversation keeps its agent and model across a restart; a host
// that no longer offers its agent refuses it by name.
func TestAgentsSurviveRestart(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "a.db")
	a := newAgentsHost(t, dsn, nil, twoAgents, "codex")
	r := a.do("POST", "/v1/sessions", map[string]string{"agent": "claude", "model": "opus"})
	want(t, r, http.StatusCreated, "")
	id := r.json(t)["sessionId"].(string)
	want(t, a.do("POST", "/v1/sessions/"+id+"/turns", map[string]string{"message": "one"}), http.StatusOK, "")
	a.close()

	b := newAgentsHost(t, dsn, a.tokens, twoAgents, "codex")
	// The fake keeps its conversations in its instance: the resumed
	// session is new to it, and it says so; what matters here is which
	// agent and model it was resumed with.
	_ = b.do("POST", "/v1/sessions/"+id+"/turns", map[string]string{"message": "two"})
	if got := b.drv.seen("claude"); len(got) != 1 || got[0] != `{"model":"opus"}` {
		t.Fatalf("after the restart claude reopened with %q; codex %q", got, b.drv.seen("codex"))
	}
	b.close()

	c := newAgentsHost(t, dsn, a.tokens, func(_, codex *provider.Instance) []host.Agent {
		return []host.Agent{{Name: "codex", Provider: codex}}
	}, "")
	r = c.do("POST", "/v1/sessions/"+id+"/turns", map[string]string{"message": "three"})
	want(t, r, http.StatusConflict, "provider_mismatch")
	if !strings.Contains(string(r.body), `agent \"claude\", which this host does not offer (it offers codex)`) {
		t.Fatalf("refusal: %s", r.body)
	}
}

func TestAgentsOptionsRefused(t *testing.T) {
	drv := conformance.NewFakeDriver()
	reg, inst, err := provider.OpenOne(context.Background(), drv, "one")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Dispose(context.Background()) }()
	auth, _ := tokensFor(t, nil)
	st := openStore(t, filepath.Join(t.TempDir(), "a.db"))
	defer st.Close()
	for _, c := range []struct {
		opt  host.Options
		says string
	}{
		{host.Options{Agents: []host.Agent{{Name: "a", Provider: inst}}, Provider: inst}, "leave Options.Provider"},
		{host.Options{Agents: []host.Agent{{Name: "a", Provider: inst}, {Name: "a", Provider: inst}}}, `two agents are named "a"`},
		{host.Options{Agents: []host.Agent{{Name: "A", Provider: inst}}}, "a-z"},
		{host.Options{Agents: []host.Agent{{Name: "a"}}}, "no provider"},
		{host.Options{Agents: []host.Agent{{Name: "a", Provider: inst}}, DefaultAgent: "b"}, `default agent "b" is not one of the agents (a)`},
		{host.Options{Agents: []host.Agent{{Name: "a", Provider: inst, Models: []string{"m"}}}}, "no SessionConfig"},
		{host.Options{Provider: inst, DefaultAgent: "b"}, "there are none"},
	} {
		c.opt.Store, c.opt.Auth, c.opt.EvictEvery = st, auth, -1
		h, err := host.New(c.opt)
		if err == nil {
			_ = h.Shutdown(context.Background())
			t.Fatalf("%+v: accepted", c.opt)
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Fatalf("%v does not say %q", err, c.says)
		}
	}
}

// A host of one agent (Options.Provider) lists it under its instance's
// id, opens conversations with it by that name or none, and records no
// agent name with them: they follow the default agent should the host
// later offer several.
func TestAgentsOfOneAgentHost(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	r := f.do("GET", "/v1/agents", "alice", nil)
	want(t, r, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"agents":[{"name":"agents","provider":"fake","default":true,"models":[]}],"default":"agents"`) {
		t.Fatalf("GET /v1/agents: %s", r.body)
	}
	r = f.do("POST", "/v1/sessions", "alice", map[string]string{"agent": "agents"})
	want(t, r, http.StatusCreated, "")
	if m := r.json(t); m["agent"] != nil || m["provider"] != "fake" {
		t.Fatalf("opened: %s", r.body)
	}
	want(t, f.do("POST", "/v1/sessions", "alice", map[string]string{"agent": "other"}), http.StatusBadRequest, "unknown_agent")
	want(t, f.do("GET", "/v1/agents", "", nil), http.StatusUnauthorized, "unauthenticated")
}

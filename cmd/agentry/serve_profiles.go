package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
	"github.com/agentry-dev/agentry/tool"
)

// profileDeps are what one agent profile runs with.
type profileDeps struct {
	p agentProfile
	// acpConfig is an ACP profile's definition configuration; model a
	// native profile's model.
	acpConfig json.RawMessage
	model     llm.Model
	lent      []tool.Tool
}

// takeProfiles moves the configuration file's agent profiles into o, and
// refuses the command line's agent flags beside them: the profiles say
// which agents run.
func (o *serveOptions) takeProfiles(flags *pflag.FlagSet) error {
	if o.conf == nil || len(o.conf.file.agents) == 0 {
		return nil
	}
	o.profiles, o.defaultAgent = o.conf.file.agents, o.conf.file.defaultAgent
	for _, name := range append([]string{"agent", "lend"}, acpFlagNames...) {
		if o.conf.cmdline[name] {
			return usageError("--%s: %s has agent profiles ([agents.NAME]), which say which agents run and how; drop --%s, or change the profile", name, o.configPath, name)
		}
	}
	if flags.Changed("temporal") {
		return usageError("--temporal with agent profiles: durable turns run one agentry agent (serve --agent native); drop the [agents.NAME] profiles or --temporal")
	}
	if o.temporal != "" {
		return usageError("temporal with agent profiles: durable turns run one agentry agent (serve --agent native); drop the [agents.NAME] profiles or temporal")
	}
	return o.checkProfileCredentials()
}

// buildProfileDeps is buildServeDeps for a file with agent profiles:
// agentry's own agent's tools when a profile is native, the jailed
// launcher and the workspaces when one is ACP, and each profile's
// configuration.
func buildProfileDeps(ctx context.Context, o serveOptions, d serveDeps, toBus func(event.Event), warn io.Writer) (serveDeps, error) {
	hasACP := slices.ContainsFunc(o.profiles, func(p agentProfile) bool { return p.kind == kindACP })
	hasNative := slices.ContainsFunc(o.profiles, func(p agentProfile) bool { return p.kind == kindNative })
	if hasACP {
		ao := o
		ao.lend = nil
		if slices.ContainsFunc(o.profiles, func(p agentProfile) bool { return slices.Contains(p.lend, "run_code") }) {
			ao.lend = []string{"run_code"}
		}
		var err error
		if d, err = buildACPDeps(ctx, ao, d, toBus, warn); err != nil {
			return serveDeps{}, err
		}
	}
	fail := func(err error) (serveDeps, error) {
		d.close()
		closeSinks(d.sinks)
		return serveDeps{}, err
	}
	if hasNative {
		if err := addNativeTools(ctx, o, &d, toBus, warn); err != nil {
			return fail(err)
		}
	}
	for _, p := range o.profiles {
		pd := profileDeps{p: p}
		switch p.kind {
		case kindACP:
			raw, err := p.acp.raw(d.workspaceRoot, true)
			if err != nil {
				return fail(usageError("agents.%s: %v", p.name, err))
			}
			pd.acpConfig = raw
			if slices.Contains(p.lend, "run_code") {
				pd.lent = d.lent
			}
		case kindNative:
			pd.model = d.model
			if p.model != "" {
				m, err := parseModel(p.model, os.Getenv)
				if err != nil {
					return fail(usageError("agents.%s.model: %v", p.name, err))
				}
				if m == nil {
					m = scripted.Calculator() // "scripted", as for --model
				}
				pd.model = m
			}
		}
		d.profiles = append(d.profiles, pd)
	}
	return d, nil
}

// openProfiles opens an instance per agent profile, each in a registry
// of its own, and makes the host's agents of them.
func (s *server) openProfiles(ctx context.Context, opts []provider.Option) error {
	o, d := s.o, s.deps
	for _, pd := range d.profiles {
		var reg *provider.Registry
		var inst *provider.Instance
		var err error
		a := host.Agent{Name: pd.p.name}
		switch pd.p.kind {
		case kindACP:
			reg, inst, err = openACP(ctx, d.launcher, pd.p.name, pd.acpConfig, s.bus.Export, opts...)
			a.Models, a.Model, a.HostTools = pd.p.models, pd.p.model, pd.lent
			a.SessionConfig, a.WorkingDirectory = modelSessionConfig, d.workingDir
			_, a.Credentials = profileCredentials(pd.p.credentials)
		case kindNative:
			var nd *native.Driver
			nd, err = native.NewDriver(native.Config{Store: native.HostStore(s.store), TurnRunIDs: true, Agent: native.Fixed(agent.Options{
				ID:              "agentry-serve",
				Model:           pd.model,
				Tools:           d.tools,
				Routes:          []agent.Route{{Sink: s.bus, Filter: event.Filter{Tier: event.TierFull}}},
				TeardownTimeout: o.teardown,
				MaxLiveSessions: o.maxLive,
			})})
			if err == nil {
				reg, inst, err = provider.OpenOne(ctx, nd, pd.p.name, opts...)
			}
		}
		if err != nil {
			return failure(fmt.Errorf("opening agent %s: %w", pd.p.name, err))
		}
		s.undo.PushFunc(s.disposer(reg))
		a.Provider = inst
		s.agents = append(s.agents, a)
	}
	return nil
}

// modelSessionConfig is an ACP session's configuration: the model its
// conversation chose, if any.
func modelSessionConfig(_ tool.Identity, _ string, model string) json.RawMessage {
	if model == "" {
		return nil
	}
	b, _ := json.Marshal(map[string]string{"model": model})
	return b
}

// describeAgents is the line serve prints about its agents.
func describeAgents(ps []agentProfile, def string) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.name + " (" + p.kind
		if p.name == def {
			names[i] += ", the default"
		}
		names[i] += ")"
	}
	return strings.Join(names, ", ")
}

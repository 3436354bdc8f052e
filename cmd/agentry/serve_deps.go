package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/llm/scripted"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

// buildServeDeps builds the model, tools and sinks `agentry serve` runs
// with: the model from --model (the scripted calculator by default), one
// run_code tool on the --runner holding one session per conversation, and
// the events file.
func buildServeDeps(ctx context.Context, o serveOptions, warn io.Writer) (serveDeps, error) {
	m, err := parseModel(o.model, os.Getenv)
	if err != nil {
		return serveDeps{}, err
	}
	if m == nil {
		m = scripted.Calculator()
	}
	// Runner and jail events (a sweep at start, a runner's limits, each
	// code_run) go on the bus, which exists only later: held until then.
	later := &busLater{warn: warn}
	d := serveDeps{model: m, close: func() {}, bind: later.bind}
	if o.events != "" {
		s, err := ndjson.Open(o.events, ndjson.Options{OnError: func(err error) {
			fmt.Fprintf(warn, "agentry serve: events file: %v\n", err)
		}})
		if err != nil {
			return serveDeps{}, usageError("--events: %v", err)
		}
		d.sinks = append(d.sinks, s)
	}
	if len(o.profiles) > 0 {
		return buildProfileDeps(ctx, o, d, later.export, warn)
	}
	if o.agent == "acp" {
		return buildACPDeps(ctx, o, d, later.export, warn)
	}
	if err := addNativeTools(ctx, o, &d, later.export, warn); err != nil {
		closeSinks(d.sinks)
		return serveDeps{}, err
	}
	return d, nil
}

// addNativeTools gives d agentry's own agent's tools: run_code on the
// --runner, holding one session per conversation, behind --check-in.
func addNativeTools(ctx context.Context, o serveOptions, d *serveDeps, toBus func(event.Event), warn io.Writer) error {
	jail, err := o.caps.jail()
	if err != nil {
		return err
	}
	if o.pool < 0 {
		return usageError("--pool %d: give a count of interpreters, or 0 for none", o.pool)
	}
	r, unjailed, err := doorRunner(ctx, o.runner, local.Options{Jail: jail, Pool: local.Pool{Size: o.pool}, Events: toBus}, o.reach, o.allowUnjailed, warn)
	if err != nil {
		return err
	}
	d.unjailed = unjailed
	stateLimits(r, true, warn)
	closeRunner := func() {}
	if c, ok := r.(interface{ Close(context.Context) error }); ok {
		closeRunner = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.Close(ctx); err != nil {
				fmt.Fprintf(warn, "agentry serve: stopping the interpreter pool: %v\n", err)
			}
		}
	}
	tools := []tool.Tool{code.NewTool(r, code.ToolOptions{
		Scope:  toolsession.ScopeSession,
		Events: toBus,
	})}
	if tools, err = withCheckIns(tools, o.checkIns); err != nil {
		closeRunner()
		return err
	}
	closeCloner := func() {}
	if len(o.cloneAllow) > 0 {
		if closeCloner, err = nativeCloner(ctx, o, d, toBus); err != nil {
			closeRunner()
			return err
		}
	}
	d.tools = tools
	before := d.close
	d.close = func() {
		closeCloner()
		closeRunner()
		before()
	}
	return nil
}

// checkNativeClone refuses --clone-allow for a native agent whose
// runner never jails; what it can check without the machine.
func checkNativeClone(o serveOptions) error {
	native := o.agent != "acp"
	if len(o.profiles) > 0 {
		native = slices.ContainsFunc(o.profiles, func(p agentProfile) bool { return p.kind == kindNative })
	}
	if !native || len(o.cloneAllow) == 0 {
		return nil
	}
	switch o.runner {
	case runnerProcess, runnerInterpreter:
		return usageError("--clone-allow with the native agent clones into its jailed interpreter's /work, and --runner %s does not jail; use --runner jail (the default where bubblewrap works), or drop --clone-allow", o.runner)
	}
	return nil
}

// nativeCloner gives serve its cloner for the native agent: clones land
// in the conversation's interpreter's /work, so the interpreter must be
// jailed (--runner jail, or the default where bubblewrap works); git runs
// in a jail of its own, as for an ACP agent. It refuses an unjailed
// runner: a clone is never made where model code runs unconfined.
func nativeCloner(ctx context.Context, o serveOptions, d *serveDeps, toBus func(event.Event)) (func(), error) {
	if err := checkNativeClone(o); err != nil {
		return nil, err
	}
	j, err := o.caps.jail()
	if err != nil {
		return nil, err
	}
	if err := local.CheckJail(ctx, *j); err != nil {
		return nil, usageError("--clone-allow with the native agent clones into its jailed interpreter's /work, and the interpreter cannot be jailed here (%v); install bubblewrap, or drop --clone-allow", err)
	}
	if d.cloner != nil { // made for the ACP agent profiles: one cloner serves them all
		return func() {}, nil
	}
	return withCloner(ctx, o, d, "", toBus)
}

// closeSinks closes sinks an agent never took over.
func closeSinks(sinks []event.Sink) {
	for _, s := range sinks {
		_ = s.Close(context.Background())
	}
}

// buildACPDeps is buildServeDeps for --agent acp: the jailed launcher (or,
// with --allow-unjailed, the unjailed one, recorded), the agent's
// configuration with a workspace per conversation under --workspaces, and
// the host tools --lend names.
func buildACPDeps(ctx context.Context, o serveOptions, d serveDeps, toBus func(event.Event), warn io.Writer) (serveDeps, error) {
	fail := func(err error) (serveDeps, error) {
		closeSinks(d.sinks)
		return serveDeps{}, err
	}
	root, err := workspaces(o.workspaces)
	if err != nil {
		return fail(err)
	}
	var cfg json.RawMessage
	if len(o.profiles) == 0 { // profiles have a configuration each
		ac, hc, err := o.creds.parse()
		if err != nil {
			return fail(err)
		}
		o.acp.creds, d.agentCreds = ac, hc
		if cfg, err = o.acp.config(root, true); err != nil {
			return fail(err)
		}
	}
	l, why, closeLauncher, err := acpLauncher(ctx, "serve", o.caps, o.allowUnjailed, toBus, warn)
	if err != nil {
		return fail(err)
	}
	d.launcher, d.acpConfig, d.workingDir, d.dropWorkspace = l, cfg, conversationDir(root), dropConversationDir(root)
	d.workspaceRoot = root
	// An ACP session's configuration is its mode at most; the definition
	// gives it (--agent-mode), so sessions open with none.
	d.sessionConfig = func(tool.Identity, string) json.RawMessage { return nil }
	if why != "" {
		d.unjailed = &unjailedServing{Command: "serve", RunnerID: "acp", Principals: o.reach.principals,
			Addr: o.addr, BeyondLoopback: o.reach.beyond, Why: why}
	}
	var closeRunner func()
	for _, name := range o.lend {
		if name != "run_code" {
			closeLauncher()
			return fail(usageError("--lend %q: the host tool there is to lend is run_code", name))
		}
		if closeRunner != nil {
			continue
		}
		jail, err := o.caps.jail()
		if err != nil {
			closeLauncher()
			return fail(err)
		}
		r, _, err := doorRunner(ctx, o.runner, local.Options{Jail: jail, Events: toBus}, o.reach, o.allowUnjailed, warn)
		if err != nil {
			closeLauncher()
			return fail(err)
		}
		stateLimits(r, true, warn)
		closeRunner = func() {}
		if c, ok := r.(interface{ Close(context.Context) error }); ok {
			closeRunner = func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = c.Close(ctx)
			}
		}
		d.lent = append(d.lent, code.NewTool(r, code.ToolOptions{Scope: toolsession.ScopeCall})) // a lent call honours the call scope only
	}
	if d.lent, err = withCheckIns(d.lent, o.checkIns); err != nil {
		closeLauncher()
		if closeRunner != nil {
			closeRunner()
		}
		return fail(err)
	}
	closeCloner, err := withCloner(ctx, o, &d, why, toBus)
	if err != nil {
		closeLauncher()
		if closeRunner != nil {
			closeRunner()
		}
		return fail(err)
	}
	d.close = func() {
		if closeRunner != nil {
			closeRunner()
		}
		closeCloner()
		closeLauncher()
	}
	return d, nil
}

// busLater forwards events to the bus once serve has made it, holding
// those sent before (the sweeps and limits of a start), up to a bound.
type busLater struct {
	warn io.Writer

	mu      sync.Mutex
	bus     *event.Bus
	held    []event.Event
	dropped int
}

// maxHeldEvents bounds what busLater holds before the bus exists: a
// start sends a handful.
const maxHeldEvents = 256

func (b *busLater) export(e event.Event) {
	b.mu.Lock()
	bus := b.bus
	if bus == nil {
		if len(b.held) < maxHeldEvents {
			b.held = append(b.held, e)
		} else {
			b.dropped++
		}
	}
	b.mu.Unlock()
	if bus != nil {
		bus.Export(e)
	}
}

// bind hands over the bus, and the events held for it.
func (b *busLater) bind(bus *event.Bus) {
	b.mu.Lock()
	held, dropped := b.held, b.dropped
	b.bus, b.held = bus, nil
	b.mu.Unlock()
	for _, e := range held {
		bus.Export(e)
	}
	if dropped > 0 {
		fmt.Fprintf(b.warn, "agentry serve: %d events sent before the event bus existed were dropped\n", dropped)
	}
}

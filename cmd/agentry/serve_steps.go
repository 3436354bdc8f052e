package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/internal/undo"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/native"
)

// server is one `agentry serve` being built and run: each step of build
// fills in a part and pushes how to give it back on one cleanup stack,
// which a failed build unwinds and a finished serve runs after draining.
type server struct {
	o              serveOptions
	stdout, stderr io.Writer
	undo           undo.Stack

	auth      host.Authenticator
	generated string // the token made when there is no tokens file, shown once
	deps      serveDeps
	bus       *event.Bus
	router    *host.EventSink
	prices    *price.Table
	budgets   *host.Budgets
	// budgetsSeen is the --budgets file as last read (see followBudgets).
	budgetsSeen budgetsFile
	store       *sqlstore.Store
	reg         *provider.Registry
	inst        *provider.Instance
	agents      []host.Agent // with agent profiles: one per profile
	ln          net.Listener
	leases      host.Leases
	host        *host.Host

	// reloads are what a reload applies (see onReload); running holds
	// the values they run with.
	reloads []reloadable
	running map[string]string
}

// runServe serves until a signal arrives on sig, then drains. A second
// signal calls forceExit.
func runServe(ctx context.Context, o serveOptions, stdout, stderr io.Writer, sig <-chan os.Signal, forceExit func()) error {
	if err := o.check(); err != nil {
		return err
	}
	prices, err := loadPrices(o.prices)
	if err != nil {
		return usageError("--prices: %v", err)
	}
	budgets, sum, err := loadBudgets(o.budgets)
	if err != nil {
		return usageError("--budgets: %v", err)
	}
	s := &server{o: o, stdout: stdout, stderr: stderr, prices: prices, budgets: budgets, running: map[string]string{}}
	s.budgetsSeen = budgetsFile{path: o.budgets, sum: sum}
	if err := s.build(ctx); err != nil {
		return err
	}
	return s.serve(sig, forceExit)
}

// check refuses options that cannot work before anything is opened.
func (o *serveOptions) check() error {
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return usageError("--addr %q is not host:port (for example 127.0.0.1:8080)", o.addr)
	}
	if o.drain <= 0 || o.teardown <= 0 || o.turnTimeout <= 0 {
		return usageError("--drain, --teardown and --turn-timeout must be positive durations (for example 30s)")
	}
	if o.maxLive < 0 {
		return usageError("--max-live-tool-sessions must not be negative")
	}
	if o.advertise != "" {
		if _, err := host.ParseReplicaURL(o.advertise); err != nil {
			return usageError("--advertise: %v", err)
		}
	}
	if o.lease < 0 || o.forwardTimeout < 0 {
		return usageError("--lease and --forward-timeout must be positive durations (for example 15s and 5s)")
	}
	if o.lease == 0 {
		o.lease = host.DefaultLeaseTTL
	}
	return nil
}

// build runs serve's construction steps in order; when one fails, what
// the earlier ones acquired is given back, newest first.
func (s *server) build(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = s.undo.Undo() // each step reports its own trouble on stderr
		}
	}()
	for _, step := range []func(context.Context) error{
		s.authenticate,
		s.buildDeps,
		s.openBus,
		s.openStore,
		s.openAgent,
		s.listen,
		s.openLeases,
		s.newHost,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// authenticate builds the host's authenticator, and picks the agent.
func (s *server) authenticate(ctx context.Context) error {
	auth, generated, err := serveAuth(ctx, &s.o, s.stderr)
	if err != nil {
		return err
	}
	s.auth, s.generated = auth, generated
	if s.o.tokensFile != nil {
		s.followTokens()
	}
	if s.o.agent == "" {
		s.o.agent = "native"
	}
	if s.o.agentFlagErr != nil {
		return s.o.agentFlagErr
	}
	if s.o.agent != "native" && s.o.agent != "acp" {
		return usageError("--agent %q: use native or acp", s.o.agent)
	}
	if s.o.temporal != "" && s.o.agent == "acp" {
		return usageError("--temporal runs agentry's own agent's turns as workflows; it does not apply to --agent acp")
	}
	return nil
}

// buildDeps builds what the agent runs with: model, tools, event sinks.
func (s *server) buildDeps(ctx context.Context) error {
	deps, err := buildServeDeps(ctx, s.o, s.stderr)
	if err != nil {
		return err
	}
	s.deps = deps
	s.undo.PushFunc(deps.close)
	if s.deps.keys, err = s.o.creds.keyring(); err != nil {
		return err
	}
	return nil
}

// openBus makes the one bus for everything: the host's events, the
// provider's, the agent's; the events file and the router hear it.
func (s *server) openBus(context.Context) error {
	s.bus = event.NewBus(event.BusOptions{OnError: func(err error) { fmt.Fprintf(s.stderr, "agentry serve: events: %v\n", err) }})
	s.undo.PushFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*s.o.teardown+5*time.Second)
		defer cancel()
		_ = s.bus.Close(ctx)
	})
	for _, sk := range s.deps.sinks {
		_ = s.bus.Add(sk, event.Filter{})
	}
	s.router = host.NewEventSink()
	_ = s.bus.Add(s.router, s.router.Filter())
	if s.deps.bind != nil {
		s.deps.bind(s.bus)
	}
	return nil
}

// openStore opens the conversation store; the host owns it once made.
func (s *server) openStore(ctx context.Context) error {
	st, err := openStore(ctx, s.o.store)
	if err != nil {
		return failure(err)
	}
	s.store = st
	s.undo.Push(func() error {
		if s.host != nil {
			return nil // the host's Shutdown closed it
		}
		return st.Close()
	})
	if s.deps.unjailed != nil {
		s.bus.Export(event.Event{Type: typeUnjailedServing, Payload: s.deps.unjailed})
	}
	return nil
}

// openAgent opens the provider registry and the one instance every
// conversation talks to: durable (--temporal), an ACP agent, or native.
func (s *server) openAgent(ctx context.Context) error {
	o, d := s.o, s.deps
	opts := []provider.Option{provider.WithEvents(s.bus.Export), provider.WithCleanupTimeout(o.teardown)}
	if len(d.profiles) > 0 {
		return s.openProfiles(ctx, opts)
	}
	var err error
	switch {
	case o.temporal != "":
		var closeTemporal func()
		s.reg, s.inst, closeTemporal, err = openDurable(ctx, o, s.store, d.model, d.tools, s.bus.Export, s.stderr, opts...)
		if err == nil {
			s.undo.PushFunc(closeTemporal)
		}
	case o.agent == "acp":
		s.reg, s.inst, err = openACP(ctx, d.launcher, "acp", d.acpConfig, s.bus.Export, opts...)
	default:
		s.reg, s.inst, err = native.Open(ctx, native.Config{Store: native.HostStore(s.store), TurnRunIDs: true, Agent: native.Fixed(agent.Options{
			ID:              "agentry-serve",
			Model:           d.model,
			Tools:           d.tools,
			Routes:          []agent.Route{{Sink: s.bus, Filter: event.Filter{Tier: event.TierFull}}},
			TeardownTimeout: o.teardown,
			MaxLiveSessions: o.maxLive,
		})}, opts...)
	}
	if err != nil {
		return failure(err)
	}
	s.undo.PushFunc(s.disposer(s.reg))
	return nil
}

// disposer disposes reg once serve is done with it.
func (s *server) disposer(reg *provider.Registry) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*s.o.teardown+5*time.Second)
		defer cancel()
		if err := reg.Dispose(ctx); err != nil {
			fmt.Fprintf(s.stderr, "agentry serve: closing the agent: %v\n", err)
		}
	}
}

// listen opens the listening socket.
func (s *server) listen(context.Context) error {
	ln, err := net.Listen("tcp", s.o.addr)
	if err != nil {
		return failure(fmt.Errorf("listening on %s: %w", s.o.addr, err))
	}
	s.ln = ln
	s.undo.PushFunc(func() { _ = ln.Close() })
	return nil
}

// openLeases takes conversation leases when replicas share a store.
func (s *server) openLeases(ctx context.Context) error {
	leases, err := replicaLeases(ctx, s.o, s.store, s.ln.Addr())
	s.leases = leases
	return err
}

// newHost builds the host over everything opened so far.
func (s *server) newHost(context.Context) error {
	o, d := s.o, s.deps
	opt := host.Options{
		Provider: s.inst, Store: s.store, Auth: s.auth, Bus: s.bus, EventSink: s.router, Leases: s.leases,
		MaxTurns: o.maxTurns, MaxTurnsPerPrincipal: o.maxTurnsPerPrincipal, MaxConversationsPerPrincipal: o.maxOpen,
		IdleEvict: o.idleEvict, CloseTimeout: 2 * o.teardown, TurnTimeout: o.turnTimeout, ForwardTimeout: o.forwardTimeout,
		HostTools: d.lent, WorkingDirectory: d.workingDir, SessionConfig: d.sessionConfig, DropWorkspace: d.dropWorkspace,
		WorkspaceMaxBytes: o.wsMaxBytes, WorkspaceMaxEntries: o.wsMaxEntries,
		Prices: s.prices, Budgets: s.budgets,
		CredentialKeys: d.keys, AgentCredentials: d.agentCreds, Cloner: d.cloner,
	}
	if d.keys != nil {
		opt.Credentials = s.store
	}
	if len(s.agents) > 0 {
		// Each agent has its provider, lent tools, sessions'
		// configuration and workspace; the host shares none of them.
		opt.Provider, opt.Agents, opt.DefaultAgent = nil, s.agents, o.defaultAgent
		opt.HostTools, opt.WorkingDirectory, opt.SessionConfig, opt.AgentCredentials = nil, nil, nil, nil
	}
	o.door.apply(&opt)
	h, err := host.New(opt)
	if err != nil {
		return usageError("%v", err)
	}
	s.host = h
	if s.o.budgets != "" {
		s.followBudgets()
	}
	return nil
}

// serve answers HTTP until the listener fails or a signal arrives, then
// drains (a second signal calls forceExit) and gives back everything
// build acquired.
func (s *server) serve(sig <-chan os.Signal, forceExit func()) error {
	defer func() { _ = s.undo.Undo() }()
	// No ReadTimeout: it would cut a large upload that keeps its pace; the
	// host holds every body to a rate floor instead (--body-min-rate).
	srv := &http.Server{Handler: s.host, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(s.ln) }()

	printServing(s.stdout, s.o, "http://"+s.ln.Addr().String(), s.leases, s.generated)
	if d := describeCredentials(s.deps.keys, s.deps.agentCreds); d != "" {
		fmt.Fprintf(s.stdout, "agentry serve: %s\n", d)
	}

	if err := s.await(served, sig); err != nil {
		_ = s.host.Shutdown(context.Background())
		return failure(fmt.Errorf("serving: %w", err))
	}
	stopForce := make(chan struct{})
	defer close(stopForce)
	go func() {
		for {
			select {
			case sg := <-sig:
				if sg == syscall.SIGHUP {
					continue // while draining, a reload is not a second signal
				}
				fmt.Fprintf(s.stderr, "agentry serve: %v again: exiting now, without draining\n", sg)
				forceExit()
				return
			case <-stopForce:
				return
			}
		}
	}()

	dctx, cancel := context.WithTimeout(context.Background(), s.o.drain)
	defer cancel()
	shutErr := s.host.Shutdown(dctx)
	sctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		shutErr = errors.Join(shutErr, err)
	}
	_ = s.undo.Undo()
	if shutErr != nil {
		return failure(shutErr)
	}
	fmt.Fprintln(s.stderr, "agentry serve: stopped; every tool session is closed")
	return nil
}

// await serves until the listener fails (its error returned) or a
// signal to stop arrives (then readiness fails from here on: nil). A
// SIGHUP, or a change to the configuration file, reloads meanwhile.
func (s *server) await(served <-chan error, sig <-chan os.Signal) error {
	var poll <-chan time.Time
	if s.o.conf != nil || s.o.budgets != "" {
		t := time.NewTicker(configPoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case err := <-served:
			return err
		case <-poll:
			switch {
			case s.o.conf != nil && s.o.conf.configChanged():
				s.reload(s.o.conf.file.path + " changed")
			case s.budgetsChanged():
				s.reload(s.budgetsSeen.path + " changed")
			}
		case sg := <-sig:
			if sg == syscall.SIGHUP {
				s.reload("SIGHUP")
				continue
			}
			s.host.Drain()
			fmt.Fprintf(s.stderr, "agentry serve: %v: draining for up to %s (signal again to exit at once)\n", sg, s.o.drain)
			return nil
		}
	}
}

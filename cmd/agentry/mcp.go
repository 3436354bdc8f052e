package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
	"github.com/agentry-dev/agentry/toolsession"
)

func init() { commands = append(commands, newMCPCmd) }

// mcpOptions are the flags of `agentry mcp`.
type mcpOptions struct {
	runner, http, tokens string
	caps                 sessionCaps
	drain, teardown      time.Duration
	maxCalls             int
	allowUnjailed        bool
	sinks                sinkFlags
	oidc                 oidcFlags

	// For tests: the transport to serve instead of stdio, and a hook told
	// the HTTP listener's address once it listens.
	transport mcp.Transport
	listening func(addr string)
}

// mcpInstructions is what MCP clients may show their model about the
// server.
const mcpInstructions = "agentry serves run_code: it runs a Python program and returns what it printed. " +
	"Every call starts in a fresh interpreter that is closed when the call ends, so do all the work in one call. " +
	"Compute over data rather than pasting it: print only the answer, a summary or a small slice."

func newMCPCmd() *cobra.Command {
	var o mcpOptions
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve run_code to MCP clients (IDEs, desktop assistants) over stdio or HTTP",
		Long: `Serve the run_code tool over the Model Context Protocol, so any MCP client can
compute with it. Each call runs in its own Python interpreter (scope call),
jailed with bubblewrap where it can be; the interpreter closes when the call
ends, and the close is recorded in the events file.

By default it speaks MCP on stdin/stdout, the way a client launches a local
server: stdout carries only protocol messages, and agentry's own messages go
to stderr. With --http it serves streamable HTTP at http://ADDR/mcp instead.
Without --tokens or --oidc-issuer, --http listens on loopback only and
callers have no identity; with either, every request needs Authorization:
Bearer <token>, and the token's tenant and principal reach the tool. The
tokens file is the one agentry serve reads (docs/host.md): lines of
"sha256:<hex digest of the token> <tenant> <principal>". With --oidc-issuer
a JWT from that OpenID provider is accepted too (docs/host.md#identity);
when the provider cannot be reached to check one, the answer is 503.

SIGINT or SIGTERM: new calls are refused (HTTP answers 503), calls in flight
may finish within --drain and are then cancelled, every interpreter closes,
and the events file is flushed. Exit status 0 after a clean stop, 1 when
something failed, 2 for a usage error.`,
		Example: `  agentry mcp
  agentry mcp --events ~/.agentry/mcp.ndjson
  agentry mcp --http 127.0.0.1:8765
  agentry mcp --http 0.0.0.0:8765 --tokens tokens.txt

  # Claude Code
  claude mcp add agentry -- agentry mcp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.oidc.check(cmd.Flags()); err != nil {
				return err
			}
			return runMCP(cmd.Context(), o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.runner, "runner", "", "where the code runs: "+runnerKinds+" (default: the interpreter, jailed when bubblewrap can)")
	o.caps.add(f)
	f.StringVar(&o.http, "http", "", "serve streamable HTTP on this host:port (at /mcp) instead of stdio")
	f.StringVar(&o.tokens, "tokens", "", "with --http: the tokens file whose bearer tokens callers must present (as agentry serve reads it)")
	o.oidc.add(f, false)
	f.DurationVar(&o.drain, "drain", 10*time.Second, "on a signal, how long calls in flight may finish before they are cancelled")
	f.DurationVar(&o.teardown, "teardown", toolsession.DefaultTimeout, "bound on closing each interpreter")
	f.IntVar(&o.maxCalls, "max-calls", mcpserve.DefaultMaxCalls, "calls served at once; a call past it gets a tool error naming this bound, without running")
	f.BoolVar(&o.allowUnjailed, "allow-unjailed", false, "with --http: serve several principals, or beyond loopback, even though the code would run unjailed (without bubblewrap); DANGEROUS")
	o.sinks.add(cmd)
	return cmd
}

// isLoopbackAddr reports whether a host:port can be reached only from this
// machine.
func isLoopbackAddr(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// describeRunner says in words where code runs, for the log.
func describeRunner(r code.Runner) string {
	switch r.ID() {
	case "local-interpreter+bwrap":
		return "a persistent Python interpreter, jailed with bubblewrap"
	case "local-interpreter":
		return "a persistent Python interpreter, UNJAILED (with this user's access to files and the network)"
	case "local-process+bwrap":
		return "a process per execute, jailed with bubblewrap"
	case "local-process":
		return "a process per execute, UNJAILED (with this user's access to files and the network)"
	}
	return "runner " + r.ID()
}

func runMCP(ctx context.Context, o mcpOptions, stderr io.Writer) error {
	if o.drain <= 0 || o.teardown <= 0 {
		return usageError("--drain and --teardown must be positive durations (for example 10s)")
	}
	if o.maxCalls < 0 {
		return usageError("--max-calls must not be negative (0 takes the default, %d)", mcpserve.DefaultMaxCalls)
	}
	if o.allowUnjailed && o.http == "" {
		return usageError("--allow-unjailed needs --http: over stdio the client that started agentry is the only caller")
	}
	reach := exposure{command: "mcp", addr: o.http, beyond: o.http != "" && !isLoopbackAddr(o.http), tokens: o.tokens, principals: 1, oidc: o.oidc.issuer}
	auth, err := mcpAuth(ctx, o, &reach, stderr)
	if err != nil {
		return err
	}

	jail, err := o.caps.jail()
	if err != nil {
		return err
	}
	runner, unjailed, err := doorRunner(ctx, o.runner, local.Options{Jail: jail}, reach, o.allowUnjailed, stderr)
	if err != nil {
		return err
	}
	stateLimits(runner, false, stderr)
	fmt.Fprintf(stderr, "agentry mcp: run_code runs in %s, a fresh one per call (scope call)\n", describeRunner(runner))

	sinks, closeSinks, err := o.sinks.open(ctx, stderr)
	if err != nil {
		return failure(err)
	}
	var bus *event.Bus
	if len(sinks) > 0 {
		bus = event.NewBus(event.BusOptions{OnError: func(err error) { fmt.Fprintf(stderr, "agentry mcp: events: %v\n", err) }})
		for _, s := range sinks {
			if err := bus.Add(s, event.Filter{}); err != nil {
				_ = closeSinks(context.WithoutCancel(ctx))
				return failure(err)
			}
		}
		if unjailed != nil {
			bus.Export(event.Event{Type: typeUnjailedServing, Payload: unjailed})
		}
	}
	opt := mcpserve.Options{
		Name:            "agentry",
		Version:         versionString(),
		Instructions:    mcpInstructions,
		TeardownTimeout: o.teardown,
		MaxCalls:        o.maxCalls,
		OnError:         func(err error) { fmt.Fprintf(stderr, "agentry mcp: %s\n", oneLine(err.Error())) },
	}
	if bus != nil {
		opt.Sink = bus
	}
	srv, err := mcpserve.New([]tool.Tool{code.NewTool(runner, code.ToolOptions{Scope: toolsession.ScopeCall})}, opt)
	if err != nil {
		_ = closeSinks(context.WithoutCancel(ctx))
		return failure(err)
	}

	var serveErr error
	if o.http != "" {
		serveErr = serveMCPHTTP(ctx, o, srv, auth, stderr)
	} else {
		serveErr = serveMCPStdio(ctx, o, srv, stderr)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.teardown)
	defer cancel()
	var closeErr error
	if bus != nil {
		closeErr = bus.Close(cctx)
	}
	if err := errors.Join(serveErr, closeErr); err != nil {
		return failure(err)
	}
	fmt.Fprintln(stderr, "agentry mcp: stopped; every interpreter is closed")
	return nil
}

// mcpAuth builds the HTTP door's authenticator from --tokens and
// --oidc-* (both in a chain, the tokens file first): nil over stdio, or
// on loopback with neither. It counts the tokens file's principals into
// reach.
func mcpAuth(ctx context.Context, o mcpOptions, reach *exposure, stderr io.Writer) (mcpserve.Authenticator, error) {
	if o.http == "" {
		for _, f := range []struct {
			name  string
			given bool
		}{{"--tokens", o.tokens != ""}, {"--oidc-issuer", o.oidc.set()}} {
			if f.given {
				return nil, usageError("%s needs --http: over stdio the client that started agentry is the only caller", f.name)
			}
		}
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(o.http); err != nil {
		return nil, usageError("--http %q is not host:port (for example 127.0.0.1:8765)", o.http)
	}
	if o.tokens == "" && !o.oidc.set() && !isLoopbackAddr(o.http) {
		return nil, usageError("refusing to serve %s without --tokens or --oidc-issuer: anyone who reaches it could run code here; "+
			"pass --tokens FILE or --oidc-issuer URL, or listen on 127.0.0.1", o.http)
	}
	var chain host.Chain
	if o.tokens != "" {
		t, err := host.LoadTokens(o.tokens)
		if err != nil {
			return nil, usageError("--tokens: %v", err)
		}
		if t.Len() == 0 {
			return nil, usageError("--tokens %s admits nobody; add a line \"sha256:<hex digest> <tenant> <principal>\" (agentry token makes one)", o.tokens)
		}
		chain = append(chain, t)
		reach.principals = len(t.Owners())
	}
	idp, err := o.oidc.open(ctx, stderr, "mcp")
	if err != nil {
		return nil, err
	}
	if idp != nil {
		chain = append(chain, idp)
	}
	if len(chain) == 0 {
		return nil, nil
	}
	return chain.Identity, nil
}

// stopMCP refuses new calls, lets calls in flight finish within --drain,
// cancels the rest and closes every session still held.
func stopMCP(ctx context.Context, o mcpOptions, srv *mcpserve.Server) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.drain)
	defer cancel()
	return srv.Shutdown(dctx)
}

func serveMCPStdio(ctx context.Context, o mcpOptions, srv *mcpserve.Server, stderr io.Writer) error {
	t := o.transport
	if t == nil {
		t = &mcp.StdioTransport{}
	}
	// The session outlives a signal until the drain is over, so answers to
	// calls in flight still reach the client.
	sctx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, t) }()
	var err error
	select {
	case err = <-served:
		// The client went away (closed stdin): a normal end.
		if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
			err = nil
		}
		err = errors.Join(err, stopMCP(ctx, o, srv))
		return err
	case <-ctx.Done():
		fmt.Fprintf(stderr, "agentry mcp: %v: refusing new calls, draining for up to %s\n", context.Cause(ctx), o.drain)
	}
	err = stopMCP(ctx, o, srv)
	stopServing()
	<-served
	return err
}

func serveMCPHTTP(ctx context.Context, o mcpOptions, srv *mcpserve.Server, auth mcpserve.Authenticator, stderr io.Writer) error {
	h, err := srv.HTTPHandler(mcpserve.HTTPOptions{Authenticate: auth, RequireAuth: auth != nil})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	ln, err := net.Listen("tcp", o.http)
	if err != nil {
		_ = stopMCP(ctx, o, srv)
		return fmt.Errorf("listening on %s: %w", o.http, err)
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var who []string
	if o.tokens != "" {
		who = append(who, "bearer tokens from "+o.tokens)
	}
	if o.oidc.set() {
		who = append(who, o.oidc.describe())
	}
	if len(who) == 0 {
		who = append(who, "loopback only; callers have no identity")
	}
	fmt.Fprintf(stderr, "agentry mcp: serving streamable HTTP at http://%s/mcp (%s)\n", ln.Addr(), strings.Join(who, "; "))
	if o.listening != nil {
		o.listening(ln.Addr().String())
	}
	select {
	case err := <-served:
		_ = stopMCP(ctx, o, srv)
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
		fmt.Fprintf(stderr, "agentry mcp: %v: refusing new calls (503), draining for up to %s\n", context.Cause(ctx), o.drain)
	}
	err = stopMCP(ctx, o, srv)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.teardown)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil {
		_ = hs.Close()
	}
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider/acp"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/tool"
)

func init() { commands = append(commands, newServeCmd) }

// serveOptions are the flags of `agentry serve`. Every one has an offline
// default.
type serveOptions struct {
	addr, tokens, store, events, model, runner string
	prices, budgets                            string
	agent, advertise                           string
	temporal, temporalReplica                  string
	temporalNamespace, temporalQueue           string
	drain, teardown, idleEvict, lease          time.Duration
	turnTimeout                                time.Duration
	forwardTimeout                             time.Duration
	maxTurns, maxTurnsPerPrincipal, maxOpen    int
	maxLive                                    int
	wsMaxBytes                                 int64
	wsMaxEntries                               int
	caps                                       sessionCaps
	pool                                       int
	allowUnjailed                              bool
	checkIns                                   []string // tool names every call of which waits for a person
	acp                                        acpFlags
	workspaces                                 string
	lend                                       []string
	oidc                                       oidcFlags
	creds                                      credFlags
	cloneAllow                                 []string
	// profiles are the configuration file's agent profiles, served side
	// by side instead of --agent; defaultAgent names the default one.
	profiles     []agentProfile
	defaultAgent string
	door         doorFlags
	// agentFlagErr is the refusal of --agent-* flags that do not fit
	// --agent (worked out from which flags were given).
	agentFlagErr error

	// reach is whom the door admits, worked out from --addr and --tokens.
	reach exposure

	// configPath is --config; conf, once read, is the file and which
	// flags the command line set (the file cannot change those).
	configPath string
	conf       *serveConfig
	// tokensFile is the --tokens file's authenticator (a host.TokensFile
	// following its edits; a reload, on SIGHUP or a --config change, reads
	// it again).
	tokensFile *tokensAuth
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	return newServeCmdWith(&o)
}

// newServeCmdWith is newServeCmd with its flags bound to o, so that
// `agentry config check` reads a file into serve's own flags.
func newServeCmdWith(o *serveOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve an agent over HTTP to many people, each in their own sessions",
		Long: `Serve an agent over HTTP: conversations owned by whoever a bearer token
proves, turns answered in JSON or streamed as server-sent events, check-ins
answered with a decision, conversations kept in a store that outlives the
process. See docs/host.md for the API.

With no --tokens file, serve makes one token, prints it once, and listens on
loopback only. SIGTERM or SIGINT drains: new requests get 503, turns in flight
finish (within --drain), every tool session closes, the events file is
flushed. A second signal exits at once. The tokens file is read again when
it changes (checked every second). SIGHUP, which never stops serve, reloads
what can change while serving (the tokens file, and the --config file's
settings of it) and names what needs a restart.

` + modelHelp,
		Example: `  agentry serve
  agentry token --tenant acme --principal alice --tokens tokens.txt
  agentry serve --check-in run_code
  agentry serve --config agentry.toml
  agentry serve --addr 0.0.0.0:8080 --tokens tokens.txt --store postgres://agentry@db/agentry`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.readConfig(cmd.Flags()); err != nil {
				return err
			}
			sig := make(chan os.Signal, 2)
			signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer signal.Stop(sig)
			if err := checkInlineEnv(o.acp.env, true, nil); err != nil {
				return err
			}
			if err := o.takeProfiles(cmd.Flags()); err != nil {
				return err
			}
			if len(o.profiles) == 0 {
				o.agentFlagErr = checkAgentFlags(cmd.Flags(), o.agent, "workspaces", "lend", "agent-credential")
			}
			if o.wsMaxBytes < 0 || o.wsMaxEntries < 0 {
				return usageError("--workspace-max-bytes and --workspace-max-entries must not be negative (0 takes the default)")
			}
			if err := o.oidc.check(cmd.Flags()); err != nil {
				return err
			}
			if err := warnRenamed(cmd.Flags(), renamedServeFlags, cmd.ErrOrStderr()); err != nil {
				return err
			}
			return runServe(cmd.Context(), *o, cmd.OutOrStdout(), cmd.ErrOrStderr(), sig, func() { os.Exit(130) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.configPath, "config", "", "read serve's settings from this TOML file: each key a flag's name (max-turns = 8); flags given here override it; reloaded on change and SIGHUP (see docs/config.md)")
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "where to listen (host:port)")
	f.StringVar(&o.agent, "agent", "native", "the agent each conversation talks to: native (agentry's own agent, with --model and --runner) or acp (a coding agent over the Agent Client Protocol, jailed, with --agent-cmd)")
	o.acp.add(f)
	f.StringVar(&o.workspaces, "workspaces", "agentry-workspaces", "with --agent acp: the directory holding each conversation's workspace (kept across evictions and restarts, so a resumed conversation finds its files; removed when the conversation is closed)")
	f.StringArrayVar(&o.lend, "lend", nil, "with --agent acp: lend this host tool to every agent over MCP (repeat; run_code is the one there is: agentry's interpreter on --runner)")
	f.StringVar(&o.tokens, "tokens", "", "the tokens file (lines of \"sha256:<digest> <tenant> <principal>\"; make one with agentry token); without it serve makes one token and listens on loopback only")
	o.oidc.add(f, true)
	o.creds.add(f)
	f.StringArrayVar(&o.cloneAllow, "clone-allow", nil, "a host (or host:port) a new conversation may clone a git repository from (POST /v1/sessions {\"clone\"}) into its workspace (an ACP agent's, or the native agent's jailed interpreter's /work); git runs jailed, reaching that host alone (repeat)")
	f.StringVar(&o.store, "store", "agentry.db", "where conversations are kept: a SQLite file, or a postgres:// URL")
	f.StringVar(&o.events, "events", "events.ndjson", "the events file (NDJSON); empty for none")
	f.StringVar(&o.prices, "prices", "", "the price table each turn's cost is estimated with (JSON; docs/usage.md); default: the table agentry ships")
	f.StringVar(&o.budgets, "budgets", "", "caps per tenant and principal per UTC day and month (cost, tokens, turns, sandbox time) and per-principal turn rates (TOML; docs/usage.md); reloaded on change and SIGHUP")
	f.StringVar(&o.model, "model", defaultModel, "the model: scripted (offline: runs the code in each message), anthropic:MODEL, openai:MODEL or ollama:MODEL (below)")
	f.StringVar(&o.runner, "runner", "", "where model-written code runs: "+runnerKinds+" (default: the interpreter, jailed when bubblewrap can)")
	o.caps.add(f)
	f.IntVar(&o.pool, "pool", 4, "jailed interpreters kept started ahead of need (0: none); each is bound to a conversation only when taken, and never reused")
	f.DurationVar(&o.drain, "drain", 30*time.Second, "how long a shutdown lets turns in flight finish before cutting them")
	f.DurationVar(&o.teardown, "teardown", agent.DefaultTeardownTimeout, "bound on each tool-session cleanup")
	f.DurationVar(&o.idleEvict, "idle-evict", host.DefaultIdleEvict, "evict conversations idle this long from memory (their tool sessions close)")
	f.DurationVar(&o.turnTimeout, "turn-timeout", host.DefaultTurnTimeout, "bound on every turn: a turn still running then is interrupted and recorded timed_out (504 turn_timed_out)")
	f.IntVar(&o.maxTurns, "max-turns", host.DefaultMaxTurns, "turns running at once, across everyone")
	f.IntVar(&o.maxTurnsPerPrincipal, "max-turns-per-principal", host.DefaultMaxTurnsPerPrincipal, "turns running at once, per principal")
	f.IntVar(&o.maxOpen, "max-conversations-per-principal", host.DefaultMaxConversationsPerPrincipal, "open conversations per principal; past it creating one is refused (429)")
	f.IntVar(&o.maxLive, "max-live-tool-sessions", 256, "live tool sessions (interpreters) across the host; past it the coldest idle one is closed (reason evicted), and a turn that needs one more while all are busy waits, then fails with capacity")
	aliasRenamed(f, renamedServeFlags)
	f.Int64Var(&o.wsMaxBytes, "workspace-max-bytes", host.DefaultWorkspaceMaxBytes, "bound on the bytes of the files one workspace upload (PUT /v1/sessions/{id}/workspace) holds")
	f.IntVar(&o.wsMaxEntries, "workspace-max-entries", host.DefaultWorkspaceMaxEntries, "bound on the entries (files, directories, links) of one workspace upload")
	f.BoolVar(&o.allowUnjailed, "allow-unjailed", false, "serve several principals, or beyond loopback, even though model-written code would run unjailed (without bubblewrap); DANGEROUS: every principal's code can read the others' files and this process's secrets")
	o.door.add(f)
	f.StringArrayVar(&o.checkIns, "check-in", nil, "every call of this tool waits for a person's decision (repeat; e.g. --check-in run_code: no model-written code runs without a yes)")
	f.StringVar(&o.advertise, "advertise", "", "with a postgres:// store: the URL the other replicas reach this one at (default: the listen address; a wildcard host becomes this machine's hostname)")
	f.DurationVar(&o.lease, "lease", host.DefaultLeaseTTL, "with a postgres:// store: how long a conversation's ownership lease lasts unrenewed (renewed every third of it); a dead replica's conversations are taken over after it")
	f.DurationVar(&o.forwardTimeout, "forward-timeout", host.DefaultForwardTimeout, "with a postgres:// store: how long a request forwarded to the replica holding its conversation waits once that replica stops answering its health check, before it is answered 503 replica_unavailable (a replica that answers is waited for however long its turn takes)")
	f.StringVar(&o.temporal, "temporal", "", "run every turn as a durable workflow on the Temporal server at HOST:PORT (model calls retried, tool calls pinned to this replica, check-ins survive restarts); see docs/scale.md")
	f.StringVar(&o.temporalReplica, "temporal-replica", "", "with --temporal: this replica's name, the same across its restarts (its tool calls' task queue); default: hostname-PORT")
	f.StringVar(&o.temporalNamespace, "temporal-namespace", "default", "with --temporal: the Temporal namespace")
	f.StringVar(&o.temporalQueue, "temporal-task-queue", durable.DefaultTaskQueue, "with --temporal: the task queue every replica of this deployment shares (each replica's tool calls go to QUEUE@REPLICA); give deployments that share a namespace queues of their own")
	return cmd
}

// loopback reports whether addr's host can only be reached from this
// machine.
func loopback(addr string) bool {
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

// printServing says where serve listens, what it keeps, whom it admits,
// and the generated token (once), on stdout.
func printServing(stdout io.Writer, o serveOptions, url string, leases host.Leases, generated string) {
	fmt.Fprintf(stdout, "agentry serve: listening on %s (store %s", url, describeStore(o.store))
	if o.events != "" {
		fmt.Fprintf(stdout, ", events %s", o.events)
	}
	fmt.Fprintln(stdout, ")")
	signIn := "sign in with a token"
	if o.oidc.clientID != "" {
		signIn = "sign in at " + o.oidc.issuer + ", or with a token"
	}
	fmt.Fprintf(stdout, "agentry serve: the console is at %s/ (%s)\n", url, signIn)
	if len(o.profiles) > 0 {
		fmt.Fprintf(stdout, "agentry serve: agents %s; GET /v1/agents lists them\n", describeAgents(o.profiles, o.defaultAgent))
	}
	if o.oidc.set() {
		fmt.Fprintf(stdout, "agentry serve: accepting %s\n", o.oidc.describe())
	}
	if leases != nil {
		r := leases.Replica()
		fmt.Fprintf(stdout, "agentry serve: replica %s, reached by the others at %s; conversation leases of %s in postgres\n", r.ID, r.Address, leases.TTL())
	}
	if generated != "" {
		fmt.Fprintf(stdout, "agentry serve: no --tokens file, so this one token admits tenant \"local\", principal \"local\"; it is shown once and kept nowhere:\n\n    %s\n\n", generated)
		fmt.Fprintf(stdout, "  curl -s -X POST -H 'Authorization: Bearer %s' %s/v1/sessions\n", generated, url)
	}
}

// serveAuth builds the host's authenticator from --tokens and --oidc-*:
// the tokens file, the OpenID provider, or both in a chain (the tokens
// file first). With neither, it makes one token (returned to be shown
// once), and refuses to listen beyond loopback. It sets o.reach: whom the
// door admits, and o.tokensAuth: the tokens file's swappable
// authenticator.
func serveAuth(ctx context.Context, o *serveOptions, stderr io.Writer) (host.Authenticator, string, error) {
	o.reach = exposure{command: "serve", addr: o.addr, beyond: !loopback(o.addr), tokens: o.tokens, principals: 1, oidc: o.oidc.issuer}
	idp, err := o.oidc.open(ctx, stderr, "serve")
	if err != nil {
		return nil, "", err
	}
	if o.tokens == "" {
		if idp != nil {
			return idp, "", nil
		}
		if !loopback(o.addr) {
			return nil, "", usageError("refusing to listen on %s without a tokens file: anyone who reaches it would act as the one generated token's owner; "+
				"pass --tokens FILE (agentry token --tenant T --principal P --tokens FILE adds a line) or --oidc-issuer, or listen on 127.0.0.1", o.addr)
		}
		tok, line, err := host.GenerateToken(tool.Identity{Tenant: "local", Principal: "local"})
		if err != nil {
			return nil, "", failure(err)
		}
		t, err := host.ParseTokens(strings.NewReader(line))
		if err != nil {
			return nil, "", failure(err)
		}
		return t, tok, nil
	}
	tf, err := host.OpenTokensFile(o.tokens)
	if err != nil {
		return nil, "", usageError("--tokens: %v", err)
	}
	ta := newTokensAuth(o.tokens, tf)
	o.tokensFile = ta
	t := tf.Tokens()
	if t.Len() == 0 {
		return nil, "", usageError("--tokens %s admits nobody; add a line with agentry token --tenant T --principal P --tokens %s", o.tokens, o.tokens)
	}
	o.reach.principals = len(t.Owners())
	if idp != nil {
		return host.Chain{ta, idp}, "", nil
	}
	return ta, "", nil
}

// openStore opens the conversation store a DSN names: a postgres:// (or
// postgresql://) URL, or a SQLite file path ("sqlite:" in front is
// allowed).
func openStore(ctx context.Context, dsn string) (*sqlstore.Store, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return postgres.Open(ctx, dsn)
	case dsn == "":
		return nil, usageError("--store is empty; pass a SQLite file path (agentry.db) or a postgres:// URL")
	}
	return sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite:"))
}

// replicaLeases gives a postgres store's host its ownership leases (any
// number of replicas may share the store); a SQLite store's host is the
// only one and needs none.
func replicaLeases(ctx context.Context, o serveOptions, st *sqlstore.Store, listen net.Addr) (host.Leases, error) {
	if describeStore(o.store) != "postgres" {
		if o.advertise != "" {
			return nil, usageError("--advertise is for replicas sharing a postgres:// store; a SQLite store serves one process")
		}
		return nil, nil
	}
	adv := o.advertise
	if adv == "" {
		hostname, port, _ := net.SplitHostPort(listen.String())
		if ip := net.ParseIP(hostname); ip != nil && ip.IsUnspecified() {
			name, err := os.Hostname()
			if err != nil {
				return nil, usageError("listening on %s, serve cannot tell the other replicas where to reach it (no hostname: %v); pass --advertise http://HOST:PORT", listen, err)
			}
			hostname = name
		}
		adv = "http://" + net.JoinHostPort(hostname, port)
	}
	l, err := st.Leases(ctx, sqlstore.LeaseOptions{Replica: host.Replica{Address: adv}, TTL: o.lease})
	if err != nil {
		return nil, failure(err)
	}
	return l, nil
}

func describeStore(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return "postgres"
	}
	return dsn
}

// serveDeps are what the agent is built from.
type serveDeps struct {
	model llm.Model
	tools []tool.Tool
	sinks []event.Sink // the agent flushes and closes them at Shutdown
	// unjailed, when set, is the --allow-unjailed override to record.
	unjailed *unjailedServing
	// bind, when set, is given the agent's bus once the agent exists.
	bind func(*event.Bus)
	// close releases what building them opened, once the agent is done.
	close func()

	// With --agent acp: the launcher, the definition's configuration, the
	// host tools lent to agents, and each conversation's workspace.
	launcher      acp.Launcher
	acpConfig     json.RawMessage
	lent          []tool.Tool
	workingDir    func(tool.Identity, string) (string, error)
	dropWorkspace func(tool.Identity, string) error
	sessionConfig func(tool.Identity, string) json.RawMessage
	workspaceRoot string

	// keys seal people's credentials (--credentials-key-file; nil: none
	// kept); agentCreds are the ones each agent gets.
	keys       *host.Keyring
	agentCreds []host.AgentCredential
	// cloner clones repositories into new conversations (--clone-allow).
	cloner host.Cloner

	// profiles are what each agent profile runs with (a file with
	// [agents.NAME] profiles).
	profiles []profileDeps
}

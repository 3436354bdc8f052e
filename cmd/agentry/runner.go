package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/jail"
)

// sessionCaps are the --session-memory and --session-disk flags of run,
// serve and mcp: what one jailed session may use, all its processes
// together.
type sessionCaps struct{ memory, disk string }

func (c *sessionCaps) add(f *pflag.FlagSet) {
	f.StringVar(&c.memory, "session-memory", "1GiB", "memory cap of one jailed session, all its processes together (e.g. 512MiB, 2GiB)")
	f.StringVar(&c.disk, "session-disk", "1GiB", "what one jailed session's /work and /tmp may hold together (e.g. 256MiB)")
}

// jail is the jail these caps configure.
func (c *sessionCaps) jail() (*local.Jail, error) {
	j := &local.Jail{}
	for _, x := range []struct {
		flag, v string
		dst     *int64
	}{{"--session-memory", c.memory, &j.SessionMemory}, {"--session-disk", c.disk, &j.Disk}} {
		if x.v == "" {
			continue
		}
		n, err := jail.ParseSize(x.v)
		if err != nil {
			return nil, usageError("%s: %v", x.flag, err)
		}
		*x.dst = n
	}
	return j, nil
}

// stateLimits prints what a jailed runner cannot apply here (always) or
// its whole statement (when all is set), so no cap is missing quietly.
func stateLimits(r code.Runner, all bool, w io.Writer) {
	d, ok := r.(interface{ Describe() string })
	if !ok {
		return
	}
	s := d.Describe()
	if all || strings.Contains(s, "NOT APPLIED") {
		fmt.Fprintf(w, "agentry: code runner %s\n", s)
	}
}

// Runner kinds for --runner.
const (
	runnerProcess     = "process"     // a process per call, unjailed
	runnerInterpreter = "interpreter" // a persistent Python interpreter, unjailed
	runnerJail        = "jail"        // the persistent interpreter inside bubblewrap
	runnerKinds       = runnerProcess + ", " + runnerInterpreter + " or " + runnerJail
)

// newRunner builds the code runner that `agentry run`, `serve` and `mcp`
// run model-written code on. kind is one of runnerKinds, or "" for the
// default: the persistent interpreter, jailed where bubblewrap can build a
// jail. When it cannot, the default runs unjailed and says so on warn —
// loudly, never quietly — while an explicit "jail" refuses. opt.Jail, when
// set, configures the jail (it is ignored by the unjailed kinds). The
// unjailed fallback is for one user: doors that serve others build their
// runner with doorRunner, which refuses it.
func newRunner(ctx context.Context, kind string, opt local.Options, warn io.Writer) (code.Runner, error) {
	r, why, err := pickRunner(ctx, kind, opt)
	if err == nil && kind == "" && why != "" {
		fmt.Fprintf(warn, "agentry: WARNING: %s\n"+
			"agentry: WARNING: model-written code will run UNJAILED, with this user's access to files and the network.\n"+
			"agentry: this fallback is for a single user; serving several principals, or beyond loopback, refuses it.\n"+
			"agentry: pass --runner jail to refuse instead, or --runner interpreter to accept this and silence the warning.\n", why)
	}
	return r, err
}

// pickRunner builds the runner of kind. unjailed is empty when model code
// runs in the jail, and otherwise says why it does not.
func pickRunner(ctx context.Context, kind string, opt local.Options) (r code.Runner, unjailed string, err error) {
	jail := opt.Jail
	if jail == nil {
		jail = &local.Jail{}
	}
	switch kind {
	case runnerProcess:
		opt.Jail = nil
		return local.New(opt), "--runner process does not jail", nil
	case runnerInterpreter:
		opt.Jail = nil
		return local.NewInterpreter(opt), "--runner interpreter does not jail", nil
	case runnerJail:
		if err := local.CheckJail(ctx, *jail); err != nil {
			return nil, "", failure(fmt.Errorf("--runner jail: %w", err))
		}
		opt.Jail = jail
		return local.NewInterpreter(opt), "", nil
	case "":
		if err := local.CheckJail(ctx, *jail); err != nil {
			opt.Jail = nil
			return local.NewInterpreter(opt), err.Error(), nil
		}
		opt.Jail = jail
		return local.NewInterpreter(opt), "", nil
	}
	return nil, "", usageError("unknown --runner %q; use %s", kind, runnerKinds)
}

// exposure is whom a door admits: the principals its tokens file names,
// and whether it listens beyond loopback.
type exposure struct {
	command    string // "serve" or "mcp"
	addr       string
	beyond     bool // addr is reachable from other machines
	tokens     string
	principals int
	oidc       string // the --oidc-issuer whose people it admits, if any
}

// several reports whether the door admits more than one principal.
func (x exposure) several() bool { return x.principals > 1 || x.beyond || x.oidc != "" }

func (x exposure) describe() string {
	var parts []string
	if x.principals > 1 {
		parts = append(parts, fmt.Sprintf("%d principals (--tokens %s)", x.principals, x.tokens))
	}
	if x.oidc != "" {
		parts = append(parts, "everyone "+x.oidc+" signs in (--oidc-issuer)")
	}
	if x.beyond {
		parts = append(parts, fmt.Sprintf("%s, beyond loopback", x.addr))
	}
	return strings.Join(parts, " on ")
}

// doorRunner is newRunner for a door that serves others (agentry serve,
// agentry mcp --http). When model code would run unjailed and the door
// admits several principals or listens beyond loopback, it refuses,
// naming bubblewrap and --allow-unjailed; with allow, it warns loudly and
// returns the event to record. A door for one principal on loopback keeps
// the single-user fallback.
func doorRunner(ctx context.Context, kind string, opt local.Options, x exposure, allow bool, warn io.Writer) (code.Runner, *unjailedServing, error) {
	if !x.several() {
		r, err := newRunner(ctx, kind, opt, warn)
		return r, nil, err
	}
	r, why, err := pickRunner(ctx, kind, opt)
	if err != nil || why == "" {
		return r, nil, err
	}
	if !allow {
		return nil, nil, usageError("refusing to serve %s with model-written code UNJAILED (%s): every principal's code would run as this user, "+
			"able to read the others' files, the tokens file, the store and this process's environment; "+
			"install the jail (Debian: apt-get install bubblewrap) and use the default runner or --runner jail, "+
			"or pass --allow-unjailed to accept that risk", x.describe(), why)
	}
	fmt.Fprintf(warn, "agentry %s: WARNING: --allow-unjailed: serving %s with model-written code UNJAILED (%s).\n"+
		"agentry %s: WARNING: any principal's code runs as this user: it can read every other principal's files, the tokens file,\n"+
		"agentry %s: WARNING: the store and this process's environment (its secrets), and reach this process's own port.\n"+
		"agentry %s: WARNING: install bubblewrap (Debian: apt-get install bubblewrap) and drop --allow-unjailed to jail it.\n",
		x.command, x.describe(), why, x.command, x.command, x.command)
	return r, &unjailedServing{Command: x.command, RunnerID: r.ID(), Principals: x.principals,
		Addr: x.addr, BeyondLoopback: x.beyond, Why: why}, nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
	"github.com/agentry-dev/agentry/internal/sandbox"
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
		n, err := sandbox.ParseSize(x.v)
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
// set, configures the jail (it is ignored by the unjailed kinds).
func newRunner(ctx context.Context, kind string, opt local.Options, warn io.Writer) (code.Runner, error) {
	jail := opt.Jail
	if jail == nil {
		jail = &local.Jail{}
	}
	switch kind {
	case runnerProcess:
		opt.Jail = nil
		return local.New(opt), nil
	case runnerInterpreter:
		opt.Jail = nil
		return local.NewInterpreter(opt), nil
	case runnerJail:
		if err := local.CheckJail(ctx, *jail); err != nil {
			return nil, failure(fmt.Errorf("--runner jail: %w", err))
		}
		opt.Jail = jail
		return local.NewInterpreter(opt), nil
	case "":
		if err := local.CheckJail(ctx, *jail); err != nil {
			fmt.Fprintf(warn, "agentry: WARNING: %v\n"+
				"agentry: WARNING: model-written code will run UNJAILED, with this user's access to files and the network.\n"+
				"agentry: pass --runner jail to refuse instead, or --runner interpreter to accept this and silence the warning.\n", err)
			opt.Jail = nil
			return local.NewInterpreter(opt), nil
		}
		opt.Jail = jail
		return local.NewInterpreter(opt), nil
	}
	return nil, usageError("unknown --runner %q; use %s", kind, runnerKinds)
}

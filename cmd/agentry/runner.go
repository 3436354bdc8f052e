package main

import (
	"context"
	"fmt"
	"io"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/code/local"
)

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

package jail

import (
	"context"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// agentSweeper is the RunnerID of the agent profile's sweeps.
const agentSweeper = "agent-jail"

// sweep removes what agentry processes that no longer exist left behind —
// the cells under dir whose names start with prefix, unmounting the tmpfs
// in them first, and, when cgroups is set, their control groups, killing
// what is still inside — and reports each sweep to emit as an
// agentry.runner.swept event. It never touches what a live process owns.
func sweep(ctx context.Context, dir, prefix, runnerID string, cgroups bool, emit func(event.Event)) {
	report := func(what string, sw swept) {
		p := &RunnerSwept{RunnerID: runnerID, What: what, Removed: len(sw.Paths), Failed: len(sw.Failed)}
		for _, o := range sw.Owners {
			p.Owners = append(p.Owners, o.Pid)
		}
		if len(sw.Failed) > 0 {
			p.Error = sw.Failed[0].Error()
		}
		if emit != nil {
			emit(event.Event{Type: TypeRunnerSwept, Payload: p, Meta: event.Meta{Time: time.Now()}})
		}
	}
	report("session-dirs", sweepDirs(dir, prefix))
	if cgroups {
		report("cgroups", sweepCgroups(ctx))
	}
}

package local

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
	"github.com/agentry-dev/agentry/tool"
)

// unjailedGap is what an unjailed runner cannot give its sessions.
var unjailedGap = jail.Gap{Limit: "jail", Why: "Options.Jail is not set: the code runs as this process's user, with its files and network, and no session caps"}

// start readies the runner for its first session: it sweeps what a killed
// predecessor left, proves the jail (when there is one) and states, once,
// what the sessions get and what they cannot get here.
func (s *settings) start(ctx context.Context, runnerID string) error {
	s.sweep(ctx, runnerID)
	if s.jail != nil {
		if err := s.jail.Ready(ctx); err != nil {
			return err
		}
	}
	s.statedOnce.Do(func() {
		applied, gaps := s.limits()
		s.emit(jail.TypeRunnerLimits, &jail.RunnerLimits{RunnerID: runnerID, Description: s.describe(), Applied: applied, NotApplied: gaps})
	})
	return nil
}

func (s *settings) limits() ([]string, []jail.Gap) {
	base := []string{"environment allowlist", fmt.Sprintf("timeout %s per execution", s.timeout), fmt.Sprintf("output cut at %d characters per stream", s.maxChars)}
	if s.jail == nil {
		return base, []jail.Gap{unjailedGap}
	}
	return append(base, s.jail.Applied()...), s.jail.Gaps()
}

func (s *settings) describe() string {
	if s.jail == nil {
		return "NOT jailed (" + unjailedGap.Why + ")"
	}
	return s.jail.Describe()
}

// describeRunner is a runner's Describe: its id and the statement, after
// readying it (bounded) when it has not started yet.
func (s *settings) describeRunner(id string, err error) string {
	if err != nil {
		return id + ": misconfigured: " + err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.start(ctx, id); err != nil {
		return id + ": cannot start: " + err.Error()
	}
	return id + ": " + s.describe()
}

func (s *settings) emit(t event.Type, payload any) {
	if s.events != nil {
		s.events(event.Event{Type: t, Payload: payload, Meta: event.Meta{Time: time.Now()}})
	}
}

// sweep removes, once per runner, what agentry processes that no longer
// exist left in the session base directory (and, jailed, in the control
// groups), and reports each sweep as an event. It never touches what a
// live process owns.
func (s *settings) sweep(ctx context.Context, runnerID string) {
	s.sweepOnce.Do(func() { s.jail.Sweep(ctx, s.dir, runnerID, s.events) })
}

// appendNote adds a line for the model to the end of stderr.
func appendNote(stderr, note string) string {
	if note == "" {
		return stderr
	}
	if stderr != "" && !strings.HasSuffix(stderr, "\n") {
		stderr += "\n"
	}
	return stderr + note
}

// sandboxUsage is what an execute used by the cell's control group: the
// CPU time since cpuBefore (read as the execute began) and the cell's
// peak memory; nil for a cell without a control group that counts.
func sandboxUsage(cell *jail.Cell, cpuBefore time.Duration) *tool.SandboxUsage {
	cpu, peak := cell.Usage()
	if cpu == 0 && peak == 0 {
		return nil
	}
	return &tool.SandboxUsage{CPU: max(cpu-cpuBefore, 0), PeakMemory: peak}
}

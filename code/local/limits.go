package local

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/internal/sandbox"
)

// unjailedGap is what an unjailed runner cannot give its sessions.
var unjailedGap = Gap{Limit: "jail", Why: "Options.Jail is not set: the code runs as this process's user, with its files and network, and no session caps"}

// start readies the runner for its first session: it sweeps what a killed
// predecessor left, proves the jail (when there is one) and states, once,
// what the sessions get and what they cannot get here.
func (s *settings) start(ctx context.Context, runnerID string) error {
	s.sweep(ctx, runnerID)
	if s.jail != nil {
		if err := s.jail.ready(ctx); err != nil {
			return err
		}
	}
	s.statedOnce.Do(func() {
		applied, gaps := s.limits()
		p := &event.RunnerLimits{RunnerID: runnerID, Description: s.describe(), Applied: applied}
		for _, g := range gaps {
			p.NotApplied = append(p.NotApplied, event.LimitGap{Limit: g.Limit, Why: g.Why})
		}
		s.emit(event.TypeRunnerLimits, p)
	})
	return nil
}

func (s *settings) limits() ([]string, []Gap) {
	base := []string{"environment allowlist", fmt.Sprintf("timeout %s per execution", s.timeout), fmt.Sprintf("output cut at %d characters per stream", s.maxChars)}
	if s.jail == nil {
		return base, []Gap{unjailedGap}
	}
	return append(base, s.jail.applied...), s.jail.gaps
}

func (s *settings) describe() string {
	if s.jail == nil {
		return "NOT jailed (" + unjailedGap.Why + ")"
	}
	return s.jail.describe()
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
	s.sweepOnce.Do(func() {
		report := func(what string, sw sandbox.Swept) {
			p := &event.RunnerSwept{RunnerID: runnerID, What: what, Removed: len(sw.Paths), Failed: len(sw.Failed)}
			for _, o := range sw.Owners {
				p.Owners = append(p.Owners, o.Pid)
			}
			if len(sw.Failed) > 0 {
				p.Error = sw.Failed[0].Error()
			}
			s.emit(event.TypeRunnerSwept, p)
		}
		report("session-dirs", sandbox.SweepDirs(s.dir, sessionPrefix))
		if s.jail != nil {
			report("cgroups", sandbox.SweepCgroups(ctx))
		}
	})
}

// notes are what the session's caps did during one execute, told to the
// model: processes the kernel killed at the memory cap, a full disk.
func (j *jailSettings) notes(d sessionDirs, g *sandbox.Group, oomBefore int) string {
	if j == nil {
		return ""
	}
	var out []string
	if n := g.OOMKills() - oomBefore; n > 0 {
		out = append(out, fmt.Sprintf("[the session reached its memory cap (%s for processes, plus what /work and /tmp hold up to %s): the kernel killed %d of its processes; use less memory, or process the data in pieces]",
			sandbox.FormatSize(j.j.SessionMemory), sandbox.FormatSize(j.disk), n))
	}
	if d.fs != "" {
		var st syscall.Statfs_t
		if syscall.Statfs(d.fs, &st) == nil && st.Bavail*uint64(st.Bsize) < 64<<10 {
			out = append(out, fmt.Sprintf("[the session's disk is full: /work and /tmp hold %s together at most; delete files or write less]", sandbox.FormatSize(j.disk)))
		}
	}
	return strings.Join(out, "\n")
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

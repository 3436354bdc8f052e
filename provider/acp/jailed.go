package acp

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

// Jailed returns the launcher that runs each agent in a jail of its own
// (the agent profile of package jail): bubblewrap, an unprivileged user,
// its own network namespace reaching only LaunchSpec.AllowHosts, and,
// with jail.AgentOptions.Caps, seccomp and per-agent memory, process, CPU
// and disk caps. It is the launcher for hosts that serve several people.
//
// A launch the jail refuses fails with an error wrapping jail.ErrNoJail
// (bubblewrap missing, not root, no user namespaces: it names the fix)
// and never falls back to running the agent unjailed; a command the jail
// cannot run wraps ErrMissingExecutable, so readiness is
// missing_executable.
func Jailed(j *jail.Agent) Launcher { return jailed{j} }

type jailed struct{ j *jail.Agent }

func (l jailed) Launch(ctx context.Context, spec LaunchSpec) (Process, error) {
	began := time.Now()
	p, err := l.j.Launch(ctx, spec)
	if err != nil {
		if errors.Is(err, jail.ErrCommand) {
			return nil, fmt.Errorf("%w: %w", ErrMissingExecutable, err)
		}
		return nil, err
	}
	jp := &jailedProcess{Process: p, spec: spec, began: time.Now(), stopped: make(chan struct{})}
	jp.emit(TypeAgentStarted, &AgentStarted{Label: spec.Label, Launcher: "jail", Confined: true,
		TookMs: event.Ms(time.Since(began))})
	go jp.watch()
	return jp, nil
}

// jailedProcess is a jailed agent, reported the way every launcher
// reports its agents (agent_started, agent_stopped).
type jailedProcess struct {
	*jail.Process
	spec  LaunchSpec
	began time.Time

	asked   atomic.Bool   // Stop was called
	stopped chan struct{} // closed once agent_stopped was sent
}

func (p *jailedProcess) emit(t event.Type, payload any) {
	if p.spec.Events != nil {
		p.spec.Events(event.Event{Type: t, Payload: payload, Meta: event.Meta{Time: time.Now()}})
	}
}

// Done is closed once the agent's jail has ended and its end was
// reported.
func (p *jailedProcess) Done() <-chan struct{} { return p.stopped }

// Command runs a terminal in the agent's jail. A terminal outlives the
// request that created it (the adapter kills it at terminal/kill,
// release and session end), so ctx's cancellation does not reach it; the
// jail still kills it when the agent's jail ends.
func (p *jailedProcess) Command(ctx context.Context, argv []string, cwd string, env []string) (*exec.Cmd, error) {
	return p.Process.Command(context.WithoutCancel(ctx), argv, cwd, env)
}

func (p *jailedProcess) Stop(ctx context.Context) error {
	p.asked.Store(true)
	err := p.Process.Stop(ctx)
	select {
	case <-p.stopped:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("acp: the jailed agent ended but its end was not reported in time: %w", ctx.Err())
		}
	}
	return err
}

func (p *jailedProcess) watch() {
	<-p.Process.Done()
	st := &AgentStopped{Label: p.spec.Label, HeldMs: event.Ms(time.Since(p.began))}
	err := p.Process.Err()
	switch {
	case p.asked.Load():
		st.Reason = "stopped"
	case err == nil:
		st.Reason = "exited"
	default:
		st.Reason = "crashed"
		st.Error = err.Error()
	}
	if st.Reason != "stopped" {
		st.Stderr = lastWords(p, p.spec.Env)
	}
	p.emit(TypeAgentStopped, st)
	close(p.stopped)
}

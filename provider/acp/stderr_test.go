package acp_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

const stderrSecret = "sk-test-0f1e2d3c4b5a"

// failingAgent writes two lines to stderr, the second naming its key,
// and exits before it speaks ACP.
func failingAgent(c *acp.Config) {
	c.Command = []string{"/bin/sh", "-c", `echo "loading the model" >&2; echo "fatal: key $AGENT_KEY refused; exit 1=$SHORT" >&2; exit 3`}
	c.Env = []string{"AGENT_KEY=" + stderrSecret, "SHORT=on"}
}

// checkLastWords checks that s holds the agent's last stderr lines, its
// key redacted.
func checkLastWords(t *testing.T, what, s string) {
	t.Helper()
	if !strings.Contains(s, "loading the model | fatal: key <AGENT_KEY> refused; exit 1=on") {
		t.Errorf("%s does not give the agent's last lines: %q", what, s)
	}
	if strings.Contains(s, stderrSecret) {
		t.Errorf("%s holds the agent's key: %q", what, s)
	}
}

// An agent that fails to start is reported with the last lines of its
// stderr, the values of its environment redacted: in the error the
// caller sees and in its agent_stopped event.
func TestAnAgentThatFailsToStartSaysWhy(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	checkStartFailure(t, r, nil)
}

func checkStartFailure(t *testing.T, r *rig, cmd []string) {
	t.Helper()
	inst := r.instance(r.config(nil, func(c *acp.Config) {
		failingAgent(c)
		if cmd != nil {
			c.Command = append(cmd, c.Command[1:]...)
		}
	}))
	_, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s1", WorkingDirectory: r.ws})
	if !errors.Is(err, acp.ErrNotReady) {
		t.Fatalf("create: %v", err)
	}
	checkLastWords(t, "the error", err.Error())
	var stopped *acp.AgentStopped
	for _, e := range r.events.of(acp.TypeAgentStopped) {
		if p := e.Payload.(*acp.AgentStopped); p.Reason != "stopped" {
			stopped = p
		}
	}
	if stopped == nil {
		t.Fatal("no agent_stopped event for the agent that exited")
	}
	checkLastWords(t, "the agent_stopped event", stopped.Stderr)
}

// An agent that dies mid-turn is reported the same way.
func TestAnAgentThatDiesMidTurnSaysWhy(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config([]string{"AGENT_KEY=" + stderrSecret}, nil)), "s1")
	_, err := tryTurn(s, "t1", "stderr loading the model\nfatal: key "+stderrSecret+" refused; exit 1=on")
	if !errors.Is(err, acp.ErrAgentExited) {
		t.Fatalf("the turn: %v", err)
	}
	checkLastWords(t, "the turn's error", err.Error())
}

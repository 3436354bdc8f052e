//go:build linux

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/internal/modelwire"
)

// A real claude-agent-acp served by the built binary, driven by a local
// server on Anthropic's wire: the turn's usage record holds the tokens
// the agent reported for the server's answers (each streamed answer
// reports 25 input and 12 output tokens), with basis per_turn, and the
// agent's wall time as its sandbox time; GET /v1/usage and agentry usage
// agree with it.
func TestServeClaudeAgentACPRecordsUsage(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	agentCmd := claudeAgentACP(t)
	bin := binary(t)
	dir, events := agentDir(t)
	agent := &scriptedAgent{marker: "Write"}
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-offline", Script: agent.script})
	defer model.Close()
	store := filepath.Join(dir, "agentry.db")
	p := startServeBinary(t, bin, claudeOfflineEnv(model.URL), claudeServeArgs(agentCmd, model.URL, dir, "--store", store, "--events", events)...)
	body, _ := approvedTurn(t, p, "Say hello.")
	if !strings.Contains(string(body), "All done.") {
		t.Fatalf("the turn did not end with the model's answer: %s\n%s", body, p.stderr)
	}
	code, got := p.call(t, "GET", "/v1/usage?by=model", "")
	if code != 200 {
		t.Fatalf("GET /v1/usage: %d %s", code, got)
	}
	var v struct {
		Rows  []host.UsageRow
		Total host.UsageRow
	}
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	tot := v.Total
	t.Logf("usage: %s; the server answered %d requests", got, len(model.Requests()))
	streamed := 0
	for _, r := range model.Requests() {
		if r.Stream {
			streamed++
		}
	}
	if tot.Turns != 1 || tot.InputTokens <= 0 || tot.InputTokens%25 != 0 || tot.InputTokens > int64(25*streamed) ||
		tot.OutputTokens <= 0 || tot.OutputTokens%12 != 0 || tot.OutputTokens > int64(12*streamed) {
		t.Fatalf("usage %+v: want 1 turn and the tokens of up to %d streamed answers (25 in, 12 out each)", tot, streamed)
	}
	if tot.SandboxSeconds <= 0 {
		t.Fatalf("no agent time in %+v", tot)
	}
	if tot.CostUSD == 0 && tot.UnknownCostTurns == 0 {
		t.Fatalf("a zero cost that is not unknown: %+v", tot)
	}
	out, _, rc := exe(t, bin, nil, "usage", "--store", store, "--json")
	if rc != 0 {
		t.Fatalf("agentry usage: %s", out)
	}
	var cmd struct{ Rows []host.UsageRow }
	if err := json.Unmarshal([]byte(out), &cmd); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if n := len(cmd.Rows); n == 0 || cmd.Rows[n-1].InputTokens != tot.InputTokens || cmd.Rows[n-1].OutputTokens != tot.OutputTokens || cmd.Rows[n-1].Turns != 1 {
		t.Fatalf("agentry usage %+v disagrees with GET /v1/usage %+v", cmd.Rows, tot)
	}
}

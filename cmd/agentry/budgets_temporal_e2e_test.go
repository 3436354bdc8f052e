package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/internal/modelwire"
	"github.com/agentry-dev/agentry/internal/temporaltest"
	"github.com/agentry-dev/agentry/tool"
)

// The built binary with --temporal and a tokens cap: a durable turn whose
// first step (a model call of 37 tokens and one run_code call) crosses
// the cap finishes that step, then gets exactly one model call with tool
// calls withheld (tool_choice none on Anthropic's wire) and the cap named;
// the crossing is an agentry.host.budget_crossed event; the next turn is
// refused 429 budget_exhausted.
func TestServeTemporalBudgetCrossedMidTurn(t *testing.T) {
	needPython(t)
	addr := temporaltest.Addr(t)
	bin := binary(t)
	dir := t.TempDir()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	tenant := "durable-budget-" + hex.EncodeToString(rnd[:])
	tok, line, err := host.GenerateToken(tool.Identity{Tenant: tenant, Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	tokens := writeFile(t, dir, "tokens.txt", line+"\n")
	budgets := writeFile(t, dir, "budgets.toml", "[[cap]]\ntenant = \""+tenant+"\"\nprincipal = \"alice\"\nper = \"day\"\ntokens = 30\n")
	events := filepath.Join(dir, "events.ndjson")
	marks := filepath.Join(dir, "marks")
	var model *modelwire.Server
	// Calls run_code (which appends a line to marks) until told to call
	// no tool; then answers with the note it was given.
	model = modelwire.NewAnthropic(modelwire.Options{Script: func(tr modelwire.Turn) modelwire.Reply {
		reqs := model.Requests()
		if body := string(reqs[len(reqs)-1].Body); strings.Contains(body, `"tool_choice":{"type":"none"}`) {
			return modelwire.Reply{Text: "wrapping up: " + tr.Message}
		}
		args, _ := json.Marshal(map[string]string{"code": fmt.Sprintf("open(%q, 'a').write('x\\n')\nprint(%d)", marks, tr.Answered)})
		return modelwire.Reply{Calls: []modelwire.Call{{Name: modelwire.ToolName, Args: args}}}
	}})
	defer model.Close()
	p := startServeBinary(t, bin, anthropicOfflineEnv(model.URL),
		"--store", filepath.Join(dir, "agentry.db"), "--tokens", tokens, "--budgets", budgets, "--events", events,
		"--runner", "process", "--model", "anthropic:claude-sonnet-4-5", "--drain", "10s",
		"--temporal", addr, "--temporal-task-queue", fmt.Sprintf("durable-budget-%d", time.Now().UnixNano()),
		"--temporal-replica", "a")
	p.token = tok
	code, body := p.call(t, "POST", "/v1/sessions", "")
	if code != 201 {
		t.Fatalf("open: %d %s", code, body)
	}
	var sess struct{ SessionID string }
	_ = json.Unmarshal(body, &sess)
	turns := "/v1/sessions/" + sess.SessionID + "/turns"
	code, body = p.call(t, "POST", turns, `{"message":"keep going"}`)
	if code != 200 || !strings.Contains(string(body), "wrapping up") || !strings.Contains(string(body), "daily tokens cap of principal alice") {
		t.Fatalf("the turn that crossed the cap: %d %s", code, body)
	}
	reqs := model.Requests()
	withheld := 0
	for _, r := range reqs {
		if strings.Contains(string(r.Body), `"tool_choice":{"type":"none"}`) {
			withheld++
		}
	}
	if len(reqs) != 2 || withheld != 1 {
		t.Fatalf("%d model calls, %d with tool calls withheld; want 2 and 1 (the last)", len(reqs), withheld)
	}
	if raw, err := os.ReadFile(marks); err != nil || string(raw) != "x\n" {
		t.Fatalf("run_code ran %q (%v); want once, the step before the crossing", raw, err)
	}
	code, body = p.call(t, "POST", turns, `{"message":"more"}`)
	if code != 429 || !strings.Contains(string(body), "budget_exhausted") {
		t.Fatalf("the turn after the crossing: %d %s", code, body)
	}
	// The events file is complete once serve has stopped.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr)
	}
	raw, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), `"agentry.host.budget_crossed"`); n != 1 {
		t.Fatalf("%d budget_crossed events in the events file, want 1", n)
	}
}

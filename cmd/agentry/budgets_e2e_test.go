package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/internal/modelwire"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"github.com/agentry-dev/agentry/tool"
)

// The built binary, on SQLite and on PostgreSQL, with a model on
// Anthropic's wire (usage in every response) and a budget of 3 turns a
// day for alice: each turn's record holds the tokens the server
// reported, the cost from the shipped table, the tool call and the
// sandbox CPU time from the jail's cgroup;
// GET /v1/usage and agentry usage agree; bob sees none of alice's; the
// 4th turn answers 429 budget_exhausted with Retry-After; bob is
// unaffected; an edit of the budgets file applies without a restart.
func TestServeBinaryBudgets(t *testing.T) {
	needPython(t)
	bin := binary(t)
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			dsn := filepath.Join(dir, "agentry.db")
			if store == "postgres" {
				dsn = pgtest.DSN(t)
			}
			budgetServe(t, bin, dir, dsn)
		})
	}
}

func budgetServe(t *testing.T, bin, dir, dsn string) {
	// A tenant of this run's own: a shared database holds other runs' too.
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	tenant := "budget-" + hex.EncodeToString(rnd[:])
	toks := map[string]string{}
	var lines []string
	for _, p := range []string{"alice", "bob"} {
		tok, line, err := host.GenerateToken(tool.Identity{Tenant: tenant, Principal: p})
		if err != nil {
			t.Fatal(err)
		}
		toks[p] = tok
		lines = append(lines, line)
	}
	tokens := writeFile(t, dir, "tokens.txt", strings.Join(lines, "\n")+"\n")
	capFile := func(turns int) string {
		return "[[cap]]\ntenant = \"" + tenant + "\"\nprincipal = \"alice\"\nper = \"day\"\nturns = " + strconv.Itoa(turns) + "\n"
	}
	budgets := writeFile(t, dir, "budgets.toml", capFile(3))
	// One run_code call, then an answer with its output.
	model := modelwire.NewAnthropic(modelwire.Options{Script: func(tr modelwire.Turn) modelwire.Reply {
		if tr.Answered == 0 {
			return modelwire.Reply{Calls: []modelwire.Call{{Name: modelwire.ToolName, Args: json.RawMessage(`{"code":"print(6*7)"}`)}}}
		}
		return modelwire.Reply{Text: "it printed " + strings.Join(tr.ToolResults, " ")}
	}})
	defer model.Close()
	p := startServeBinary(t, bin, anthropicOfflineEnv(model.URL),
		"--store", dsn, "--tokens", tokens, "--budgets", budgets, "--events", "",
		"--model", "anthropic:claude-sonnet-4-5", "--pool", "0", "--drain", "10s")
	as := func(who string) *process { q := *p; q.token = toks[who]; return &q }
	alice, bob := as("alice"), as("bob")
	open := func(c *process) string {
		code, body := c.call(t, "POST", "/v1/sessions", "")
		if code != 201 {
			t.Fatalf("open: %d %s", code, body)
		}
		var v struct{ SessionID string }
		_ = json.Unmarshal(body, &v)
		return v.SessionID
	}
	say := func(c *process, id string) (int, []byte, string) {
		res, body := c.callFull(t, "POST", "/v1/sessions/"+id+"/turns", `{"message":"what is six times seven?"}`)
		return res.StatusCode, body, res.Header.Get("Retry-After")
	}
	aid, bid := open(alice), open(bob)
	for i := range 3 {
		if code, body, _ := say(alice, aid); code != 200 || !strings.Contains(string(body), "it printed 42") {
			t.Fatalf("alice's turn %d: %d %s", i+1, code, body)
		}
	}

	// The records: 3 turns of 2 model calls, each of 25 input and 12
	// output tokens as the server reported, one run_code call each;
	// Sonnet 4.5 at $3 and $15 per million.
	usage := func(c *process) host.UsageRow {
		code, body := c.call(t, "GET", "/v1/usage", "")
		if code != 200 {
			t.Fatalf("GET /v1/usage: %d %s", code, body)
		}
		var v struct{ Total host.UsageRow }
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		return v.Total
	}
	a := usage(alice)
	wantCost := (150*3.0 + 72*15.0) / 1e6
	if a.Turns != 3 || a.ModelCalls != 6 || a.InputTokens != 150 || a.OutputTokens != 72 || a.ToolCalls != 3 ||
		a.UnknownCostTurns != 0 || math.Abs(a.CostUSD-wantCost) > 1e-9 {
		t.Fatalf("alice's usage %+v; want 3 turns, 6 calls, 150/72 tokens, 3 tool calls, $%v", a, wantCost)
	}
	// The jailed interpreter's cgroup counted the code's CPU time.
	if a.SandboxSeconds <= 0 || a.SandboxSeconds > 60 {
		t.Fatalf("alice's sandbox time %v s: want the CPU time of 3 jailed runs", a.SandboxSeconds)
	}
	if b := usage(bob); b.Turns != 0 || b.InputTokens != 0 {
		t.Fatalf("bob sees %+v", b)
	}
	out, _, code := exe(t, bin, nil, "usage", "--store", dsn, "--tenant", tenant, "--json")
	if code != 0 {
		t.Fatalf("agentry usage: exit %d: %s", code, out)
	}
	var cmd struct{ Rows []host.UsageRow }
	if err := json.Unmarshal([]byte(out), &cmd); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(cmd.Rows) != 2 || cmd.Rows[0].Key != "alice" || cmd.Rows[0].Turns != a.Turns || cmd.Rows[0].InputTokens != a.InputTokens ||
		cmd.Rows[0].OutputTokens != a.OutputTokens || cmd.Rows[0].ToolCalls != a.ToolCalls || math.Abs(cmd.Rows[0].CostUSD-a.CostUSD) > 1e-9 {
		t.Fatalf("agentry usage %+v disagrees with GET /v1/usage %+v", cmd.Rows, a)
	}

	code4, body, retry := say(alice, aid)
	if code4 != 429 || !strings.Contains(string(body), `"budget_exhausted"`) || !strings.Contains(string(body), "daily turns cap of principal alice") {
		t.Fatalf("alice's 4th turn: %d %s", code4, body)
	}
	if s, err := strconv.Atoi(retry); err != nil || s < 1 || s > 86400 {
		t.Fatalf("Retry-After %q: want the seconds to the UTC day's end", retry)
	}
	if code, body, _ := say(bob, bid); code != 200 {
		t.Fatalf("bob: %d %s", code, body)
	}

	// The cap is raised in the file: no restart, the new cap applies.
	writeFile(t, dir, "budgets.toml", capFile(4))
	p.stderr.waitFor(t, "budgets.toml changed: reloaded ", 20*time.Second)
	p.stderr.waitFor(t, "budgets: 1 caps, 0 rates from "+budgets, time.Second)
	if code, body, _ := say(alice, aid); code != 200 {
		t.Fatalf("alice after the cap was raised: %d %s", code, body)
	}
	if code, _, _ := say(alice, aid); code != 429 {
		t.Fatalf("alice past the raised cap: %d", code)
	}
}

// callFull is call that also returns the response (its headers).
func (p *process) callFull(t *testing.T, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

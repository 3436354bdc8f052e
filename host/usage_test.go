package host_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/llm"
)

// pricedModel is cmdModel answering as a priced model with the tokens a
// vendor reports.
type pricedModel struct{ cmdModel }

func (m pricedModel) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	r, err := m.cmdModel.Generate(ctx, req)
	if err == nil {
		r.Model = "claude-sonnet-4-5-20250929"
		r.Usage = llm.Usage{InputTokens: 1000, OutputTokens: 200, CacheReadTokens: 100}
	}
	return r, err
}

// Every turn leaves a usage record with its tokens, tool calls and cost
// by the shipped price table, a failed one too; GET /v1/usage shows the
// caller's own and nobody else's; a tenant's admin reads it by
// principal; the per-tenant counters count it.
func TestUsageIsRecordedAndRead(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			f := newFixture(t, config{dsn: sk.dsn(t), agentOpt: func(o *agent.Options) { o.Model = pricedModel{} }})
			id := f.open("alice")
			want(t, f.say("alice", id, "hello"), http.StatusOK, "")
			want(t, f.say("alice", id, `call files {"op":"write","name":"a","text":"x"}`), http.StatusOK, "")
			f.say("alice", id, "fail")

			got := f.do("GET", "/v1/usage?by=conversation", "alice", nil).json(t)
			rows := got["rows"].([]any)
			if len(rows) != 1 {
				t.Fatalf("rows %v", got)
			}
			row := rows[0].(map[string]any)
			// Three turns, four model calls (one failed), three of them
			// with tokens; one tool call.
			if row["key"] != id || row["turns"] != 3.0 || row["modelCalls"] != 4.0 || row["inputTokens"] != 3000.0 ||
				row["outputTokens"] != 600.0 || row["cacheReadTokens"] != 300.0 || row["toolCalls"] != 1.0 || row["unknownCostTurns"] != 0.0 {
				t.Fatalf("row %v", row)
			}
			// Sonnet 4.5: 900 input at $3, 100 cache reads at $0.30, 200
			// output at $15 per million, three times.
			if c := row["costUsd"].(float64); math.Abs(c-3*0.00573) > 1e-9 {
				t.Fatalf("cost %v", c)
			}
			// By model: the failed call answered with no model name.
			byModel := map[string]map[string]any{}
			for _, r := range f.do("GET", "/v1/usage?by=model", "alice", nil).json(t)["rows"].([]any) {
				byModel[r.(map[string]any)["key"].(string)] = r.(map[string]any)
			}
			if m := byModel["claude-sonnet-4-5-20250929"]; len(byModel) != 2 || m["turns"] != 2.0 || m["outputTokens"] != 600.0 || byModel[""]["inputTokens"] != 0.0 {
				t.Fatalf("by model %v", byModel)
			}
			// Another principal sees none of it; by principal is for admins.
			if got := f.do("GET", "/v1/usage", "bob", nil).json(t); len(got["rows"].([]any)) != 0 || got["total"].(map[string]any)["turns"] != 0.0 {
				t.Fatalf("bob sees %v", got)
			}
			want(t, f.do("GET", "/v1/usage?by=principal", "alice", nil), http.StatusBadRequest, "invalid_field")
			want(t, f.do("GET", "/v1/tenants/acme/usage?by=principal", "alice", nil), http.StatusForbidden, "forbidden")
			want(t, f.do("GET", "/v1/tenants/acme/usage?by=principal", "boss", nil), http.StatusNotFound, "not_found")
			admin := f.do("GET", "/v1/tenants/acme/usage?by=principal", "root", nil).json(t)
			if rows := admin["rows"].([]any); len(rows) != 1 || rows[0].(map[string]any)["key"] != "alice" {
				t.Fatalf("the admin reads %v", admin)
			}
			want(t, f.do("GET", "/v1/usage?since=yesterday", "alice", nil), http.StatusBadRequest, "invalid_field")

			res, err := http.Get(f.url + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if !strings.Contains(string(body), `agentry_usage_turns_total{tenant="acme"} 3`) || strings.Contains(string(body), id) {
				t.Fatalf("metrics:\n%s", body)
			}
		})
	}
}

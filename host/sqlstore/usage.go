package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/llm"
)

// v5 kept what each turn used in a table of its own, one row per
// turn-log entry of a message or decision (v10 folds it into the turn log).
var v5 = []string{
	`CREATE TABLE IF NOT EXISTS agentry_usage (
		conversation_id    TEXT NOT NULL,
		seq                BIGINT NOT NULL,
		tenant             TEXT NOT NULL,
		principal          TEXT NOT NULL,
		run_id             TEXT NOT NULL,
		kind               TEXT NOT NULL,
		provider           TEXT NOT NULL,
		outcome            TEXT NOT NULL,
		started_us         BIGINT NOT NULL,
		ended_us           BIGINT NOT NULL,
		model_calls        BIGINT NOT NULL,
		tokens             BIGINT NOT NULL,
		sandbox_us         BIGINT NOT NULL,
		cost_nusd          BIGINT,
		price_version      TEXT NOT NULL,
		basis              TEXT NOT NULL,
		detail             TEXT NOT NULL,
		PRIMARY KEY (conversation_id, seq)
	)`,
	`CREATE INDEX IF NOT EXISTS agentry_usage_owner ON agentry_usage (tenant, principal, ended_us)`,
	`CREATE INDEX IF NOT EXISTS agentry_usage_ended ON agentry_usage (ended_us)`,
}

// v10 folds each turn's usage into its turn-log row: one INSERT a turn
// instead of two, and one index for the budgets' period sums and the
// usage reads (tenant, principal, ended). The table is rebuilt without its
// reference to the conversations, so that the retention sweep can remove
// a conversation and keep its rows of usage (what was billed). The counts
// budgets sum are columns; the rest (per-model tokens, per-tool calls,
// model calls, the basis) is the JSON detail. A row with no usage (a
// turn-log entry that is neither a message nor a decision) has a NULL
// tenant. SQLite keeps the rows clustered on their key (WITHOUT ROWID).
func v10(kind string) []string {
	clustered := ""
	if kind == "sqlite" {
		clustered = " WITHOUT ROWID"
	}
	return []string{
		`CREATE TABLE agentry_turns_v10 (
		conversation_id TEXT NOT NULL,
		seq             BIGINT NOT NULL,
		run_id          TEXT NOT NULL,
		kind            TEXT NOT NULL,
		outcome         TEXT NOT NULL,
		error           TEXT NOT NULL,
		started_us      BIGINT NOT NULL,
		ended_us        BIGINT NOT NULL,
		rule            TEXT NOT NULL DEFAULT '',
		tenant          TEXT,
		principal       TEXT,
		provider        TEXT,
		tokens          BIGINT,
		sandbox_us      BIGINT,
		cost_nusd       BIGINT,
		price_version   TEXT,
		detail          TEXT,
		PRIMARY KEY (conversation_id, seq)
	)` + clustered,
		`INSERT INTO agentry_turns_v10 (conversation_id, seq, run_id, kind, outcome, error, started_us, ended_us, rule,
		tenant, principal, provider, tokens, sandbox_us, cost_nusd, price_version, detail)
	SELECT t.conversation_id, t.seq, t.run_id, t.kind, t.outcome, t.error, t.started_us, t.ended_us, t.rule,
		u.tenant, u.principal, u.provider, u.tokens, u.sandbox_us, u.cost_nusd, u.price_version, u.detail
	FROM agentry_turns t LEFT JOIN agentry_usage u ON u.conversation_id = t.conversation_id AND u.seq = t.seq`,
		// Usage whose turn log the retention sweep removed (schema 8 kept
		// the usage alone).
		`INSERT INTO agentry_turns_v10 (conversation_id, seq, run_id, kind, outcome, error, started_us, ended_us, rule,
		tenant, principal, provider, tokens, sandbox_us, cost_nusd, price_version, detail)
	SELECT u.conversation_id, u.seq, u.run_id, u.kind, u.outcome, '', u.started_us, u.ended_us, '',
		u.tenant, u.principal, u.provider, u.tokens, u.sandbox_us, u.cost_nusd, u.price_version, u.detail
	FROM agentry_usage u WHERE NOT EXISTS (SELECT 1 FROM agentry_turns t WHERE t.conversation_id = u.conversation_id AND t.seq = u.seq)`,
		`DROP TABLE agentry_usage`,
		`DROP TABLE agentry_turns`,
		`ALTER TABLE agentry_turns_v10 RENAME TO agentry_turns`,
		`CREATE INDEX agentry_turns_usage ON agentry_turns (tenant, principal, ended_us)`,
	}
}

// usageDetail is the JSON detail of a turn's usage: the usage as the
// provider reported it, and the cost per model.
type usageDetail struct {
	llm.TurnUsage
	ModelCost map[string]price.Nano `json:"modelCost,omitempty"`
}

// appendUsageDetail appends the JSON of usageDetail{u, cost} to b, as
// json.Marshal would write it (fields in order, empty ones left out, map
// keys sorted), without reflection: it is written on every turn.
func appendUsageDetail(b []byte, u llm.TurnUsage, cost map[string]price.Nano) []byte {
	b = append(b, `{"modelCalls":`...)
	b = strconv.AppendInt(b, int64(u.ModelCalls), 10)
	if len(u.Models) > 0 {
		b = append(b, `,"models":{`...)
		for i, m := range sortedKeys(u.Models) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m)
			b = appendTokens(append(b, ':'), u.Models[m])
		}
		b = append(b, '}')
	}
	if len(u.ToolCalls) > 0 {
		b = append(b, `,"toolCalls":{`...)
		for i, t := range sortedKeys(u.ToolCalls) {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(append(appendJSONString(b, t), ':'), int64(u.ToolCalls[t]), 10)
		}
		b = append(b, '}')
	}
	b = strconv.AppendInt(append(b, `,"duration":`...), int64(u.Duration), 10)
	b = appendNonZero(b, `,"sandboxCpu":`, int64(u.SandboxCPU))
	b = appendNonZero(b, `,"sandboxPeakMemory":`, u.SandboxPeakMemory)
	b = appendNonZero(b, `,"agentWall":`, int64(u.AgentWall))
	if u.Basis != "" {
		b = appendJSONString(append(b, `,"basis":`...), string(u.Basis))
	}
	if len(cost) > 0 {
		b = append(b, `,"modelCost":{`...)
		for i, m := range sortedKeys(cost) {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(append(appendJSONString(b, m), ':'), int64(cost[m]), 10)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendTokens appends the JSON of an llm.Usage.
func appendTokens(b []byte, t llm.Usage) []byte {
	b = strconv.AppendInt(append(b, `{"inputTokens":`...), int64(t.InputTokens), 10)
	b = strconv.AppendInt(append(b, `,"outputTokens":`...), int64(t.OutputTokens), 10)
	b = appendNonZero(b, `,"cacheReadTokens":`, int64(t.CacheReadTokens))
	b = appendNonZero(b, `,"cacheWriteTokens":`, int64(t.CacheWriteTokens))
	return append(b, '}')
}

func appendNonZero(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), n, 10)
}

// appendJSONString appends s as a JSON string: as it is when it holds
// only printable ASCII that needs no escape (a model's or tool's name),
// else as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// sortedKeys returns m's keys in order (one, the common case, without
// sorting).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	if len(keys) > 1 {
		slices.Sort(keys)
	}
	return keys
}

const usageCols = `conversation_id, seq, tenant, principal, run_id, kind, provider, outcome, started_us, ended_us, cost_nusd, price_version, detail`

// usageArgs are the usage columns of a turn-log row (tenant, principal,
// provider, tokens, sandbox_us, cost_nusd, price_version, detail): NULLs
// for a turn without usage.
func (s *Store) usageArgs(u *host.UsageRecord, args []any) []any {
	if u == nil {
		return append(args, nil, nil, nil, nil, nil, nil, nil, nil)
	}
	detail := appendUsageDetail(make([]byte, 0, 256), u.Usage, u.ModelCost)
	tok := u.Usage.Tokens()
	var cost any // NULL: unknown (a plain int64 binds without the driver.Valuer look-up)
	if u.CostKnown {
		cost = int64(u.Cost)
	}
	return append(args, u.Tenant, u.Principal, u.Provider, tok.InputTokens+tok.OutputTokens,
		(u.Usage.SandboxCPU + u.Usage.AgentWall).Microseconds(), cost, u.PriceVersion, string(detail))
}

// UsageRecords returns the usage records q selects, oldest first.
func (s *Store) UsageRecords(ctx context.Context, q host.UsageQuery) ([]host.UsageRecord, error) {
	where, args := "tenant IS NOT NULL", []any{}
	if q.Tenant != "" {
		where += " AND tenant = ?"
		args = append(args, q.Tenant)
	}
	if q.Principal != "" {
		where += " AND principal = ?"
		args = append(args, q.Principal)
	}
	if !q.Since.IsZero() {
		where += " AND ended_us >= ?"
		args = append(args, micros(q.Since))
	}
	if !q.Until.IsZero() {
		where += " AND ended_us < ?"
		args = append(args, micros(q.Until))
	}
	limit := q.Limit
	if limit <= 0 || limit > host.MaxUsageRecords {
		limit = host.MaxUsageRecords
	}
	args = append(args, limit)
	rows, err := s.read.QueryContext(ctx, s.rebind(`SELECT `+usageCols+` FROM agentry_turns WHERE `+where+` ORDER BY ended_us, conversation_id, seq LIMIT ?`), args...)
	if err != nil {
		return nil, s.fail("reading usage", err)
	}
	defer rows.Close()
	var out []host.UsageRecord
	for rows.Next() {
		var r host.UsageRecord
		var started, ended int64
		var cost sql.NullInt64
		var detail string
		if err := rows.Scan(&r.Conversation, &r.Seq, &r.Tenant, &r.Principal, &r.RunID, &r.Kind, &r.Provider, &r.Outcome,
			&started, &ended, &cost, &r.PriceVersion, &detail); err != nil {
			return nil, s.fail("reading usage", err)
		}
		var d usageDetail
		if err := json.Unmarshal([]byte(detail), &d); err != nil {
			return nil, s.fail("reading usage", fmt.Errorf("the usage of turn %d of %s is not JSON: %w", r.Seq, r.Conversation, err))
		}
		r.Usage, r.ModelCost = d.TurnUsage, d.ModelCost
		r.Started, r.Ended = fromMicros(started), fromMicros(ended)
		r.Cost, r.CostKnown = price.Nano(cost.Int64), cost.Valid
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reading usage", err)
	}
	return out, nil
}

// UsageTotal sums a tenant's (or one principal's) usage since a time.
func (s *Store) UsageTotal(ctx context.Context, tenant, principal string, since time.Time) (host.UsageTotal, error) {
	q, args := s.q.usageTotal, []any{tenant, micros(since)}
	if principal != "" {
		q, args = s.q.usageTotalOne, []any{tenant, principal, micros(since)}
	}
	var t host.UsageTotal
	var tokens, cost, sandbox sql.NullInt64
	if err := s.read.QueryRowContext(ctx, q, args...).Scan(&t.Turns, &tokens, &cost, &t.UnknownCost, &sandbox); err != nil {
		return host.UsageTotal{}, s.fail("summing usage", err)
	}
	t.Tokens, t.Cost, t.Sandbox = tokens.Int64, price.Nano(cost.Int64), time.Duration(sandbox.Int64)*time.Microsecond
	return t, nil
}

package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
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

const usageCols = `conversation_id, seq, tenant, principal, run_id, kind, provider, outcome, started_us, ended_us, cost_nusd, price_version, detail`

// usageArgs are the usage columns of a turn-log row (tenant, principal,
// provider, tokens, sandbox_us, cost_nusd, price_version, detail): NULLs
// for a turn without usage.
func (s *Store) usageArgs(u *host.UsageRecord, args []any) ([]any, error) {
	if u == nil {
		return append(args, nil, nil, nil, nil, nil, nil, nil, nil), nil
	}
	detail, err := json.Marshal(usageDetail{u.Usage, u.ModelCost})
	if err != nil {
		return nil, s.fail("recording a turn's usage", err)
	}
	tok := u.Usage.Tokens()
	var cost sql.NullInt64
	if u.CostKnown {
		cost = sql.NullInt64{Int64: int64(u.Cost), Valid: true}
	}
	return append(args, u.Tenant, u.Principal, u.Provider, tok.InputTokens+tok.OutputTokens,
		(u.Usage.SandboxCPU + u.Usage.AgentWall).Microseconds(), cost, u.PriceVersion, string(detail)), nil
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

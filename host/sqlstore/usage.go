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

// v5 keeps what each turn used: one row per turn-log entry of a message
// or decision, written with the entry. The counts budgets sum are columns;
// the per-model tokens and per-tool calls are a JSON detail.
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

// usageDetail is the JSON detail of a usage row: the turn's usage as the
// provider reported it, and the cost per model.
type usageDetail struct {
	llm.TurnUsage
	ModelCost map[string]price.Nano `json:"modelCost,omitempty"`
}

const usageCols = `conversation_id, seq, tenant, principal, run_id, kind, provider, outcome, started_us, ended_us, cost_nusd, price_version, detail`

func (s *Store) insertUsage(ctx context.Context, tx *sql.Tx, id string, seq int64, u *host.UsageRecord) error {
	detail, err := json.Marshal(usageDetail{u.Usage, u.ModelCost})
	if err != nil {
		return s.fail("recording a turn's usage", err)
	}
	tok := u.Usage.Tokens()
	var cost sql.NullInt64
	if u.CostKnown {
		cost = sql.NullInt64{Int64: int64(u.Cost), Valid: true}
	}
	basis := u.Usage.Basis
	if basis == "" {
		basis = llm.BasisCounted
	}
	_, err = tx.StmtContext(ctx, s.stmt.insertUsage).ExecContext(ctx, id, seq, u.Tenant, u.Principal, u.RunID, u.Kind, u.Provider, u.Outcome,
		micros(u.Started), micros(u.Ended), u.Usage.ModelCalls, tok.InputTokens+tok.OutputTokens,
		(u.Usage.SandboxCPU + u.Usage.AgentWall).Microseconds(), cost, u.PriceVersion, string(basis), string(detail))
	if err != nil {
		return s.fail("recording a turn's usage", err)
	}
	return nil
}

// UsageRecords returns the usage records q selects, oldest first.
func (s *Store) UsageRecords(ctx context.Context, q host.UsageQuery) ([]host.UsageRecord, error) {
	where, args := "1 = 1", []any{}
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
	rows, err := s.read.QueryContext(ctx, s.rebind(`SELECT `+usageCols+` FROM agentry_usage WHERE `+where+` ORDER BY ended_us, conversation_id, seq LIMIT ?`), args...)
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

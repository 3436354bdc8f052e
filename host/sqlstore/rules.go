package sqlstore

import (
	"context"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// v7 keeps people's standing approvals (host.Rule), one row each, read by
// owner; and the turn log names the rule that answered a request.
var v7 = []string{
	`CREATE TABLE IF NOT EXISTS agentry_rules (
		id              TEXT PRIMARY KEY,
		tenant          TEXT NOT NULL,
		principal       TEXT NOT NULL,
		conversation_id TEXT NOT NULL,
		tool            TEXT NOT NULL,
		match_kind      TEXT NOT NULL,
		shape           TEXT NOT NULL,
		created_us      BIGINT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS agentry_rules_owner ON agentry_rules (tenant, principal, created_us)`,
	`ALTER TABLE agentry_turns ADD COLUMN rule TEXT NOT NULL DEFAULT ''`,
}

// shapeOf is what the shape column keeps: the exact arguments, or the
// command pattern, or nothing.
func shapeOf(r host.Rule) string {
	switch r.Match {
	case host.MatchExact:
		return string(r.Args)
	case host.MatchCommand:
		return r.Pattern
	}
	return ""
}

// AddRule stores a rule unless its owner has max rules already.
func (s *Store) AddRule(ctx context.Context, r host.Rule, max int) error {
	if err := host.CheckRule(r); err != nil {
		return err
	}
	// The count and the insert are one statement, so two requests at once
	// do not both pass the bound.
	res, err := s.write.ExecContext(ctx, s.rebind(`INSERT INTO agentry_rules (id, tenant, principal, conversation_id, tool, match_kind, shape, created_us)
		SELECT ?, ?, ?, ?, ?, ?, ?, ? WHERE (SELECT COUNT(*) FROM agentry_rules WHERE tenant = ? AND principal = ?) < ?`),
		r.ID, r.Owner.Tenant, r.Owner.Principal, r.Conversation, r.Tool, r.Match, shapeOf(r), micros(r.CreatedAt),
		r.Owner.Tenant, r.Owner.Principal, max)
	if err != nil {
		if s.d.UniqueViolation(err) {
			return host.ErrRuleExists
		}
		return s.fail("storing a rule", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return s.fail("storing a rule", err)
	} else if n == 0 {
		return host.ErrTooManyRules
	}
	return nil
}

// Rules returns the owner's rules, oldest first.
func (s *Store) Rules(ctx context.Context, owner tool.Identity) ([]host.Rule, error) {
	rows, err := s.read.QueryContext(ctx, s.rebind(`SELECT id, conversation_id, tool, match_kind, shape, created_us FROM agentry_rules
		WHERE tenant = ? AND principal = ? ORDER BY created_us, id`), owner.Tenant, owner.Principal)
	if err != nil {
		return nil, s.fail("reading rules", err)
	}
	defer rows.Close()
	var out []host.Rule
	for rows.Next() {
		r := host.Rule{Owner: tool.Identity{Tenant: owner.Tenant, Principal: owner.Principal}}
		var shape string
		var created int64
		if err := rows.Scan(&r.ID, &r.Conversation, &r.Tool, &r.Match, &shape, &created); err != nil {
			return nil, s.fail("reading rules", err)
		}
		switch r.Match {
		case host.MatchExact:
			r.Args = []byte(shape)
		case host.MatchCommand:
			r.Pattern = shape
		}
		r.CreatedAt = fromMicros(created)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reading rules", err)
	}
	return out, nil
}

// DeleteRule removes one of the owner's rules; another owner's is
// host.ErrRuleNotFound, as a missing one is.
func (s *Store) DeleteRule(ctx context.Context, owner tool.Identity, id string) error {
	res, err := s.write.ExecContext(ctx, s.rebind(`DELETE FROM agentry_rules WHERE id = ? AND tenant = ? AND principal = ?`), id, owner.Tenant, owner.Principal)
	if err != nil {
		return s.fail("removing a rule", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return s.fail("removing a rule", err)
	}
	if n == 0 {
		return host.ErrRuleNotFound
	}
	return nil
}

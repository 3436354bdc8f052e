package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// v8 orders listings by creation (a keyset cursor walks them: created_us
// and id never change) and lets the retention sweep find closed
// conversations by age.
var v8 = []string{
	`CREATE INDEX IF NOT EXISTS agentry_conversations_created ON agentry_conversations (tenant, principal, created_us, id)`,
	`CREATE INDEX IF NOT EXISTS agentry_conversations_tenant_created ON agentry_conversations (tenant, created_us, id)`,
	`CREATE INDEX IF NOT EXISTS agentry_conversations_closed ON agentry_conversations (state, updated_us)`,
}

// v11 takes out of two indexes what every turn moved in them: a turn
// rewrites its open conversation's state and updated time. The sweep's
// index keeps only closed conversations; the first schema's owner index
// (tenant, principal, state, updated_us) goes, and v1, which runs on every
// open, no longer makes it: listings walk v8's
// creation indexes, and counting a principal's open conversations walks
// the same index's (tenant, principal) prefix.
var v11 = []string{
	`DROP INDEX IF EXISTS agentry_conversations_owner`,
	`DROP INDEX agentry_conversations_closed`,
	`CREATE INDEX agentry_conversations_closed ON agentry_conversations (updated_us) WHERE state = 'closed'`,
}

// SweepClosed removes up to limit conversations closed and unchanged
// since before: their messages, turn log, lease row, provider record and
// the standing rules scoped to them (a rule that holds everywhere stays),
// then the conversation, in one transaction. The turn-log rows that carry
// usage are kept (their error text and rule blanked): they are what was
// billed, and budgets sum them. It returns the conversations it removed.
func (s *Store) SweepClosed(ctx context.Context, before time.Time, limit int) ([]host.Swept, error) {
	if limit <= 0 {
		return nil, nil
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, s.fail("sweeping closed conversations", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	rows, err := tx.QueryContext(ctx, s.rebind(`SELECT id, binding, tenant, principal FROM agentry_conversations
		WHERE state = 'closed' AND updated_us < ? ORDER BY updated_us LIMIT ?`), micros(before), limit)
	if err != nil {
		return nil, s.fail("sweeping closed conversations", err)
	}
	var ids, bindings []string
	var swept []host.Swept
	for rows.Next() {
		var id, binding string
		var owner tool.Identity
		if err := rows.Scan(&id, &binding, &owner.Tenant, &owner.Principal); err != nil {
			rows.Close()
			return nil, s.fail("sweeping closed conversations", err)
		}
		ids = append(ids, id)
		swept = append(swept, host.Swept{Owner: owner, ID: id})
		if binding != "" {
			bindings = append(bindings, binding)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.fail("sweeping closed conversations", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	leases := false
	if s.d.Kind == "postgres" {
		if err := tx.QueryRowContext(ctx, `SELECT to_regclass('agentry_leases') IS NOT NULL`).Scan(&leases); err != nil {
			return nil, s.fail("sweeping closed conversations", err)
		}
	}
	byID := []string{`DELETE FROM agentry_messages WHERE conversation_id = ?`,
		`DELETE FROM agentry_turns WHERE conversation_id = ? AND tenant IS NULL`,
		`UPDATE agentry_turns SET error = '', rule = '' WHERE conversation_id = ?`}
	if leases {
		byID = append(byID, `DELETE FROM agentry_leases WHERE conversation_id = ?`)
	}
	byID = append(byID, `DELETE FROM agentry_conversations WHERE id = ? AND state = 'closed'`)
	if err := s.deleteEach(ctx, tx, byID, ids); err != nil {
		return nil, err
	}
	if err := s.deleteEach(ctx, tx, recordDeletes, bindings); err != nil {
		return nil, err
	}
	// A rule's conversation is one of its owner's: the owner index finds
	// the few rows, where conversation_id alone would scan them all.
	rules := s.rebind(`DELETE FROM agentry_rules WHERE tenant = ? AND principal = ? AND conversation_id = ?`)
	for i, id := range ids {
		if _, err := tx.ExecContext(ctx, rules, swept[i].Owner.Tenant, swept[i].Owner.Principal, id); err != nil {
			return nil, s.fail("sweeping closed conversations", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, s.fail("sweeping closed conversations", err)
	}
	s.rmu.Lock()
	for _, b := range bindings {
		delete(s.rstored, b)
	}
	s.rmu.Unlock()
	return swept, nil
}

// recordDeletes remove a provider's record by its binding.
var recordDeletes = []string{`DELETE FROM agentry_native_messages WHERE binding = ?`, `DELETE FROM agentry_native_turns WHERE binding = ?`, `DELETE FROM agentry_native WHERE binding = ?`}

// DropRecord removes the provider's record under b, in one transaction
// (host.RecordDropper): the record of a session whose conversation was
// never created.
func (s *Store) DropRecord(ctx context.Context, b provider.Binding) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return s.fail("dropping a provider's record", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, q := range recordDeletes {
		if _, err := tx.ExecContext(ctx, s.rebind(q), string(b)); err != nil {
			return s.fail("dropping a provider's record", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.fail("dropping a provider's record", err)
	}
	s.rmu.Lock()
	delete(s.rstored, string(b))
	s.rmu.Unlock()
	return nil
}

// deleteEach runs every statement of stmts for each key.
func (s *Store) deleteEach(ctx context.Context, tx *sql.Tx, stmts, keys []string) error {
	for _, q := range stmts {
		q = s.rebind(q)
		for _, k := range keys {
			if _, err := tx.ExecContext(ctx, q, k); err != nil {
				return s.fail("sweeping closed conversations", err)
			}
		}
	}
	return nil
}

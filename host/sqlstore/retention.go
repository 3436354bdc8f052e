package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/agentry-dev/agentry/provider"
)

// v8 orders listings by creation (a keyset cursor walks them: created_us
// and id never change) and lets the retention sweep find closed
// conversations by age.
var v8 = []string{
	`CREATE INDEX IF NOT EXISTS agentry_conversations_created ON agentry_conversations (tenant, principal, created_us, id)`,
	`CREATE INDEX IF NOT EXISTS agentry_conversations_tenant_created ON agentry_conversations (tenant, created_us, id)`,
	`CREATE INDEX IF NOT EXISTS agentry_conversations_closed ON agentry_conversations (state, updated_us)`,
}

// SweepClosed removes up to limit conversations closed and unchanged
// since before: their messages, turn log, lease row and provider record,
// then the conversation, in one transaction. The turn-log rows that carry
// usage are kept (their error text and rule blanked): they are what was
// billed, and budgets sum them.
func (s *Store) SweepClosed(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.fail("sweeping closed conversations", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	rows, err := tx.QueryContext(ctx, s.rebind(`SELECT id, binding FROM agentry_conversations
		WHERE state = 'closed' AND updated_us < ? ORDER BY updated_us LIMIT ?`), micros(before), limit)
	if err != nil {
		return 0, s.fail("sweeping closed conversations", err)
	}
	var ids, bindings []string
	for rows.Next() {
		var id, binding string
		if err := rows.Scan(&id, &binding); err != nil {
			rows.Close()
			return 0, s.fail("sweeping closed conversations", err)
		}
		ids = append(ids, id)
		if binding != "" {
			bindings = append(bindings, binding)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, s.fail("sweeping closed conversations", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	leases := false
	if s.d.Kind == "postgres" {
		if err := tx.QueryRowContext(ctx, `SELECT to_regclass('agentry_leases') IS NOT NULL`).Scan(&leases); err != nil {
			return 0, s.fail("sweeping closed conversations", err)
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
		return 0, err
	}
	if err := s.deleteEach(ctx, tx, recordDeletes, bindings); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, s.fail("sweeping closed conversations", err)
	}
	s.rmu.Lock()
	for _, b := range bindings {
		delete(s.rstored, b)
	}
	s.rmu.Unlock()
	return len(ids), nil
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

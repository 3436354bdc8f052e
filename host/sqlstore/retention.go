package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/agentry-dev/agentry/host"
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

// SweepClosed removes up to limit conversations closed and unchanged
// since before: their messages, turn log, lease row and provider record,
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
	byBinding := []string{`DELETE FROM agentry_native_messages WHERE binding = ?`, `DELETE FROM agentry_native_turns WHERE binding = ?`, `DELETE FROM agentry_native WHERE binding = ?`}
	if err := s.deleteEach(ctx, tx, byID, ids); err != nil {
		return nil, err
	}
	if err := s.deleteEach(ctx, tx, byBinding, bindings); err != nil {
		return nil, err
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

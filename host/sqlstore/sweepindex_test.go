package sqlstore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"github.com/agentry-dev/agentry/tool"
)

func countIndex(driver string) string {
	if driver == "sqlite" {
		return `SELECT COUNT(*) FROM sqlite_master WHERE name = 'agentry_conversations_owner'`
	}
	return `SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'agentry_conversations_owner' AND schemaname = current_schema()`
}

// queryPlan is SQLite's plan of q, its steps joined.
func queryPlan(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	rows, err := db.Query(`EXPLAIN QUERY PLAN ` + q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "; ")
	}
	return plan.String()
}

// schema10Sweep turns a fresh store back into schema 10's: the sweep's
// index holds every conversation, and the owner index is there; one conversation is closed and old, one
// open and old.
var schema10Sweep = []string{
	`CREATE INDEX agentry_conversations_owner ON agentry_conversations (tenant, principal, state, updated_us)`,
	`DROP INDEX agentry_conversations_closed`,
	`CREATE INDEX agentry_conversations_closed ON agentry_conversations (state, updated_us)`,
	`INSERT INTO agentry_conversations (id, tenant, principal, state, turns, messages, last_run_id, created_us, updated_us, version)
		VALUES ('ses_closed', 'acme', 'alice', 'closed', 1, 0, 'run-1', 1000000, 2000000, 1)`,
	`INSERT INTO agentry_conversations (id, tenant, principal, state, turns, messages, last_run_id, created_us, updated_us, version)
		VALUES ('ses_open', 'acme', 'alice', 'open', 1, 0, 'run-2', 1000000, 2000000, 1)`,
	`UPDATE agentry_meta SET value = '10' WHERE key = 'schema'`,
}

// A schema-10 store's sweep index becomes one of closed conversations
// only and its owner index goes (a turn on an open conversation no longer
// moves an entry of either); the sweep finds what it found before, and a
// principal's open conversations are counted by the creation index.
func TestSchema10SweepIndexUpgrades(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "agentry.db")
		checkSweepIndexUpgrade(t, "sqlite", path, `SELECT sql FROM sqlite_master WHERE name = 'agentry_conversations_closed'`,
			func() (*sqlstore.Store, error) { return sqlite.Open(context.Background(), path) })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		checkSweepIndexUpgrade(t, "pgx", dsn, `SELECT indexdef FROM pg_indexes WHERE indexname = 'agentry_conversations_closed' AND schemaname = current_schema()`,
			func() (*sqlstore.Store, error) { return postgres.Open(context.Background(), dsn) })
	})
}

func checkSweepIndexUpgrade(t *testing.T, driver, dsn, indexDef string, open func() (*sqlstore.Store, error)) {
	ctx := context.Background()
	s, db := atOldSchema(t, driver, dsn, schema10Sweep, open)
	var def string
	if err := db.QueryRow(indexDef).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ToLower(def), "where") || !strings.Contains(def, "closed") || strings.Contains(def, "(state,") {
		t.Fatalf("the upgraded sweep index: %s", def)
	}
	var owner int
	if err := db.QueryRow(countIndex(driver)).Scan(&owner); err != nil || owner != 0 {
		t.Fatalf("the owner index is still there (%d, %v)", owner, err)
	}
	if driver == "sqlite" {
		if plan := queryPlan(t, db, `SELECT id, binding FROM agentry_conversations
			WHERE state = 'closed' AND updated_us < 5000000 ORDER BY updated_us LIMIT 10`); !strings.Contains(plan, "agentry_conversations_closed") {
			t.Fatalf("the sweep's query does not use its index: %s", plan)
		}
		if plan := queryPlan(t, db, `SELECT COUNT(*) FROM agentry_conversations WHERE tenant = 'acme' AND principal = 'alice' AND state <> 'closed'`); !strings.Contains(plan, "agentry_conversations_created") {
			t.Fatalf("counting open conversations does not use the creation index: %s", plan)
		}
	}
	if n, err := s.CountOpen(ctx, tool.Identity{Tenant: "acme", Principal: "alice"}); err != nil || n != 1 {
		t.Fatalf("alice has %d open conversations (%v), want 1", n, err)
	}
	n, err := s.SweepClosed(ctx, time.UnixMicro(5000000), 10)
	if err != nil || len(n) != 1 {
		t.Fatalf("swept %v (%v), want the closed one", n, err)
	}
	var left string
	if err := db.QueryRow(`SELECT id FROM agentry_conversations WHERE id IN ('ses_closed', 'ses_open')`).Scan(&left); err != nil || left != "ses_open" {
		t.Fatalf("left %q (%v), want the open conversation", left, err)
	}
}

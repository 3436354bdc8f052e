package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/host/sqlstore/postgres"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
	"github.com/agentry-dev/agentry/internal/pgtest"
	"github.com/agentry-dev/agentry/tool"
)

// schema8Usage turns a fresh store's turn log back into schema 8's: the
// turn log with its reference to the conversations, and the usage in a
// table of its own, holding a turn with usage, one without, and the
// usage of a conversation the retention sweep removed.
var schema8Usage = []string{
	`DROP TABLE agentry_turns`,
	`CREATE TABLE agentry_turns (conversation_id TEXT NOT NULL REFERENCES agentry_conversations (id), seq BIGINT NOT NULL,
		run_id TEXT NOT NULL, kind TEXT NOT NULL, outcome TEXT NOT NULL, error TEXT NOT NULL, started_us BIGINT NOT NULL,
		ended_us BIGINT NOT NULL, rule TEXT NOT NULL DEFAULT '', PRIMARY KEY (conversation_id, seq))`,
	`CREATE TABLE agentry_usage (conversation_id TEXT NOT NULL, seq BIGINT NOT NULL, tenant TEXT NOT NULL, principal TEXT NOT NULL,
		run_id TEXT NOT NULL, kind TEXT NOT NULL, provider TEXT NOT NULL, outcome TEXT NOT NULL, started_us BIGINT NOT NULL,
		ended_us BIGINT NOT NULL, model_calls BIGINT NOT NULL, tokens BIGINT NOT NULL, sandbox_us BIGINT NOT NULL, cost_nusd BIGINT,
		price_version TEXT NOT NULL, basis TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY (conversation_id, seq))`,
	`CREATE INDEX agentry_usage_owner ON agentry_usage (tenant, principal, ended_us)`,
	`CREATE INDEX agentry_usage_ended ON agentry_usage (ended_us)`,
	`INSERT INTO agentry_conversations (id, tenant, principal, state, turns, messages, last_run_id, created_us, updated_us, version)
		VALUES ('ses_a', 'acme', 'alice', 'open', 1, 0, 'run-1', 1000000, 2000000, 1)`,
	`INSERT INTO agentry_turns VALUES ('ses_a', 1, 'run-1', 'message', 'failed', 'the model failed', 1000000, 2000000, '')`,
	`INSERT INTO agentry_turns VALUES ('ses_a', 2, '', 'close', 'closed', '', 3000000, 3000000, '')`,
	`INSERT INTO agentry_usage VALUES ('ses_a', 1, 'acme', 'alice', 'run-1', 'message', 'agentry-native', 'failed', 1000000, 2000000,
		2, 150, 0, 4500, 'p1', 'counted', '{"modelCalls":2,"basis":"counted","sandboxCpu":0}')`,
	`INSERT INTO agentry_usage VALUES ('ses_gone', 3, 'acme', 'bob', 'run-9', 'message', 'acp', 'answered', 5000000, 6000000,
		1, 40, 2000000, NULL, 'p1', 'reported', '{"modelCalls":1,"basis":"reported"}')`,
	`UPDATE agentry_meta SET value = '8' WHERE key = 'schema'`,
}

// A schema-8 store's usage moves into its turn log: the records, the
// totals budgets sum and the turn log read as before, the separate table
// is gone, and the sweep keeps a removed conversation's usage.
func TestSchema8UsageUpgrades(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "agentry.db")
		checkUsageUpgrade(t, "sqlite", path, func() (*sqlstore.Store, error) { return sqlite.Open(context.Background(), path) })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		checkUsageUpgrade(t, "pgx", dsn, func() (*sqlstore.Store, error) { return postgres.Open(context.Background(), dsn) })
	})
}

func checkUsageUpgrade(t *testing.T, driver, dsn string, open func() (*sqlstore.Store, error)) {
	ctx := context.Background()
	s, db := atOldSchema(t, driver, dsn, schema8Usage, open)

	recs, err := s.UsageRecords(ctx, host.UsageQuery{Tenant: "acme"})
	if err != nil || len(recs) != 2 {
		t.Fatalf("the upgraded usage: %+v %v", recs, err)
	}
	a, gone := recs[0], recs[1]
	if a.Conversation != "ses_a" || a.Seq != 1 || a.Principal != "alice" || a.Outcome != "failed" || a.Provider != "agentry-native" ||
		!a.CostKnown || a.Cost != 4500 || a.PriceVersion != "p1" || a.Usage.ModelCalls != 2 || !a.Ended.Equal(time.UnixMicro(2000000)) {
		t.Fatalf("the upgraded record of a turn: %+v", a)
	}
	if gone.Conversation != "ses_gone" || gone.Seq != 3 || gone.CostKnown || gone.Usage.ModelCalls != 1 {
		t.Fatalf("the upgraded record of a swept conversation: %+v", gone)
	}
	if bob, err := s.UsageRecords(ctx, host.UsageQuery{Tenant: "acme", Principal: "bob"}); err != nil || len(bob) != 1 || bob[0].Conversation != "ses_gone" {
		t.Fatalf("bob's usage: %+v %v", bob, err)
	}
	tot, err := s.UsageTotal(ctx, "acme", "", time.UnixMicro(0))
	if err != nil || tot.Turns != 2 || tot.Tokens != 190 || tot.Cost != 4500 || tot.UnknownCost != 1 || tot.Sandbox != 2*time.Second {
		t.Fatalf("the upgraded total: %+v %v", tot, err)
	}
	alice := tool.Identity{Tenant: "acme", Principal: "alice"}
	turns, err := s.Turns(ctx, alice, "ses_a")
	if err != nil || len(turns) != 2 || turns[0].Error != "the model failed" || turns[1].Kind != "close" {
		t.Fatalf("the upgraded turn log: %+v %v", turns, err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM agentry_usage`).Scan(&n); err == nil {
		t.Fatalf("agentry_usage is still there after the upgrade (%d rows)", n)
	}

	// The sweep removes the closed conversation and its turn log but
	// keeps the rows of usage.
	if _, err := db.Exec(`UPDATE agentry_conversations SET state = 'closed' WHERE id = 'ses_a'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SweepClosed(ctx, time.Now(), 10); err != nil || len(n) != 1 {
		t.Fatalf("sweeping: %+v %v", n, err)
	}
	if turns, err := s.Turns(ctx, alice, "ses_a"); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("the swept turn log: %+v %v", turns, err)
	}
	var kept int
	var errText string
	if err := db.QueryRow(`SELECT COUNT(*), MAX(error) FROM agentry_turns WHERE conversation_id = 'ses_a'`).Scan(&kept, &errText); err != nil || kept != 1 || errText != "" {
		t.Fatalf("rows of ses_a after the sweep: %d %q %v", kept, errText, err)
	}
	if tot2, err := s.UsageTotal(ctx, "acme", "", time.UnixMicro(0)); err != nil || tot2 != tot {
		t.Fatalf("the total after the sweep: %+v %v", tot2, err)
	}
}

// atOldSchema opens a store (so its tables exist), runs stmts on it
// through database/sql to take it back to an older schema, and opens it
// again, which upgrades it. It returns the store and a connection of the
// test's to the same database; both are closed with the test.
func atOldSchema(t *testing.T, driver, dsn string, stmts []string, open func() (*sqlstore.Store, error)) (*sqlstore.Store, *sql.DB) {
	t.Helper()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s, err = open()
	if err != nil {
		t.Fatalf("opening a store of an older schema: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, db
}

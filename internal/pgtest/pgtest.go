// Package pgtest gives tests a PostgreSQL schema of their own on the
// server AGENTRY_TEST_POSTGRES names (.ci/postgres starts one and prints
// the DSN): one helper for every package whose tests need PostgreSQL.
package pgtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// Base returns the server's DSN. Without one the test is skipped, loudly
// — and under CI=true it fails instead.
func Base(t testing.TB) string {
	t.Helper()
	base := os.Getenv("AGENTRY_TEST_POSTGRES")
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("AGENTRY_TEST_POSTGRES is unset under CI=true: run .ci/postgres and export the DSN it prints")
		}
		t.Skip("SKIPPING: this test needs PostgreSQL and AGENTRY_TEST_POSTGRES is unset (run .ci/postgres to get a DSN)")
	}
	return base
}

// Schema makes a schema of the test's own on the server base names and
// returns a DSN whose search_path points at it; the schema is dropped
// when the test ends.
func Schema(t testing.TB, base string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		db.Close()
		t.Fatalf("creating a test schema: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
		db.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// DSN is Schema on Base: a fresh schema, or a skip (a failure under CI).
func DSN(t testing.TB) string { return Schema(t, Base(t)) }

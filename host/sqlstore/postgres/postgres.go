// Package postgres opens the host's conversation store in PostgreSQL
// (github.com/jackc/pgx/v5), for several replicas sharing conversations.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/agentry-dev/agentry/host/sqlstore"
)

// Open connects to the database a postgres:// (or postgresql://) URL
// names, and creates or upgrades the tables (replicas starting together
// take turns through an advisory lock). The password never appears in an
// error.
func Open(ctx context.Context, dsn string) (*sqlstore.Store, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return nil, errors.New("postgres: the store DSN must be a postgres:// or postgresql:// URL")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: opening the store: %w", redactDSN(err, dsn))
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	s, err := sqlstore.New(ctx, db, db, sqlstore.Dialect{
		Kind:   "postgres",
		Rebind: sqlstore.DollarParams,
		Lock: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7311942088)`)
			return err
		},
		UniqueViolation: func(err error) bool { return strings.Contains(err.Error(), "SQLSTATE 23505") },
	})
	if err != nil {
		return nil, redactDSN(err, dsn)
	}
	return s, nil
}

// redactDSN keeps a password in the DSN out of an error message.
func redactDSN(err error, dsn string) error {
	msg := err.Error()
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn, "@"); at > i {
			if cred := dsn[i+3 : at]; strings.Contains(cred, ":") {
				_, pw, _ := strings.Cut(cred, ":")
				if pw != "" && strings.Contains(msg, pw) {
					return errors.New(strings.ReplaceAll(msg, pw, "xxxxx"))
				}
			}
		}
	}
	return err
}

// Package sqlite opens the host's conversation store in a SQLite file
// (modernc.org/sqlite: pure Go, no cgo), in WAL mode. It is the store
// `agentry serve` uses with no setup.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/agentry-dev/agentry/host/sqlstore"
)

// Open opens (or creates) the store in the SQLite file at path. A path may
// end in "?sync=full" to fsync every commit (survives a power loss; the
// default, sync=normal, survives a crash of the process and is about 4×
// faster here). The file and its WAL are created readable by their owner
// only (0600): they hold every transcript. An existing file readable by
// others is tightened to 0600.
func Open(ctx context.Context, path string) (*sqlstore.Store, error) {
	path, params, _ := strings.Cut(path, "?")
	if path == "" {
		return nil, errors.New("sqlite: the store path is empty; pass a file path such as agentry.db")
	}
	syncMode := "NORMAL"
	for _, kv := range strings.Split(params, "&") {
		switch strings.ToLower(kv) {
		case "":
		case "sync=full":
			syncMode = "FULL"
		case "sync=normal":
			syncMode = "NORMAL"
		default:
			return nil, fmt.Errorf("sqlite: unknown store option %q; the one option is sync=full or sync=normal", kv)
		}
	}
	if strings.ContainsAny(path, "#") {
		return nil, errors.New("sqlite: the store path contains '#'; choose a file name without it")
	}
	if err := private(path); err != nil {
		return nil, err
	}
	dsn := path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + syncMode + ")&_pragma=foreign_keys(1)&_txlock=immediate"
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: opening the store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: opening the store: %w", err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	return sqlstore.New(ctx, w, r, sqlstore.Dialect{
		Kind:        "sqlite",
		GroupCommit: true,
		UniqueViolation: func(err error) bool {
			return strings.Contains(err.Error(), "UNIQUE constraint failed")
		},
	})
}

// private makes sure the database file and its WAL side files exist and
// are readable by their owner only. SQLite gives the side files the
// main file's mode.
func private(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if p != path {
				continue
			}
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("sqlite: creating the store file: %w", err)
			}
			if f != nil {
				_ = f.Close()
			}
		case err != nil:
			return fmt.Errorf("sqlite: checking the store file: %w", err)
		case fi.Mode().Perm()&0o077 != 0:
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return fmt.Errorf("sqlite: making the store file private (chmod 600 %s): %w", p, err)
			}
		}
	}
	return nil
}

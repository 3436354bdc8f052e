// Package sqlite opens the host's conversation store in a SQLite file
// (modernc.org/sqlite: pure Go, no cgo), in WAL mode. It is the store
// `agentry serve` uses with no setup.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/agentry-dev/agentry/host/sqlstore"
)

// Open opens (or creates) the store in the SQLite file at path. A path may
// end in "?sync=full" to fsync every commit (survives a power loss; the
// default, sync=normal, survives a crash of the process and is about 4×
// faster here). The file and its WAL are created readable by their owner
// only (0600): they hold every transcript. An existing SQLite file
// readable by others is tightened to 0600; a path that is a directory or
// a file that is not a SQLite database is refused with its mode untouched.
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

// sqliteHeader is how every SQLite database file begins.
const sqliteHeader = "SQLite format 3\x00"

// private makes sure the database file exists and that it and its WAL
// side files are readable by their owner only (SQLite gives the side
// files the main file's mode). It changes the mode of nothing but a
// SQLite database: a path that is a directory, a device, a FIFO or a file
// holding anything else is refused before anything is touched. Each
// file is checked and tightened through one open descriptor, so what is
// checked is what is changed.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		return f.Close() // ours, made private
	case !errors.Is(err, os.ErrExist):
		return fmt.Errorf("sqlite: creating the store file %s: %w", path, err)
	}
	if err := tighten(path, true); err != nil {
		return err
	}
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if err := tighten(side, false); err != nil {
			return err
		}
	}
	return nil
}

// tighten clears the group and other bits of the existing file p, once
// it is known to be a regular file and, for the main file, a SQLite
// database (or empty, which SQLite makes one of). A side file that does
// not exist is fine.
func tighten(p string, main bool) error {
	if !main {
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sqlite: checking the store file %s: %w", p, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("sqlite: %s is not a regular file (%s); it is not the store's, so nothing was changed: move it away or choose another store path", p, kindOf(fi.Mode()))
		}
	}
	// O_NONBLOCK: a FIFO planted at the path must not hang the opening.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("sqlite: opening the store file %s: %w", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("sqlite: checking the store file %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		example := "agentry.db"
		if fi.IsDir() {
			example = filepath.Join(p, "agentry.db")
		}
		return fmt.Errorf("sqlite: the store path %s is %s, not a database file; nothing was changed: pass a file path such as %s", p, kindOf(fi.Mode()), example)
	}
	if main && fi.Size() > 0 {
		head := make([]byte, len(sqliteHeader))
		if _, err := io.ReadFull(f, head); err != nil || string(head) != sqliteHeader {
			return fmt.Errorf("sqlite: the store path %s is a file that is not a SQLite database; nothing was changed: pass a new file path or an agentry database", p)
		}
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := f.Chmod(fi.Mode().Perm() & 0o700); err != nil {
		return fmt.Errorf("sqlite: making the store file private (chmod 600 %s): %w", p, err)
	}
	return nil
}

// kindOf names a file type in a refusal.
func kindOf(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

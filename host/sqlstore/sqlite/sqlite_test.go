package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// A path that is not a SQLite database is refused with its mode as it
// was: a directory, a text file, a FIFO (without blocking), and a side
// file that is a link.
func TestOpenRefusesWhatIsNotItsOwn(t *testing.T) {
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(shared, 0o1777) // like /tmp
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not a database\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path, want string }{
		{"directory", shared, "is a directory"},
		{"text file", text, "not a SQLite database"},
		{"fifo", fifo, "is a FIFO"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := mode(t, c.path)
			st, err := sqlite.Open(context.Background(), c.path)
			if err == nil {
				_ = st.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Fatalf("error %q does not say %q and that nothing was changed", err, c.want)
			}
			if after := mode(t, c.path); after != before {
				t.Fatalf("mode changed from %v to %v", before, after)
			}
		})
	}

	t.Run("side file is a link", func(t *testing.T) {
		db := filepath.Join(dir, "linked.db")
		st, err := sqlite.Open(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Close()
		_ = os.Remove(db + "-wal")
		if err := os.Symlink(text, db+"-wal"); err != nil {
			t.Fatal(err)
		}
		before := mode(t, text)
		if _, err := sqlite.Open(context.Background(), db); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("a -wal link was not refused: %v", err)
		}
		if mode(t, text) != before {
			t.Fatal("the link's target was chmodded")
		}
	})
}

// The store's own files are made, and kept, private: a new one is 0600,
// and an existing database readable by others is tightened.
func TestOpenTightensItsOwnDatabase(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agentry.db")
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, db).Perm(); m != 0o600 {
		t.Fatalf("a new store is %v", m)
	}
	if err := os.Chmod(db, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err = sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, p := range []string{db, db + "-wal"} {
		if m := mode(t, p).Perm(); m&0o077 != 0 {
			t.Fatalf("%s stayed %v", filepath.Base(p), m)
		}
	}

	// An empty file is what SQLite makes a new database of: taken.
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	st2, err := sqlite.Open(context.Background(), empty)
	if err != nil {
		t.Fatal(err)
	}
	_ = st2.Close()
	if m := mode(t, empty).Perm(); m != 0o600 {
		t.Fatalf("the empty file became %v", m)
	}
}

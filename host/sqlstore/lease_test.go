package sqlstore_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/host/sqlstore"
	"github.com/agentry-dev/agentry/host/sqlstore/sqlite"
)

// A SQLite store is one process's: it refuses to hand out leases rather
// than pretend several processes could share it.
func TestSQLiteHasNoLeases(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.Leases(context.Background(), sqlstore.LeaseOptions{Replica: host.Replica{Address: "http://127.0.0.1:8080"}})
	if err == nil || !strings.Contains(err.Error(), "needs no leases") {
		t.Fatalf("leases on sqlite: %v", err)
	}
}

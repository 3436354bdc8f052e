package host_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Importing host links no database driver and no agent: the host drives
// agents only through the provider contract, and a program picks its
// store (host/sqlstore/sqlite or host/sqlstore/postgres).
func TestHostLinksNoDriverAndNoAgent(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("the go command is needed to list host's dependencies")
		}
		t.Skip("SKIPPING: no go command to list host's dependencies")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed too little: %v", deps)
	}
	for _, d := range deps {
		switch {
		case strings.Contains(d, "jackc/pgx"), strings.Contains(d, "modernc.org/sqlite"),
			d == "github.com/agentry-dev/agentry/agent", strings.HasPrefix(d, "github.com/agentry-dev/agentry/provider/"):
			t.Errorf("host depends on %s", d)
		}
	}
}

package sqlstore_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The store stands on the host's ports: neither it nor its drivers link
// the agent or an adapter (a provider keeps its records through
// host.Records, which this store implements knowing no provider).
func TestStoreLinksNoAgentAndNoAdapter(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("the go command is needed to list the store's dependencies")
		}
		t.Skip("SKIPPING: no go command to list the store's dependencies")
	}
	out, err := exec.Command(gobin, "list", "-deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed too little: %v", deps)
	}
	const mod = "github.com/agentry-dev/agentry/"
	for _, d := range deps {
		switch {
		case d == mod+"agent", strings.HasPrefix(d, mod+"agent/"), strings.HasPrefix(d, mod+"provider/"):
			t.Errorf("host/sqlstore depends on %s", d)
		}
	}
}

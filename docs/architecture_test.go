package docs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The import rules docs/architecture.md states, checked against the
// module's non-test imports (go list). Only the jail starts bubblewrap is
// checked where the jail's rules live: jail.TestOnlyTheJailStartsBubblewrap.

const mod = "github.com/agentry-dev/agentry/"

// goList returns each package of the module (by path inside it) with its
// non-test imports, or with its whole dependency closure when deps.
func goList(t *testing.T, deps bool) map[string][]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("the go command is needed to list the module's imports")
		}
		t.Skip("SKIPPING: no go command to list the module's imports")
	}
	format := `{{.ImportPath}} {{join .Imports " "}}`
	if deps {
		format = `{{.ImportPath}} {{join .Deps " "}}`
	}
	cmd := exec.Command(gobin, "list", "-f", format, "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var imports []string
		for _, d := range f[1:] {
			if p, ok := strings.CutPrefix(d, mod); ok {
				d = p
			}
			imports = append(imports, d)
		}
		pkgs[strings.TrimPrefix(f[0], mod)] = imports
	}
	if len(pkgs) < 20 || pkgs["host"] == nil {
		t.Fatalf("go list listed too little: %d packages", len(pkgs))
	}
	return pkgs
}

func under(p, room string) bool { return p == room || strings.HasPrefix(p, room+"/") }

// The host drives agents only through the provider contract: host (and its
// store) link neither the loop nor an adapter, and no store driver but the
// one a program picks (host/sqlstore/sqlite or host/sqlstore/postgres).
func TestHostLinksNoAgentNoAdapterNoDriver(t *testing.T) {
	t.Parallel()
	for p, deps := range goList(t, true) {
		if !under(p, "host") {
			continue
		}
		for _, d := range deps {
			switch {
			case under(d, "agent"), under(d, "provider/native"), under(d, "provider/acp"), under(d, "provider/durable"),
				strings.HasPrefix(d, "code/"):
				t.Errorf("%s links %s: the host never imports the loop or an adapter", p, d)
			case p == "host" && (strings.Contains(d, "jackc/pgx") || strings.Contains(d, "modernc.org/sqlite")):
				t.Errorf("host links the driver %s: drivers live in host/sqlstore/postgres and host/sqlstore/sqlite", d)
			}
		}
	}
}

// A store driver is imported only by its store package (and the test
// helpers that reach the same server).
func TestDriversOnlyInTheirStore(t *testing.T) {
	t.Parallel()
	owner := map[string]string{"github.com/jackc/pgx": "host/sqlstore/postgres", "modernc.org/sqlite": "host/sqlstore/sqlite"}
	for p, imports := range goList(t, false) {
		for _, i := range imports {
			for driver, store := range owner {
				if strings.HasPrefix(i, driver) && p != store && !(strings.HasPrefix(p, "internal/") && strings.HasSuffix(p, "test")) {
					t.Errorf("%s imports %s: only %s may", p, i, store)
				}
			}
		}
	}
}

// The ground floor stays the ground floor: event imports no other room,
// and its readers (event/otel, event/audit) are imported by the command
// alone, so their imports of the rooms whose events they read point down.
func TestEventIsTheGroundFloor(t *testing.T) {
	t.Parallel()
	pkgs := goList(t, false)
	for _, i := range pkgs["event"] {
		if pkgs[i] != nil {
			t.Errorf("event imports %s: it keeps the envelope, the bus and the sink port, and imports no room", i)
		}
	}
	for p, imports := range pkgs {
		for _, i := range imports {
			if (i == "event/otel" || i == "event/audit") && p != "cmd/agentry" {
				t.Errorf("%s imports %s: only the command wires the event readers", p, i)
			}
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// tokenLine is a tokens file's line admitting tenant/principal.
func tokenLine(t *testing.T, tenant, principal string) string {
	t.Helper()
	_, line, err := host.GenerateToken(tool.Identity{Tenant: tenant, Principal: principal})
	if err != nil {
		t.Fatal(err)
	}
	return line + "\n"
}

// serveFlags returns a fresh serve's options and flags, with args parsed
// as the command line.
func serveFlags(t *testing.T, args ...string) (*serveOptions, *pflag.FlagSet) {
	t.Helper()
	var o serveOptions
	cmd := newServeCmdWith(&o)
	f := cmd.Flags()
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o, f
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigFileSetsFlagsTheCommandLineDidNot(t *testing.T) {
	path := writeFile(t, t.TempDir(), "agentry.toml", `# a host for a team
addr = "0.0.0.0:9090"
max-turns = 64
max-turns-per-principal = 2
drain = "45s"
allow-unjailed = false
check-in = ["run_code", "deploy"]
oidc-scopes = ["openid", "email"]
session-memory = "2GiB"
`)
	o, f := serveFlags(t, "--config", path, "--max-turns", "3", "--check-in", "other")
	if err := o.readConfig(f); err != nil {
		t.Fatal(err)
	}
	if o.addr != "0.0.0.0:9090" || o.drain != 45*time.Second || o.maxTurnsPerPrincipal != 2 || o.caps.memory != "2GiB" {
		t.Fatalf("the file's values were not taken: addr %q drain %s per-principal %d memory %q", o.addr, o.drain, o.maxTurnsPerPrincipal, o.caps.memory)
	}
	if o.maxTurns != 3 || len(o.checkIns) != 1 || o.checkIns[0] != "other" {
		t.Fatalf("a flag did not override the file: max-turns %d, check-in %q", o.maxTurns, o.checkIns)
	}
	if strings.Join(o.oidc.scopes, ",") != "openid,email" {
		t.Fatalf("oidc-scopes = %q, want the file's list in place of the default", o.oidc.scopes)
	}
	if o.store != "agentry.db" {
		t.Fatalf("a key the file leaves out lost its default: store %q", o.store)
	}
	if !f.Changed("drain") {
		t.Fatal("a flag the file set does not count as given (the agent- and oidc- checks read that)")
	}
}

// TestEveryServeFlagHasAKey: each of serve's flags, whoever adds it, is a
// key of the file, taking a value of the flag's type.
func TestEveryServeFlagHasAKey(t *testing.T) {
	_, f := serveFlags(t)
	n := 0
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Name == "config" || fl.Name == "help" || fl.Deprecated != "" || fl.Hidden {
			return
		}
		n++
		var val string
		switch fl.Value.Type() {
		case "bool":
			val = "true"
		case "int", "int64", "uint":
			val = "1"
		case "duration":
			val = `"7s"`
		case "stringArray", "stringSlice":
			val = `["x"]`
		default:
			val = `"x"`
		}
		_, g := serveFlags(t)
		cf, err := parseConfig("f.toml", []byte(fl.Name+" = "+val+"\n"), g)
		if err != nil {
			t.Errorf("--%s has no key: %v", fl.Name, err)
			return
		}
		if err := cf.apply(g); err != nil && !strings.Contains(err.Error(), "f.toml:1:") {
			t.Errorf("--%s: a refusal without its line: %v", fl.Name, err)
		}
	})
	if n < 30 {
		t.Fatalf("only %d flags visited", n)
	}
}

func TestConfigRefusesWithFileAndLine(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
	}{
		{"unknown key", "addr = \"127.0.0.1:1\"\n\nmax-turn = 4\n", `:3: unknown key "max-turn": serve has no --max-turn flag`},
		{"unknown table", "[server]\naddr = \"x\"\n", `:1: unknown table "server"`},
		{"whole number wanted", "pool = \"4\"\n", `:1: pool takes a whole number (e.g. pool = 8), not a string`},
		{"fraction", "max-turns = 1.5\n", `:1: max-turns takes a whole number (e.g. max-turns = 8), not a number with a fraction`},
		{"bool wanted", "\nallow-unjailed = \"yes\"\n", `:2: allow-unjailed takes true or false, not a string`},
		{"duration unquoted", "drain = 30\n", `:1: drain takes a duration in quotes (e.g. drain = "30s"), not a whole number`},
		{"bad duration", "drain = \"30 seconds\"\n", `:1: drain: "30 seconds" is not a duration`},
		{"array wanted", "check-in = \"run_code\"\n", `:1: check-in takes an array of strings`},
		{"array of numbers", "check-in = [\"a\", 2]\n", `:1: check-in[1] is a whole number`},
		{"string wanted", "addr = 8080\n", `:1: addr takes a string in quotes, not a whole number`},
		{"syntax", "addr = \"127.0.0.1:1\"\nstore = \n", `:2: `},
		{"duplicate", "pool = 1\npool = 2\n", `:2: `},
		{"config in config", "config = \"other.toml\"\n", `:1: "config" cannot be set in a configuration file`},
		{"out of range", "\nmax-turns = 99999999999999999999\n", `:2: `},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "agentry.toml", c.body)
			o, f := serveFlags(t, "--config", path)
			err := o.readConfig(f)
			if err == nil {
				t.Fatalf("accepted:\n%s", c.body)
			}
			if !strings.Contains(err.Error(), path+c.want) {
				t.Fatalf("got %q, want it to hold %q", err, path+c.want)
			}
			if exitCode(err) != 2 {
				t.Fatalf("exit %d, want 2 (a usage error)", exitCode(err))
			}
		})
	}
}

func TestConfigRefusesInlineSecretsWithoutRepeatingThem(t *testing.T) {
	for _, c := range []struct {
		name, body, secret, want string
	}{
		{"token", "tokens = \"agt_0123456789abcdef0123456789abcdef\"\n", "0123456789abcdef", "looks like a secret"},
		{"model key", "\n\nmodel = \"sk-ant-api03-secretsecret\"\n", "secretsecret", ":3: model holds what looks like a secret"},
		{"key in a list", "agent-allow-host = [\"ok:443\", \"ghp_aaaaaaaaaaaaaaaa\"]\n", "aaaaaaaaaaaa", "agent-allow-host holds what looks like a secret"},
		{"store password", "store = \"postgres://agentry:hunter2@db/agentry\"\n", "hunter2", "PGPASSWORD"},
		{"store password in the query", "store = \"postgres://db/agentry?user=a&password=hunter2\"\n", "hunter2", "PGPASSWORD"},
		{"agent env value", "agent-env = [\"ANTHROPIC_API_KEY=hunter2\"]\n", "hunter2", `name the variable only ("ANTHROPIC_API_KEY")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "agentry.toml", c.body)
			o, f := serveFlags(t, "--config", path)
			err := o.readConfig(f)
			if err == nil {
				t.Fatalf("accepted an inline secret:\n%s", c.body)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path+":") {
				t.Fatalf("got %q, want %q with file:line", err, c.want)
			}
			if strings.Contains(err.Error(), c.secret) {
				t.Fatalf("the refusal repeats the secret: %q", err)
			}
		})
	}
	// Names of variables and files are what a file holds instead.
	path := writeFile(t, t.TempDir(), "agentry.toml", "agent-env = [\"ANTHROPIC_API_KEY\"]\nstore = \"postgres://agentry@db/agentry\"\n")
	o, f := serveFlags(t, "--config", path)
	if err := o.readConfig(f); err != nil {
		t.Fatal(err)
	}
}

func TestConfigReportsEveryProblemInLineOrder(t *testing.T) {
	path := writeFile(t, t.TempDir(), "agentry.toml", "pool = \"x\"\naddr = \"127.0.0.1:1\"\nnope = 1\ndrain = 3\n")
	o, f := serveFlags(t, "--config", path)
	err := o.readConfig(f)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	i1, i3, i4 := strings.Index(msg, path+":1:"), strings.Index(msg, path+":3:"), strings.Index(msg, path+":4:")
	if i1 < 0 || i3 < i1 || i4 < i3 {
		t.Fatalf("want lines 1, 3 and 4 in order, got:\n%s", msg)
	}
}

func TestConfigCheckCommand(t *testing.T) {
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens.txt", tokenLine(t, "acme", "alice"))
	good := writeFile(t, dir, "good.toml", "addr = \"127.0.0.1:8080\"\ntokens = \""+tokens+"\"\nmax-turns = 8\n")
	out, err := execute(t, "config", "check", good)
	if err != nil || !strings.Contains(out, good+": ok (3 settings)") {
		t.Fatalf("a good file: %v\n%s", err, out)
	}
	for _, c := range []struct{ body, want string }{
		{"max-turns = \"8\"\n", ":1: max-turns takes a whole number"},
		{"tokens = \"" + filepath.Join(dir, "missing.txt") + "\"\n", "--tokens"},
		{"addr = \"8080\"\n", "--addr \"8080\" is not host:port"},
		{"model = \"gpt-9\"\n", "--model"},
		{"agent = \"acp\"\n", "--agent acp needs --agent-cmd"},
		{"agent-cmd = \"claude-code-acp\"\n", "--agent-cmd is for --agent acp"},
		{"oidc-audience = \"x\"\n", "need --oidc-issuer"},
		{"session-memory = \"lots\"\n", "--session-memory"},
		{"runner = \"vm\"\n", "unknown --runner"},
		{"pool = -1\n", "--pool"},
		{"clone-allow = [\"git.example.com\"]\nrunner = \"process\"\n", "--runner process does not jail"},
		{"clone-allow = [\"git.example.com\"]\nrunner = \"interpreter\"\n[agents.x]\nkind = \"native\"\n", "--runner interpreter does not jail"},
	} {
		bad := writeFile(t, t.TempDir(), "bad.toml", c.body)
		out, err := execute(t, "config", "check", bad)
		if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: exit %d, %v (want %q naming the file)\n%s", c.body, exitCode(err), err, c.want, out)
		}
	}
	if _, err := execute(t, "config", "check", filepath.Join(dir, "none.toml")); err == nil {
		t.Fatal("a missing file passed")
	}
}

// TestConfigCheckPassesEveryExampleInTheDocs runs config check on every
// ```toml block of the docs, in a directory holding the tokens.txt they
// name and, empty, the relative HOME templates their agent profiles name
// (home = "gemini-home": what the operator builds beside the file); a
// ```toml budgets block is a budgets file, checked as the one a
// configuration file names.
func TestConfigCheckPassesEveryExampleInTheDocs(t *testing.T) {
	pages, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	pages = append(pages, filepath.Join("..", "..", "README.md"))
	for i := range pages {
		pages[i], _ = filepath.Abs(pages[i]) // the checks run in directories of their own
	}
	n := 0
	for _, page := range pages {
		for line, block := range tomlBlocks(t, page) {
			n++
			dir := t.TempDir()
			writeFile(t, dir, "tokens.txt", tokenLine(t, "acme", "alice"))
			for _, m := range relativeHome.FindAllStringSubmatch(block, -1) {
				if err := os.MkdirAll(filepath.Join(dir, m[1]), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if rest, ok := strings.CutPrefix(block, budgetsBlock); ok {
				writeFile(t, dir, "budgets.toml", rest)
				block = "budgets = \"budgets.toml\"\n"
			}
			path := writeFile(t, dir, "agentry.toml", block)
			t.Chdir(dir)
			if out, err := execute(t, "config", "check", path); err != nil {
				t.Errorf("%s:%d: config check: %v\n%s", page, line, err, out)
			}
		}
	}
	if n == 0 {
		t.Fatal("the docs hold no ```toml example")
	}
}

// relativeHome finds a profile's home = "DIR" with a relative DIR.
var relativeHome = regexp.MustCompile(`(?m)^home = "([^/"][^"]*)"`)

// tomlBlocks returns the ```toml blocks of a Markdown page by the line of
// their opening fence.
func tomlBlocks(t *testing.T, page string) map[int]string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	open, n := 0, 0
	var body strings.Builder
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		switch {
		case open == 0 && (l == "```toml" || l == "```toml budgets"):
			open = n
			body.Reset()
			if l != "```toml" {
				body.WriteString(budgetsBlock)
			}
		case open != 0 && l == "```":
			out[open] = body.String()
			open = 0
		case open != 0:
			body.WriteString(sc.Text() + "\n")
		}
	}
	return out
}

// budgetsBlock marks a block of tomlBlocks that is a budgets file.
const budgetsBlock = "# budgets file\n"

func TestConfigRefusesAnOversizedFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "agentry.toml", "# "+strings.Repeat("x", maxConfigBytes)+"\n")
	o, f := serveFlags(t, "--config", path)
	if err := o.readConfig(f); err == nil || !strings.Contains(err.Error(), "over 1048576 bytes") {
		t.Fatalf("a file over the bound: %v", err)
	}
}

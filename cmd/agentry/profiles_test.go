package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestProfilesAreRead(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "claude-home"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	path := writeFile(t, dir, "agentry.toml", `max-turns = 8
default-agent = "claude"

[agents.native]
kind = "native"
model = "scripted"

[agents.claude]
command = "claude-agent-acp --verbose"
env = ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL=http://127.0.0.1:8081", "DISABLE_TELEMETRY=1"]
home = "claude-home"
mode = "default"
allow-host = ["127.0.0.1:8081"]
model = "sonnet"
models = ["sonnet", "opus"]
pool = 2
lend = ["run_code"]
`)
	o, f := serveFlags(t, "--config", path)
	if err := o.readConfig(f); err != nil {
		t.Fatal(err)
	}
	if err := o.takeProfiles(f); err != nil {
		t.Fatal(err)
	}
	if len(o.profiles) != 2 || o.defaultAgent != "claude" || o.maxTurns != 8 {
		t.Fatalf("profiles %d, default %q, max-turns %d", len(o.profiles), o.defaultAgent, o.maxTurns)
	}
	n, c := o.profiles[0], o.profiles[1]
	if n.name != "native" || n.kind != kindNative || n.model != "scripted" || n.line != 4 {
		t.Fatalf("native: %+v", n)
	}
	if c.name != "claude" || c.kind != kindACP || c.acp.cmd != "claude-agent-acp --verbose" || c.acp.home != "claude-home" || c.acp.mode != "default" ||
		c.acp.pool != 2 || c.model != "sonnet" || !slices.Equal(c.models, []string{"sonnet", "opus"}) || !slices.Equal(c.lend, []string{"run_code"}) ||
		len(c.acp.env) != 3 || !slices.Equal(c.acp.allowHosts, []string{"127.0.0.1:8081"}) {
		t.Fatalf("claude: %+v", c)
	}
	raw, err := c.acp.raw(filepath.Join(dir, "ws"), true)
	if err != nil || !strings.Contains(string(raw), `"command":["claude-agent-acp","--verbose"]`) || !strings.Contains(string(raw), `"home":"`+filepath.Join(dir, "claude-home")+`"`) || !strings.Contains(string(raw), `"keepHome":true`) {
		t.Fatalf("the ACP configuration: %s, %v", raw, err)
	}
	out, err := execute(t, "config", "check", path)
	if err != nil || !strings.Contains(out, "ok (1 settings, 2 agent profiles: native (native), claude (acp, the default))") {
		t.Fatalf("config check: %v\n%s", err, out)
	}

	// Without default-agent the first profile in the file is the default.
	path = writeFile(t, dir, "first.toml", "[agents.b]\nkind = \"native\"\n[agents.a]\nkind = \"native\"\n")
	o, f = serveFlags(t, "--config", path)
	if err := o.readConfig(f); err != nil {
		t.Fatal(err)
	}
	if err := o.takeProfiles(f); err != nil || o.defaultAgent != "b" {
		t.Fatalf("default %q, %v", o.defaultAgent, err)
	}
}

func TestProfilesRefusedWithFileAndLine(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
	}{
		{"bad name", "[agents.Claude]\nkind = \"native\"\n", `:1: [agents.Claude]: an agent's name is 1 to 64 of a-z`},
		{"no kind or command", "\n[agents.x]\nmode = \"plan\"\n", `:2: [agents.x] says neither kind nor command`},
		{"unknown kind", "[agents.x]\nkind = \"docker\"\n", `:2: agents.x.kind is native`},
		{"unknown key", "[agents.x]\ncommand = \"a\"\nmodle = \"b\"\n", `:3: agents.x.modle: unknown key "modle" in a acp profile`},
		{"native takes no command", "[agents.x]\nkind = \"native\"\ncommand = \"a\"\n", `:3: agents.x.command: unknown key "command" in a native profile`},
		{"native offers no models", "[agents.x]\nkind = \"native\"\nmodels = [\"a\"]\n", `:3: agents.x.models: unknown key`},
		{"wrong type", "[agents.x]\ncommand = [\"a\"]\n", `:2: agents.x.command: takes a string in quotes, not an array`},
		{"pool out of range", "[agents.x]\ncommand = \"a\"\npool = 65\n", `:3: agents.x.pool: takes a whole number from 0 to 64`},
		{"lend", "[agents.x]\ncommand = \"a\"\nlend = [\"deploy\"]\n", `:3: agents.x.lend: "deploy": the host tool there is to lend is run_code`},
		{"empty command", "[agents.x]\ncommand = \"\"\n", `agents.x.command: an ACP profile needs the agent's command`},
		{"bad command", "[agents.x]\ncommand = \"a 'b\"\n", `:2: agents.x.command: a ' is not closed`},
		{"missing home", "[agents.x]\ncommand = \"a\"\nhome = \"/nonexistent/home\"\n", `:3: agents.x.home: /nonexistent/home is not a directory`},
		{"bad host", "[agents.x]\ncommand = \"a\"\nallow-host = [\"nope\"]\n", `:3: agents.x.allow-host: [0]: `},
		{"bad fs", "[agents.x]\ncommand = \"a\"\nfs = \"read\"\n", `:3: agents.x.fs: `},
		{"a secret's value", "[agents.x]\ncommand = \"a\"\nenv = [\"OPENAI_API_KEY=hunter2\"]\n", `:3: agents.x.env: "OPENAI_API_KEY=…" gives a value, and its name says it holds a secret`},
		{"a secret by its look", "[agents.x]\ncommand = \"a\"\nenv = [\"MY_VAR=sk-hunter2\"]\n", `:3: agents.x.env: "MY_VAR=…" gives what looks like a secret`},
		{"a secret anywhere", "[agents.x]\ncommand = \"a\"\nmode = \"ghp_hunter2\"\n", `:3: agents.x.mode: holds what looks like a secret`},
		{"credentials shape", "[agents.x]\ncommand = \"a\"\ncredentials = { \"1X\" = \"anthropic\" }\n", `:3: agents.x.credentials: "1X" is not an environment variable's name`},
		{"credentials name", "[agents.x]\ncommand = \"a\"\ncredentials = { ANTHROPIC_API_KEY = \"An Thropic\" }\n", `:3: agents.x.credentials: ANTHROPIC_API_KEY: "An Thropic" is not a credential's name`},
		{"credentials need the store", "[agents.x]\ncommand = \"a\"\n\ncredentials = { ANTHROPIC_API_KEY = \"anthropic\" }\n", `:4: agents.x.credentials: credentials need --credentials-key-file`},
		{"default names none", "default-agent = \"y\"\n[agents.x]\nkind = \"native\"\n", `:1: default-agent "y" is not one of the profiles (x)`},
		{"default without profiles", "default-agent = \"y\"\n", `:1: default-agent names an agent profile, and the file has none`},
		{"agent flags beside profiles", "agent = \"acp\"\nagent-cmd = \"a\"\n[agents.x]\nkind = \"native\"\n", `:1: agent: with [agents.NAME] profiles each profile says`},
		{"lend beside profiles", "\nlend = [\"run_code\"]\n[agents.x]\nkind = \"native\"\n", `:2: lend: with [agents.NAME] profiles`},
		{"agents not a table", "agents = \"claude\"\n", `:1: agents is a table of agent profiles`},
		{"a profile not a table", "[agents]\nx = 1\n", `:2: agents.x is a whole number; an agent profile is a table`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "agentry.toml", c.body)
			o, f := serveFlags(t, "--config", path)
			err := o.readConfig(f)
			if err == nil {
				t.Fatalf("accepted:\n%s", c.body)
			}
			if !strings.Contains(err.Error(), path+c.want) && !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path+":") {
				t.Fatalf("got %q, want it to hold %q with file:line", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the refusal repeats the secret: %q", err)
			}
			// config check refuses it the same way.
			if _, err := execute(t, "config", "check", path); err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("config check: %v", err)
			}
		})
	}
}

func TestProfilesRefuseAgentFlagsOnTheCommandLine(t *testing.T) {
	path := writeFile(t, t.TempDir(), "agentry.toml", "[agents.x]\nkind = \"native\"\n")
	for _, args := range [][]string{{"--agent", "acp"}, {"--agent-cmd", "a"}, {"--lend", "run_code"}, {"--temporal", "127.0.0.1:7233"}} {
		o, f := serveFlags(t, append([]string{"--config", path}, args...)...)
		if err := o.readConfig(f); err != nil {
			t.Fatal(err)
		}
		err := o.takeProfiles(f)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "profiles") {
			t.Fatalf("%v beside profiles: %v", args, err)
		}
	}
}

func TestReloadNamesChangedProfiles(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "agentry.toml", "[agents.x]\nkind = \"native\"\n")
	o, f := serveFlags(t, "--config", path)
	if err := o.readConfig(f); err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string][]string{
		"[agents.x]\nkind = \"native\"\n":                                nil,
		"[agents.x]\nkind = \"native\"\nmodel = \"scripted\"\n":          {"agents"},
		"[agents.x]\nkind = \"native\"\n[agents.y]\nkind = \"native\"\n": {"agents"},
		"max-turns = 3\n[agents.x]\nkind = \"native\"\n":                 {"max-turns"},
	} {
		writeFile(t, dir, "agentry.toml", body)
		next, _, err := readConfigSum(path, f)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.conf.changed(next); !slices.Equal(got, want) {
			t.Fatalf("%q: changed %q, want %q", body, got, want)
		}
	}
}

func TestProfileCredentials(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "creds.key")
	if err := os.WriteFile(key, []byte("k1 "+strings.Repeat("A", 43)+"=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	profile := "[agents.claude]\ncommand = \"claude-agent-acp\"\ncredentials = { ANTHROPIC_API_KEY = \"anthropic\", GH_TOKEN = \"gh\" }\n"
	check := func(t *testing.T, path string, args ...string) {
		t.Helper()
		o, f := serveFlags(t, append([]string{"--config", path}, args...)...)
		if err := o.readConfig(f); err != nil {
			t.Fatal(err)
		}
		if err := o.takeProfiles(f); err != nil {
			t.Fatal(err)
		}
		raw, err := o.profiles[0].acp.raw(filepath.Join(dir, "ws"), true)
		if err != nil || !strings.Contains(string(raw), `"credentials":[{"var":"ANTHROPIC_API_KEY","name":"anthropic"},{"var":"GH_TOKEN","name":"gh"}]`) {
			t.Fatalf("the ACP configuration: %s, %v", raw, err)
		}
		_, hc := profileCredentials(o.profiles[0].credentials)
		if len(hc) != 2 || hc[0].Name != "anthropic" || hc[0].Var != "ANTHROPIC_API_KEY" || hc[1].Name != "gh" {
			t.Fatalf("the host's credentials: %+v", hc)
		}
	}
	// The key file in the configuration file, or on the command line.
	inFile := writeFile(t, dir, "in-file.toml", "credentials-key-file = \""+key+"\"\n"+profile)
	check(t, inFile)
	if out, err := execute(t, "config", "check", inFile); err != nil || !strings.Contains(out, "1 agent profiles") {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	check(t, writeFile(t, dir, "flag.toml", profile), "--credentials-key-file", key)

	// --agent-credential beside profiles: each profile names its own.
	path := writeFile(t, dir, "both.toml", "agent-credential = [\"X=y\"]\ncredentials-key-file = \""+key+"\"\n"+profile)
	o, f := serveFlags(t, "--config", path)
	if err := o.readConfig(f); err == nil || !strings.Contains(err.Error(), path+":1: agent-credential: with [agents.NAME] profiles") {
		t.Fatalf("agent-credential beside profiles in the file: %v", err)
	}
	o, f = serveFlags(t, "--config", inFile, "--agent-credential", "X=y")
	if err := o.readConfig(f); err != nil {
		t.Fatal(err)
	}
	if err := o.takeProfiles(f); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "--agent-credential with agent profiles") {
		t.Fatalf("--agent-credential beside profiles: %v", err)
	}
}

//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// codexACPEnv names the directory .ci/run installs
// @agentclientprotocol/codex-acp into (npm --prefix); defaultCodexACP is
// where it looks otherwise.
const (
	codexACPEnv     = "AGENTRY_CODEX_ACP"
	defaultCodexACP = "/var/cache/agentry/codex-acp"
	codexACPPackage = "@agentclientprotocol/codex-acp@2.6.0"
)

// codexHome is the HOME template of the recipe in docs/acp.md, for a
// Responses API at base (…/v1): Codex's default provider pointed there,
// nothing else it would reach on its own (update checks, analytics,
// plugins from GitHub and chatgpt.com).
func codexHome(base string) string {
	return fmt.Sprintf(`openai_base_url = %q
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
apps = false
remote_plugin = false
plugin_discovery_prefetch = false
recommended_plugins = false
`, base)
}

// exec is a Codex model's call of its exec tool, whose input is
// JavaScript calling the nested tools (tools.apply_patch,
// tools.exec_command, tools.mcp__SERVER__TOOL) and printing with text().
func codexExec(js string) modelwire.Reply {
	return modelwire.Reply{Text: "Working on it.", Calls: []modelwire.Call{{Name: "exec", Input: js}}}
}

// jsString quotes s for JavaScript (JSON strings are JavaScript strings).
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The bar for Codex: a real codex-acp (and the codex binary it
// runs) from the npm registry, served by the built binary with `agentry
// serve --agent acp`, jailed, driven offline by a local server speaking
// OpenAI's Responses API (modelwire.NewResponses) behind Codex's default
// provider, the key in OPENAI_API_KEY negotiated through the agent's
// api-key authentication method. In its read-only mode it writes
// hello.txt in its workspace with apply_patch after a permission request
// approved through POST …/decision; a patch outside the workspace lands
// nowhere on the host; it calls the lent run_code over MCP and gets 42; a
// dial from its shell to the host's own port is refused (a jail event);
// the turn's usage is structured data in GET /v1/usage; the events file
// audits clean.
func TestServeCodexACP(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	bin := npmAgent(t, codexACPEnv, defaultCodexACP, "codex-acp", codexACPPackage)
	agentCmd := "node " + filepath.Join(filepath.Dir(filepath.Dir(bin)), "@agentclientprotocol", "codex-acp", "dist", "index.js")
	agentry := binary(t)
	dir, events := agentDir(t)

	var hostPort atomicString
	escape := filepath.Join(dir, "workspaces", "escape.txt")
	agent := &scriptedAgent{marker: "request_user_input", steps: []func(modelwire.Turn) modelwire.Reply{
		func(modelwire.Turn) modelwire.Reply {
			return codexExec(`text(JSON.stringify(await tools.apply_patch(` +
				jsString("*** Begin Patch\n*** Add File: hello.txt\n+written by codex\n*** End Patch\n") + `)));`)
		},
		func(modelwire.Turn) modelwire.Reply {
			return codexExec(`text(JSON.stringify(await tools.apply_patch(` +
				jsString("*** Begin Patch\n*** Add File: "+escape+"\n+out\n*** End Patch\n") + `)));`)
		},
		func(modelwire.Turn) modelwire.Reply {
			return codexExec(`const r = await tools.mcp__agentry__run_code({code: "print(6*7)"});
text(r.content.map(c => c.text).join(""));`)
		},
		func(modelwire.Turn) modelwire.Reply {
			cmd := "python3 -c \"import socket; socket.create_connection(('127.0.0.1', " + hostPort.get() + "), 3); print('REACHED')\""
			return codexExec(`text(JSON.stringify(await tools.exec_command({cmd: ` + jsString(cmd) +
				`, sandbox_permissions: "require_escalated", justification: "dial the host"})));`)
		},
	}}
	const key = "sk-offline-codex"
	model := modelwire.NewResponses(modelwire.Options{APIKey: key, Script: agent.script})
	defer model.Close()
	u, _ := url.Parse(model.URL)
	home := filepath.Join(dir, "home")
	writeTemplate(t, home, ".codex/config.toml", codexHome(model.URL+"/v1"))

	p := startServeBinary(t, agentry, []string{"OPENAI_API_KEY=" + key}, "--agent", "acp", "--agent-cmd", agentCmd,
		"--agent-env", "OPENAI_API_KEY", "--agent-env", "PATH", "--agent-auth", "api-key",
		"--agent-home", home, "--agent-mode", "read-only",
		"--agent-allow-host", u.Host, "--lend", "run_code", "--runner", "jail",
		"--workspaces", filepath.Join(dir, "workspaces"),
		"--store", filepath.Join(dir, "agentry.db"), "--events", events)
	pu, _ := url.Parse(p.url)
	hostPort.set(pu.Port())

	body, approved := approvedTurn(t, p, "Write hello.txt, then show me what you can reach.")
	seen := agent.results()
	t.Logf("answer: %s\napproved: %q", body, approved)
	if !strings.Contains(string(body), "All done.") {
		b, _ := os.ReadFile(events)
		t.Fatalf("the turn did not end with the model's answer: %s\nmodel saw: %q\n%s\nevents:\n%s", body, seen, p.stderr, b)
	}
	if len(approved) == 0 {
		t.Fatal("no permission request reached the decision endpoint")
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*", "hello.txt"))
	if len(matches) != 1 {
		t.Fatalf("hello.txt in the workspaces: %v\nmodel saw: %q", matches, seen)
	}
	if b, _ := os.ReadFile(matches[0]); string(b) != "written by codex\n" {
		t.Fatalf("hello.txt holds %q", b)
	}
	if _, err := os.Stat(escape); err == nil {
		t.Error("the agent wrote outside its workspace")
	}
	joined := strings.Join(seen, "\n")
	if len(seen) < 4 || !strings.Contains(seen[2], "42") {
		t.Errorf("the lent run_code's result did not reach the model: %q", seen)
	}
	if strings.Contains(joined, "REACHED") {
		t.Errorf("the agent reached the host's own port: %q", seen)
	}
	checkUsage(t, p)
	stopAndCheckJailed(t, p, agentry, events, pu.Port())
}

// checkUsage reads the caller's usage by model: the turn's tokens are
// there as numbers, under the model the agent named.
func checkUsage(t *testing.T, p *process) {
	t.Helper()
	code, b := p.call(t, "GET", "/v1/usage?by=model", "")
	if code != 200 {
		t.Fatalf("GET /v1/usage: %d %s", code, b)
	}
	type row struct {
		Key                       string
		Turns                     int64
		InputTokens, OutputTokens int64
	}
	var u struct {
		Rows  []row
		Total row
	}
	if err := json.Unmarshal(b, &u); err != nil {
		t.Fatal(err)
	}
	if u.Total.Turns == 0 || !slices.ContainsFunc(u.Rows, func(r row) bool {
		return r.Key != "" && r.InputTokens > 0 && r.OutputTokens > 0
	}) {
		t.Errorf("no model's row with the turn's tokens in the usage: %s", b)
	}
}

// A refused egress of a real agent shows on the terminal of `agentry run`
// (TestRunPrintsRefusedEgress shows the line comes as it happens): Codex
// with a HOME template that leaves its plugin features on reaches for
// github.com and chatgpt.com at start; each refusal is a line on stderr
// naming the flag that would allow it, and the turn still answers.
func TestRunCodexPrintsRefusedEgress(t *testing.T) {
	// Parallel: its own serve, directories and ports; the package's
	// built-binary tests take most of CI's time one after another.
	t.Parallel()
	bin := npmAgent(t, codexACPEnv, defaultCodexACP, "codex-acp", codexACPPackage)
	agentCmd := "node " + filepath.Join(filepath.Dir(filepath.Dir(bin)), "@agentclientprotocol", "codex-acp", "dist", "index.js")
	agentry := binary(t)
	dir, events := agentDir(t)
	const key = "sk-offline-codex"
	model := modelwire.NewResponses(modelwire.Options{APIKey: key, Script: func(modelwire.Turn) modelwire.Reply {
		return modelwire.Reply{Text: "All done."}
	}})
	defer model.Close()
	u, _ := url.Parse(model.URL)
	home := filepath.Join(dir, "home")
	writeTemplate(t, home, ".codex/config.toml", fmt.Sprintf("openai_base_url = %q\n", model.URL+"/v1"))
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agentry, "run", "--agent", "acp", "--agent-cmd", agentCmd,
		"--agent-env", "OPENAI_API_KEY", "--agent-env", "PATH", "--agent-auth", "api-key",
		"--agent-home", home, "--agent-mode", "read-only", "--agent-allow-host", u.Host,
		"--workspace", ws, "--events", events, "Say hello.")
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "All done.") {
		t.Fatalf("agentry run: %v\n%s", err, out)
	}
	var refusals []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "the jail refused the agent's connection to ") && strings.Contains(l, "to allow it, pass --agent-allow-host ") {
			refusals = append(refusals, l)
		}
	}
	if len(refusals) == 0 {
		t.Fatalf("no line on the terminal for a refused connection:\n%s", out)
	}
	t.Logf("refusals shown: %q", refusals)
}

//go:build linux

package main

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// openCodeEnv names the directory .ci/run installs OpenCode into (npm
// --prefix); defaultOpenCode is where it looks otherwise (not under /tmp,
// which the jail replaces).
const (
	openCodeEnv     = "AGENTRY_OPENCODE"
	defaultOpenCode = "/var/cache/agentry/opencode"
	openCodePackage = "opencode-ai@1.18.33"
)

// openCodeConfig is the HOME template's ~/.config/opencode/opencode.json:
// one provider of its own, "agentry", on the bundled Anthropic SDK, whose
// base URL and key come from the environment; its one model for every
// request (the small one too, which names sessions); no sharing, no
// auto-update; file edits ask first.
//
// Its embedded npm is told to stay offline (~/.npmrc): at start OpenCode
// installs @opencode-ai/plugin into every configuration directory it can
// write, from registry.npmjs.org, which the jail refuses (a
// connection_refused event each); offline, the install fails at once and
// OpenCode goes on without it (the package is for plugins written in that
// directory, and there are none).
const openCodeConfig = `{
  "$schema": "https://opencode.ai/config.json",
  "model": "agentry/scripted",
  "small_model": "agentry/scripted",
  "autoupdate": false,
  "share": "disabled",
  "permission": {"edit": "ask"},
  "provider": {
    "agentry": {
      "npm": "@ai-sdk/anthropic",
      "name": "agentry",
      "options": {"baseURL": "{env:AGENTRY_MODEL_URL}", "apiKey": "{env:ANTHROPIC_API_KEY}"},
      "models": {"scripted": {"name": "scripted", "tool_call": true, "limit": {"context": 200000, "output": 8192}}}
    }
  }
}
`

// A real OpenCode from the npm registry, in its own ACP mode (opencode
// acp), served by the built binary with `agentry serve --agent acp`,
// jailed, driven offline by a local server speaking Anthropic's Messages
// wire format (a provider of its own in opencode.json, from the HOME
// template). It writes hello.txt in its workspace with its own write
// tool after a permission request approved through POST …/decision
// (OpenCode writes an approved edit through the client, fs/write_text_file,
// then again with its own tool in the jail); it
// calls the lent run_code tool over MCP and gets its result; it tries
// nothing off its allowlist; the events file audits clean.
func TestServeOpenCodeACP(t *testing.T) {
	agentCmd := npmAgent(t, openCodeEnv, defaultOpenCode, "opencode", openCodePackage)
	bin := binary(t)
	dir, events := agentDir(t)

	const key = "sk-ant-offline"
	agent := &scriptedAgent{marker: "write", steps: []func(modelwire.Turn) modelwire.Reply{
		func(turn modelwire.Turn) modelwire.Reply {
			return callTool("write", map[string]any{"filePath": filepath.Join(workingDirectory(turn.System), "hello.txt"), "content": "written by opencode\n"})
		},
		func(turn modelwire.Turn) modelwire.Reply {
			// OpenCode names an MCP server's tool SERVER_TOOL.
			if !slices.Contains(turn.Tools, "agentry_run_code") {
				return modelwire.Reply{Text: "The lent run_code is not among my tools: " + strings.Join(turn.Tools, ", ")}
			}
			return callTool("agentry_run_code", map[string]any{"code": "print('six times seven is', 6*7)"})
		},
	}}
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: key, Script: agent.script})
	defer model.Close()
	u, _ := url.Parse(model.URL)

	home := filepath.Join(dir, "home")
	writeTemplate(t, home, ".config/opencode/opencode.json", openCodeConfig)
	writeTemplate(t, home, ".npmrc", "offline=true\n")

	// Without OPENCODE_DISABLE_MODELS_FETCH OpenCode fetches its model
	// catalogue from models.opencode.ai at start; with it, it uses the one
	// it was built with, and the configuration's own provider.
	agentEnv := []string{"ANTHROPIC_API_KEY=" + key, "AGENTRY_MODEL_URL=" + model.URL + "/v1", "OPENCODE_DISABLE_MODELS_FETCH=true"}
	p := startServeBinary(t, bin, agentEnv, "--agent", "acp", "--agent-cmd", agentCmd+" acp",
		"--agent-env", "ANTHROPIC_API_KEY", "--agent-env", "AGENTRY_MODEL_URL",
		"--agent-env", "OPENCODE_DISABLE_MODELS_FETCH",
		"--agent-home", home,
		"--agent-allow-host", u.Host, "--lend", "run_code", "--runner", "jail",
		"--workspaces", filepath.Join(dir, "workspaces"),
		"--store", filepath.Join(dir, "agentry.db"), "--events", events)

	body, approved := approvedTurn(t, p, "Write hello.txt, then compute 6*7.")
	t.Logf("answer: %s", body)
	results := agent.results()
	if !strings.Contains(string(body), "All done.") {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.wait()
		b, _ := os.ReadFile(events)
		t.Fatalf("the turn did not end with the model's answer: %s\nmodel saw: %q\nmodel served: %d requests\n%s\nevents:\n%s", body, results, len(model.Requests()), p.stderr, b)
	}
	if len(approved) != 1 || !strings.Contains(approved[0], "hello.txt") {
		t.Fatalf("the write of hello.txt did not reach the decision endpoint (approved: %q)", approved)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*", "hello.txt"))
	if len(matches) != 1 {
		t.Fatalf("hello.txt in the workspaces: %v\nmodel saw: %q", matches, results)
	}
	if b, _ := os.ReadFile(matches[0]); string(b) != "written by opencode\n" {
		t.Fatalf("hello.txt holds %q", b)
	}
	if len(results) == 0 || !strings.Contains(results[0], "Wrote file successfully") {
		t.Errorf("OpenCode's own write tool did not succeed after the client's write: %q", results)
	}
	if !strings.Contains(strings.Join(results, "\n"), "six times seven is 42") {
		t.Errorf("the lent run_code's result did not reach the model: %q", results)
	}

	stopAndCheckEvents(t, p, bin, events)
}

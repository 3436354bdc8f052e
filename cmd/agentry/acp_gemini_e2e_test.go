//go:build linux

package main

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/internal/modelwire"
)

// geminiCLIEnv names the directory .ci/run installs Gemini CLI into (npm
// --prefix); defaultGeminiCLI is where it looks otherwise. It must be
// outside /tmp: the jail gives the agent a private /tmp, so an install
// there is not found inside.
const (
	geminiCLIEnv     = "AGENTRY_GEMINI_CLI"
	defaultGeminiCLI = "/var/cache/agentry/gemini-cli"
	geminiCLIPackage = "@google/gemini-cli@0.61.0"
)

// A real Gemini CLI from the npm registry, in its own ACP mode (--acp),
// served by the built binary with `agentry serve --agent acp`, jailed,
// driven offline by a local server speaking the Gemini API's wire format
// (GOOGLE_GEMINI_BASE_URL). It creates hello.txt in its workspace with
// its own write_file tool after a permission request approved through
// POST …/decision, the write coming through the client (--agent-fs
// write); it calls the lent run_code tool over MCP and gets its result;
// it tries nothing off its allowlist; the events file audits clean.
func TestServeGeminiCLIACP(t *testing.T) {
	agentCmd := npmAgent(t, geminiCLIEnv, defaultGeminiCLI, "gemini", geminiCLIPackage)
	bin := binary(t)
	dir, events := agentDir(t)

	const key = "gemini-offline"
	agent := &scriptedAgent{marker: "write_file", steps: []func(modelwire.Turn) modelwire.Reply{
		func(modelwire.Turn) modelwire.Reply {
			// A path relative to the session's directory, as the tool takes.
			return callTool("write_file", map[string]any{"file_path": "hello.txt", "content": "written by gemini cli\n"})
		},
		func(turn modelwire.Turn) modelwire.Reply {
			// Gemini CLI names an MCP server's tool mcp_SERVER_TOOL.
			if !slices.Contains(turn.Tools, "mcp_agentry_run_code") {
				return modelwire.Reply{Text: "The lent run_code is not among my tools: " + strings.Join(turn.Tools, ", ")}
			}
			// Printed text that is not JSON (see docs/acp.md on Gemini CLI
			// and lent tools).
			return callTool("mcp_agentry_run_code", map[string]any{"code": "print('six times seven is', 6*7)"})
		},
	}}
	model := modelwire.NewGemini(modelwire.Options{APIKey: key, Script: agent.script})
	defer model.Close()
	u, _ := url.Parse(model.URL)

	// The HOME template: no usage statistics (they go to
	// play.googleapis.com), and a fixed model, so Gemini CLI does not
	// first ask a small model to pick one.
	home := filepath.Join(dir, "home")
	writeTemplate(t, home, ".gemini/settings.json", `{"privacy": {"usageStatisticsEnabled": false}, "model": {"name": "gemini-2.5-flash"}}`+"\n")

	agentEnv := []string{"GEMINI_API_KEY=" + key, "GOOGLE_GEMINI_BASE_URL=" + model.URL, "GEMINI_CLI_TRUST_WORKSPACE=true"}
	p := startServeBinary(t, bin, agentEnv, "--agent", "acp", "--agent-cmd", agentCmd+" --acp",
		"--agent-env", "GEMINI_API_KEY", "--agent-env", "GOOGLE_GEMINI_BASE_URL",
		"--agent-env", "GEMINI_CLI_TRUST_WORKSPACE",
		"--agent-home", home, "--agent-fs", "write",
		"--agent-allow-host", u.Host, "--lend", "run_code", "--runner", "jail",
		"--workspaces", filepath.Join(dir, "workspaces"),
		"--store", filepath.Join(dir, "agentry.db"), "--events", events)

	body, approved := approvedTurn(t, p, "Write hello.txt, then compute 6*7.")
	t.Logf("answer: %s", body)
	results := agent.results()
	if !strings.Contains(string(body), "All done.") {
		b, _ := os.ReadFile(events)
		t.Fatalf("the turn did not end with the model's answer: %s\nmodel saw: %q\nmodel served: %q\n%s\nevents:\n%s", body, results, servedPaths(model), p.stderr, b)
	}
	if len(approved) != 2 || !strings.Contains(approved[0], "hello.txt") || !strings.Contains(approved[1], "run_code") {
		t.Fatalf("the write of hello.txt and the call of run_code did not reach the decision endpoint (approved: %q)", approved)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*", "hello.txt"))
	if len(matches) != 1 {
		t.Fatalf("hello.txt in the workspaces: %v\nmodel saw: %q", matches, results)
	}
	if b, _ := os.ReadFile(matches[0]); string(b) != "written by gemini cli\n" {
		t.Fatalf("hello.txt holds %q", b)
	}
	if !strings.Contains(strings.Join(results, "\n"), "six times seven is 42") {
		t.Errorf("the lent run_code's result did not reach the model: %q", results)
	}

	stopAndCheckEvents(t, p, bin, events)
}

// servedPaths lists the paths of the requests a model server answered, in order.
func servedPaths(s *modelwire.Server) []string {
	var paths []string
	for _, r := range s.Requests() {
		paths = append(paths, r.Path)
	}
	return paths
}

package mcpserve_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// requireNode is the environment variable that turns a missing node or npm
// from a skip into a failure. CI=true does the same: a skip there would
// pass unseen, since go test shows a passing package's output only with -v.
const requireNode = "AGENTRY_REQUIRE_NODE"

// TestTypeScriptClient drives the door from the reference MCP client, the
// TypeScript SDK from the npm registry, over stdio: testdata/tsclient
// spawns internal/testserver and calls its tools.
func TestTypeScriptClient(t *testing.T) {
	node, nodeErr := exec.LookPath("node")
	npm, npmErr := exec.LookPath("npm")
	if nodeErr != nil || npmErr != nil {
		msg := fmt.Sprintf("node or npm is not installed (node: %v, npm: %v): the door is NOT tested against the TypeScript SDK client; install nodejs and npm (Debian: apt-get install nodejs npm)", nodeErr, npmErr)
		if os.Getenv(requireNode) != "" || os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		fmt.Fprintf(os.Stderr, "\n!!! SKIPPED %s: %s\n\n", t.Name(), msg)
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dir, err := filepath.Abs(filepath.Join("testdata", "tsclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); errors.Is(err, os.ErrNotExist) {
		t.Logf("installing the TypeScript SDK with npm ci in %s", dir)
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		install.Dir = dir
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("npm ci (it needs the npm registry): %v\n%s", err, out)
		}
	}

	tmp := t.TempDir()
	server := filepath.Join(tmp, "testserver")
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build the test server: %v", err)
	}
	build := exec.CommandContext(ctx, goTool, "build", "-o", server, "./internal/testserver")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the test server: %v\n%s", err, out)
	}

	events := filepath.Join(tmp, "events.ndjson")
	var stdout, stderr bytes.Buffer
	client := exec.CommandContext(ctx, node, "client.mjs", server, "-events", events)
	client.Dir = dir
	client.Stdout, client.Stderr = &stdout, &stderr
	if err := client.Run(); err != nil {
		t.Fatalf("the TypeScript client failed: %v\nstderr:\n%s", err, stderr.String())
	}

	var got struct {
		Server struct{ Name string }
		Tools  []struct {
			Name        string
			InputSchema struct {
				Type       string
				Properties map[string]any
				Required   []string
			}
		}
		Whoami, WhoamiAgain, Scratch, Wider, BadArgs tsResult
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("the client's report: %v\n%s", err, stdout.String())
	}

	if got.Server.Name != "agentry-testserver" || len(got.Tools) != 2 {
		t.Fatalf("server %q with %d tools", got.Server.Name, len(got.Tools))
	}
	for _, tl := range got.Tools {
		if tl.InputSchema.Type != "object" {
			t.Errorf("tool %s: schema type %q", tl.Name, tl.InputSchema.Type)
		}
		if tl.Name == "scratch" && (tl.InputSchema.Properties["text"] == nil || len(tl.InputSchema.Required) != 1 || tl.InputSchema.Required[0] != "text") {
			t.Errorf("scratch schema %+v", tl.InputSchema)
		}
	}

	var facts, again struct {
		ToolCallID string          `json:"toolCallId"`
		RunID      string          `json:"runId"`
		SessionID  string          `json:"sessionId"`
		Identity   json.RawMessage `json:"identity"`
		Scopes     []string        `json:"scopes"`
	}
	got.Whoami.decode(t, &facts)
	got.WhoamiAgain.decode(t, &again)
	if !strings.HasPrefix(facts.ToolCallID, "mcp-") || facts.ToolCallID == again.ToolCallID {
		t.Errorf("tool call ids %q and %q: want fresh ones", facts.ToolCallID, again.ToolCallID)
	}
	if facts.RunID != "" || facts.SessionID != "" || string(facts.Identity) != "null" || strings.Join(facts.Scopes, ",") != "call" {
		t.Errorf("facts over stdio %+v: want no run, no session, no identity, scopes [call]", facts)
	}

	var scratch struct{ Dir string }
	got.Scratch.decode(t, &scratch)
	if scratch.Dir == "" {
		t.Fatal("scratch reported no directory")
	}
	if _, err := os.Stat(scratch.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the call's scratch directory %s is still there (stat: %v): its cleanup did not fire", scratch.Dir, err)
	}

	if msg := got.Wider.text(); !got.Wider.IsError || !strings.Contains(msg, `"run"`) || !strings.Contains(msg, "[call]") {
		t.Errorf("asking for scope run: isError=%v %q", got.Wider.IsError, msg)
	}
	if msg := got.BadArgs.text(); !got.BadArgs.IsError || !strings.Contains(msg, `field "text"`) {
		t.Errorf("bad arguments: isError=%v %q", got.BadArgs.IsError, msg)
	}

	// The server's own record: one session, opened and closed at the end of
	// its call.
	f, err := os.Open(events)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var started, closed []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		e, err := event.Decode(sc.Bytes())
		if err != nil {
			t.Fatalf("event line %q: %v", sc.Text(), err)
		}
		switch p := e.Payload.(type) {
		case *tool.SessionOpened:
			started = append(started, p.KeyHash)
		case *tool.SessionClosed:
			if e.Type != tool.TypeSessionClosed || p.Reason != "call-end" {
				t.Errorf("close event %s %+v", e.Type, p)
			}
			closed = append(closed, p.KeyHash)
		}
	}
	if len(started) != 1 || len(closed) != 1 || started[0] != closed[0] {
		t.Errorf("sessions started %v, closed %v: want the one scratch session opened and closed", started, closed)
	}
}

type tsResult struct {
	Content []struct {
		Type string
		Text string
	}
	IsError bool
}

func (r tsResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func (r tsResult) decode(t *testing.T, v any) {
	t.Helper()
	if r.IsError {
		t.Fatalf("the call failed: %s", r.text())
	}
	if err := json.Unmarshal([]byte(r.text()), v); err != nil {
		t.Fatalf("result %q: %v", r.text(), err)
	}
}

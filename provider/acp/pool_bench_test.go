package acp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/internal/modelwire"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

// realClaude is claude-agent-acp as .ci/run installs it; under CI=true
// its absence fails, elsewhere it skips.
func realClaude(b *testing.B) string {
	dir := os.Getenv("AGENTRY_CLAUDE_AGENT_ACP")
	if dir == "" {
		dir = "/var/cache/agentry/claude-agent-acp"
	}
	p := filepath.Join(dir, "node_modules", ".bin", "claude-agent-acp")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatalf("claude-agent-acp is not installed (.ci/run installs it): %v", err)
		}
		b.Skipf("claude-agent-acp is not installed (.ci/run installs it): %v", err)
	}
	return p
}

// BenchmarkPoolFirstAnswer measures a new conversation's first answer
// from a real agent (claude-agent-acp from npm, jailed, answering through
// a local Messages-API server), cold against taken from a warm pool, in
// the same run, and taken from the pool by a conversation the host lends a
// tool (pooled-lending: the host said so ahead, ExpectHostTools, so the
// pooled session was opened with the host-tools MCP server listing it);
// the pool's refill is not timed (each pooled iteration waits, off the
// clock, for the pool's agent_pooled event: an agent ready to be taken,
// listing the lent tool when one is lent), and every pooled iteration must
// have run in a pool workspace, lending ones in the session opened ahead. It also reports the
// resident memory of one live agent (its process tree, found by its
// working directory), as rss-mib-per-agent.
//
//	go test -run '^$' -bench PoolFirstAnswer -benchtime 4x ./provider/acp/
func BenchmarkPoolFirstAnswer(b *testing.B) {
	bin := realClaude(b)
	home := claudeHome(b, bin)
	var tl timeline
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-bench", Script: func(t modelwire.Turn) modelwire.Reply {
		what := "model request (the answer)"
		switch {
		case len(t.Tools) == 0:
			what = "model request (the session title)"
		case t.Asked == callEcho && t.Answered == 0:
			return modelwire.Reply{Calls: []modelwire.Call{{Name: "mcp__agentry__echo", Args: json.RawMessage(`{"text":"hi"}`)}}}
		case t.Asked == callEcho:
			return modelwire.Reply{Text: "echo said " + strings.Join(t.ToolResults, " ")}
		}
		tl.mark(what)
		return modelwire.Reply{Text: "ready"}
	}})
	defer model.Close()
	env := append([]string{"ANTHROPIC_BASE_URL=" + model.URL, "ANTHROPIC_API_KEY=sk-ant-bench", "PATH=/usr/local/bin:/usr/bin:/bin"}, claudeRecipeEnv...)
	for _, v := range []struct {
		name string
		pool int
		lend bool
	}{{"cold", 0, false}, {"pooled", 1, false}, {"pooled-lending", 1, true}} {
		name, pool := v.name, v.pool
		b.Run(name, func(b *testing.B) {
			r, _ := jailedRigTB(b)
			cfg := acp.Config{Command: []string{bin}, Env: env, Home: home, Mode: "default", WorkspaceRoot: r.root, Pool: pool,
				AllowHosts: []string{strings.TrimPrefix(model.URL, "http://")}}
			inst := r.instance(mustJSON(b, cfg))
			if v.lend {
				t := lentEcho(nil).Tools[0]
				if err := inst.Adapter().ExpectHostTools([]provider.HostToolSpec{{Name: t.Name, Description: t.Description}}); err != nil {
					b.Fatal(err)
				}
			}
			var total time.Duration
			var waitingRSS float64
			n := 0
			for b.Loop() {
				n++
				if pool > 0 {
					b.StopTimer()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					awaitPooled(ctx, r, n, v.lend)
					cancel()
					if n == 1 {
						waitingRSS = rssOfWaiting(b, r.root)
					}
					b.StartTimer()
				}
				ws := filepath.Join(r.root, fmt.Sprintf("c%d", n))
				if err := os.Mkdir(ws, 0o700); err != nil {
					b.Fatal(err)
				}
				start := tl.begin()
				req := provider.CreateRequest{SessionID: fmt.Sprintf("c%d", n), WorkingDirectory: ws}
				var echoed atomic.Int32
				if v.lend {
					req.HostBinding = lentEcho(&echoed)
				}
				s, err := inst.Adapter().Create(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				tl.mark("Create returned; prompt sent")
				answered := false
				for o, err := range s.RunTurn(context.Background(), provider.TurnRequest{TurnID: "t1", Input: "Say ready."}) {
					if err != nil {
						b.Fatal(err)
					}
					if !answered {
						tl.mark("output " + string(o.Kind))
					}
					if o.Kind == provider.OutputText && !answered {
						answered = true
						total += time.Since(start)
					}
				}
				if !answered {
					b.Fatal("the agent ended its turn without text")
				}
				b.StopTimer()
				b.Logf("%s conversation %d, from Create:\n%s", name, n, tl.end())
				if real, _ := filepath.EvalSymlinks(ws); (pool > 0) != strings.HasPrefix(filepath.Base(real), "pool-") {
					b.Fatalf("conversation %d ran in %s: pooled is %v", n, real, pool > 0)
				}
				if n == 1 {
					real, _ := filepath.EvalSymlinks(ws)
					b.ReportMetric(rssUnder(real)/(1<<20), "rss-mib-per-agent")
				}
				if tk := r.events.of(acp.TypeAgentTaken); v.lend && (len(tk) != n || tk[n-1].Payload.(*acp.AgentTaken).Reopened != "") {
					b.Fatalf("conversation %d did not keep the session opened ahead: %+v", n, tk)
				}
				if v.lend {
					// Off the clock: the lent tool, called through the MCP
					// server the session was opened with ahead, reaches this
					// conversation's binding.
					if got := approvedTurn(b, s, "t2", callEcho); !strings.Contains(got, `echo said {"text":"hi"}`) || echoed.Load() != 1 {
						b.Fatalf("conversation %d: the lent tool's turn said %q, the binding answered %d calls", n, got, echoed.Load())
					}
				}
				_ = s.Close(context.Background(), provider.CloseRequested)
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(n), "first-answer-ms")
			if pool > 0 {
				b.ReportMetric(waitingRSS/(1<<20), "rss-mib-waiting")
			}
		})
	}
}

// awaitPooled waits until n agents joined the pool listing host tools
// (lending) or none.
func awaitPooled(ctx context.Context, r *rig, n int, lending bool) {
	for k := n; ctx.Err() == nil; k++ {
		got := 0
		for _, e := range r.events.await(ctx, acp.TypeAgentPooled, k) {
			if len(e.Payload.(*acp.AgentPooled).HostTools) > 0 == lending {
				got++
			}
		}
		if got >= n {
			return
		}
	}
}

// callEcho is the prompt the benchmark's model answers by calling the
// lent tool.
const callEcho = "Call echo."

// approvedTurn runs a turn, approving each request, and returns its text.
func approvedTurn(b *testing.B, s *provider.ValidatedSession, turnID, input string) string {
	var text strings.Builder
	next := s.RunTurn(context.Background(), provider.TurnRequest{TurnID: turnID, Input: input})
	for next != nil {
		outs := next
		next = nil
		for o, err := range outs {
			if err != nil {
				b.Fatal(err)
			}
			switch o.Kind {
			case provider.OutputText:
				text.WriteString(o.Text)
			case provider.OutputRequest:
				next = s.Resolve(context.Background(), provider.Resolution{TurnID: turnID, RequestID: o.Request.ID, Approve: true})
			}
		}
	}
	return text.String()
}

// lentEcho lends one host tool, as a host lending run_code does: the
// agent's session is then opened with the host-tools MCP server. calls
// counts its calls.
func lentEcho(calls *atomic.Int32) *provider.HostBinding {
	return &provider.HostBinding{
		Tools: []provider.HostTool{{Name: "echo", Description: "says its arguments back",
			Invoke: func(_ context.Context, inv provider.HostInvocation) (provider.HostToolResult, error) {
				calls.Add(1)
				return provider.HostToolResult{Output: inv.Arguments}, nil
			}}},
		Release: func(context.Context) error { return nil },
	}
}

// claudeRecipeEnv is the environment docs/acp.md's Claude Code recipe
// gives the agent beside its key and model server: no traffic to
// Anthropic's own services, and the CLI of claudeHome (the adapter's
// identity probe answered without a second CLI).
var claudeRecipeEnv = []string{"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1",
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_EXECUTABLE=/home/agent/bin/claude"}

// claudeHome writes the recipe's HOME template (docs/acp.md): bin/claude,
// which answers claude-agent-acp's per-prompt `claude auth status --json`
// for a key given in ANTHROPIC_API_KEY and runs the bundled CLI for
// everything else.
func claudeHome(b testing.TB, adapter string) string {
	cli := filepath.Join(filepath.Dir(filepath.Dir(adapter)), "@anthropic-ai", "claude-agent-sdk-linux-x64", "claude")
	if _, err := os.Stat(cli); err != nil {
		b.Fatalf("the Claude CLI claude-agent-acp bundles is missing: %v", err)
	}
	home := b.TempDir()
	if err := os.Mkdir(filepath.Join(home, "bin"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "bin", "claude"), []byte(fmt.Sprintf(claudeShim, cli)), 0o755); err != nil {
		b.Fatal(err)
	}
	return home
}

// claudeShim is the recipe's bin/claude (docs/acp.md), %s the CLI.
const claudeShim = `#!/bin/sh
if [ "$*" = "auth status --json" ] && [ -n "$ANTHROPIC_API_KEY" ]; then
  echo '{"loggedIn":true,"authMethod":"api_key","apiProvider":"firstParty","apiKeySource":"ANTHROPIC_API_KEY"}'
  exit 0
fi
exec %s "$@"
`

// rssOfWaiting is the resident memory (bytes) of the one agent waiting
// in the pool under root: the processes working in its pool workspace.
func rssOfWaiting(b testing.TB, root string) float64 {
	slots, _ := filepath.Glob(filepath.Join(root, "pool-*"))
	if len(slots) != 1 {
		b.Fatalf("want one agent waiting, found the workspaces %v", slots)
	}
	return rssUnder(slots[0])
}

// timeline records when the steps of one iteration happened, from its
// start: the benchmark logs it (go test -v) to show where a first
// answer's time goes.
type timeline struct {
	mu    sync.Mutex
	start time.Time
	marks []string
}

func (t *timeline) begin() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start, t.marks = time.Now(), nil
	return t.start
}

// mark notes what happened now; nothing outside an iteration.
func (t *timeline) mark(what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.start.IsZero() {
		t.marks = append(t.marks, fmt.Sprintf("%7.0f ms  %s", float64(time.Since(t.start).Microseconds())/1000, what))
	}
}

func (t *timeline) end() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := strings.Join(t.marks, "\n")
	t.start, t.marks = time.Time{}, nil
	return out
}

// rssUnder sums the resident memory (bytes) of every process whose
// working directory is dir.
func rssUnder(dir string) float64 {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var sum float64
	for _, p := range procs {
		if cwd, err := os.Readlink(filepath.Join(p, "cwd")); err != nil || cwd != dir {
			continue
		}
		status, err := os.ReadFile(filepath.Join(p, "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				sum += kb * 1024
			}
		}
	}
	return sum
}

func mustJSON(b testing.TB, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

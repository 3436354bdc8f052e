package acp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// the same run; the pool's refill is not timed (each pooled iteration waits, off
// the clock, for the pool's agent_pooled event: an agent ready to be
// taken), and every pooled iteration must have run in a pool workspace. It also reports the
// resident memory of one live agent (its process tree, found by its
// working directory), as rss-mib-per-agent.
//
//	go test -run '^$' -bench PoolFirstAnswer -benchtime 4x ./provider/acp/
func BenchmarkPoolFirstAnswer(b *testing.B) {
	bin := realClaude(b)
	model := modelwire.NewAnthropic(modelwire.Options{APIKey: "sk-ant-bench", Script: func(modelwire.Turn) modelwire.Reply {
		return modelwire.Reply{Text: "ready"}
	}})
	defer model.Close()
	env := []string{"ANTHROPIC_BASE_URL=" + model.URL, "ANTHROPIC_API_KEY=sk-ant-bench", "PATH=/usr/local/bin:/usr/bin:/bin",
		"DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	for _, pool := range []int{0, 1} {
		name := "cold"
		if pool > 0 {
			name = "pooled"
		}
		b.Run(name, func(b *testing.B) {
			r, _ := jailedRigTB(b)
			cfg := acp.Config{Command: []string{bin}, Env: env, WorkspaceRoot: r.root, Pool: pool,
				AllowHosts: []string{strings.TrimPrefix(model.URL, "http://")}}
			inst := r.instance(mustJSON(b, cfg))
			var total time.Duration
			n := 0
			for b.Loop() {
				n++
				if pool > 0 {
					b.StopTimer()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					r.events.await(ctx, acp.TypeAgentPooled, n)
					cancel()
					b.StartTimer()
				}
				ws := filepath.Join(r.root, fmt.Sprintf("c%d", n))
				if err := os.Mkdir(ws, 0o700); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				s, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: fmt.Sprintf("c%d", n), WorkingDirectory: ws})
				if err != nil {
					b.Fatal(err)
				}
				answered := false
				for o, err := range s.RunTurn(context.Background(), provider.TurnRequest{TurnID: "t1", Input: "Say ready."}) {
					if err != nil {
						b.Fatal(err)
					}
					if o.Kind == provider.OutputText {
						answered = true
						break
					}
				}
				if !answered {
					b.Fatal("the agent ended its turn without text")
				}
				total += time.Since(start)
				b.StopTimer()
				if real, _ := filepath.EvalSymlinks(ws); (pool > 0) != strings.HasPrefix(filepath.Base(real), "pool-") {
					b.Fatalf("conversation %d ran in %s: pooled is %v", n, real, pool > 0)
				}
				if n == 1 {
					real, _ := filepath.EvalSymlinks(ws)
					b.ReportMetric(rssUnder(real)/(1<<20), "rss-mib-per-agent")
				}
				_ = s.Close(context.Background(), provider.CloseRequested)
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(n), "first-answer-ms")
		})
	}
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

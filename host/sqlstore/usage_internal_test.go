package sqlstore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host/price"
	"github.com/agentry-dev/agentry/llm"
)

// The usage detail written by hand is byte for byte what encoding/json
// writes for it, for any model and tool names and counts; and it reads
// back as what was written.
func FuzzUsageDetail(f *testing.F) {
	f.Add("claude-sonnet-4-5", "", "run", 3, 1200, 80, 0, 0, int64(1500), int64(0), int64(0), "counted", int64(4200))
	f.Add("", "tool\"with\\quotes", "x", 0, 0, 0, 5, 7, int64(0), int64(3e9), int64(1<<30), "", int64(0))
	f.Add("gpt-5 <&> ünïcode", "a\u2028b", "b\x00c", 1, -1, 2, 3, 4, int64(-5), int64(6), int64(7), "per_turn", int64(-8))
	f.Add("m\xff", "\x7f", "t", 2, 9, 9, 9, 9, int64(9), int64(0), int64(9), "none", int64(1))
	f.Fuzz(func(t *testing.T, model, model2, tool string, calls, in, out, cr, cw int, dur, cpu, mem int64, basis string, nano int64) {
		u := llm.TurnUsage{ModelCalls: calls, Duration: time.Duration(dur), SandboxCPU: time.Duration(cpu), SandboxPeakMemory: mem,
			AgentWall: time.Duration(mem / 3), Basis: llm.Basis(basis)}
		var cost map[string]price.Nano
		if calls%2 == 0 {
			u.Models = map[string]llm.Usage{model: {InputTokens: in, OutputTokens: out, CacheReadTokens: cr, CacheWriteTokens: cw}}
			cost = map[string]price.Nano{model: price.Nano(nano)}
			if model2 != model {
				u.Models[model2] = llm.Usage{OutputTokens: out}
			}
		}
		if tool != "" {
			u.ToolCalls = map[string]int{tool: calls, tool + "2": in}
		}
		want, err := json.Marshal(usageDetail{u, cost})
		if err != nil {
			t.Fatal(err)
		}
		got := appendUsageDetail(nil, u, cost)
		if string(got) != string(want) {
			t.Fatalf("written by hand:\n%s\nby encoding/json:\n%s", got, want)
		}
		var back usageDetail
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%s does not read back: %v", got, err)
		}
	})
}

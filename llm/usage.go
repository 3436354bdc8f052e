package llm

import "time"

// TurnUsage is what one turn used: its model calls and their tokens per
// model, its tool calls by tool, and how long it worked. The agent loop
// counts it and every executor returns it with the turn's result; a turn
// that fails or is cancelled still reports what it used. It is plain data
// (JSON), for a host to store as the turn's usage record.
type TurnUsage struct {
	// ModelCalls counts the model calls made, failed ones included.
	ModelCalls int `json:"modelCalls"`
	// Models are the tokens per model, by the name the model answered
	// with (or was configured with); "" when it has none.
	Models map[string]Usage `json:"models,omitempty"`
	// ToolCalls counts tool invocations by tool name: a call that asked a
	// person mid-call and ran again once approved counts twice; a call
	// that did not run (refused, declined, an unknown tool) counts none.
	ToolCalls map[string]int `json:"toolCalls,omitempty"`
	// Duration is how long the loop worked; time spent waiting for a
	// person is not in it.
	Duration time.Duration `json:"duration"`
	// SandboxCPU is the CPU time the turn's sandboxes spent, and
	// SandboxPeakMemory the most memory one held (bytes), as their
	// cgroups count them; zero where a sandbox has no cgroup. AgentWall is
	// how long an agent process worked on the turn (an external agent's
	// own sandbox time).
	SandboxCPU        time.Duration `json:"sandboxCpu,omitempty"`
	SandboxPeakMemory int64         `json:"sandboxPeakMemory,omitempty"`
	AgentWall         time.Duration `json:"agentWall,omitempty"`
	// Basis says where the token counts come from (see the Basis
	// constants); "" is BasisCounted.
	Basis Basis `json:"basis,omitempty"`
}

// Basis says how a turn's token counts were known.
type Basis string

const (
	// BasisCounted: the loop counted every model call itself.
	BasisCounted Basis = "counted"
	// BasisPerTurn: an agent process reported what the turn used.
	BasisPerTurn Basis = "per_turn"
	// BasisCumulative: an agent process reported running totals for its
	// session; the turn's usage is the difference from the totals before it.
	BasisCumulative Basis = "cumulative"
	// BasisNone: the agent reported no token usage; only turns, time and
	// tool calls are known.
	BasisNone Basis = "none"
)

// Tokens is the sum of every model's tokens.
func (u *TurnUsage) Tokens() Usage {
	var t Usage
	for _, m := range u.Models {
		t = t.Add(m)
	}
	return t
}

// CountModel counts one model call by model name and its tokens.
func (u *TurnUsage) CountModel(model string, tokens Usage) {
	u.ModelCalls++
	if u.Models == nil {
		u.Models = make(map[string]Usage, 1)
	}
	u.Models[model] = u.Models[model].Add(tokens)
}

// CountTool counts one invocation of the named tool.
func (u *TurnUsage) CountTool(name string) {
	if u.ToolCalls == nil {
		u.ToolCalls = make(map[string]int, 1)
	}
	u.ToolCalls[name]++
}

// Add adds o to u: the usage of another stretch of the same turn.
func (u *TurnUsage) Add(o TurnUsage) {
	u.ModelCalls += o.ModelCalls
	for m, t := range o.Models {
		if u.Models == nil {
			u.Models = make(map[string]Usage, len(o.Models))
		}
		u.Models[m] = u.Models[m].Add(t)
	}
	for name, n := range o.ToolCalls {
		if u.ToolCalls == nil {
			u.ToolCalls = make(map[string]int, len(o.ToolCalls))
		}
		u.ToolCalls[name] += n
	}
	u.Duration += o.Duration
	u.SandboxCPU += o.SandboxCPU
	u.SandboxPeakMemory = max(u.SandboxPeakMemory, o.SandboxPeakMemory)
	u.AgentWall += o.AgentWall
	if u.Basis == "" || u.Basis == BasisNone {
		u.Basis = o.Basis
	}
}

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
}

package main

import (
	"slices"
	"strings"

	"github.com/agentry-dev/agentry/tool"
)

// withCheckIns makes every call of the named tools wait for a person's
// decision (tool.WithCheckIn). A name no tool has is refused: a check-in
// that silently guards nothing is worse than none.
func withCheckIns(tools []tool.Tool, names []string) ([]tool.Tool, error) {
	if len(names) == 0 {
		return tools, nil
	}
	have := make([]string, len(tools))
	for i, t := range tools {
		have[i] = t.Spec().Name
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return nil, usageError("--check-in %q: this serve has no such tool; it has %s", n, strings.Join(have, ", "))
		}
	}
	out := make([]tool.Tool, len(tools))
	for i, t := range tools {
		out[i] = t
		if slices.Contains(names, have[i]) && !t.Spec().CheckIn {
			out[i] = tool.WithCheckIn(t)
		}
	}
	return out, nil
}

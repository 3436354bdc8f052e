package host

import (
	"context"
	"testing"

	"github.com/agentry-dev/agentry/provider"
)

// A turn's answer is its last run of text: narration before an activity
// (a tool call) is dropped, and an activity after the answer (a usage
// report, as OpenCode sends at the end of every turn) does not erase it.
func TestTurnAnswerIsTheLastRunOfText(t *testing.T) {
	t.Parallel()
	text := func(s string) provider.Output { return provider.Output{Kind: provider.OutputText, Text: s} }
	act := func(s string) provider.Output { return provider.Output{Kind: provider.OutputActivity, Text: s} }
	done := provider.Output{Kind: provider.OutputTurnCompleted, Outcome: provider.OutcomeCompleted}
	for _, tc := range []struct {
		name string
		outs []provider.Output
		want string
	}{
		{"text only", []provider.Output{text("All "), text("done."), done}, "All done."},
		{"narration, a tool call, the answer", []provider.Output{text("Let me look."), act("tool call 1: write"), text("All done."), done}, "All done."},
		{"a usage report after the answer", []provider.Output{act("tool call 1: write"), text("All "), text("done."), act("usage: 3 input, 2 output, 5 total tokens"), done}, "All done."},
		{"only activities", []provider.Output{act("tool call 1: write"), done}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seq := func(yield func(provider.Output, error) bool) {
				for _, o := range tc.outs {
					if !yield(o, nil) {
						return
					}
				}
			}
			h := &Host{}
			run := h.drive(context.Background(), &liveConv{}, func(context.Context, *liveConv) *turnRun {
				return &turnRun{kind: "message", seq: seq}
			}, nil)
			if got := run.answer.String(); got != tc.want {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
			if run.outcome != provider.OutcomeCompleted {
				t.Errorf("outcome %q", run.outcome)
			}
		})
	}
}

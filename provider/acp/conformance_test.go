package acp_test

import (
	"testing"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
)

func conformanceFixture(r *rig) conformance.Fixture {
	return conformance.Fixture{
		Definition:       provider.Definition{Config: r.config(nil, nil)},
		WorkingDirectory: r.ws,
		Prompt:           "hello",
		RequestPrompt:    "ask",
		InterruptPrompt:  "forever",
		HostToolPrompt:   "tool conformance",
		// A form elicitation, answered "yes" by the kit.
		InteractionPrompt: "elicit",
	}
}

func TestConformance(t *testing.T) {
	r := newRig(t, nil)
	conformance.Run(t, r.driver, conformanceFixture(r))
}

// Every check the ACP provider declares runs and passes (session
// interactions through elicitation among them); branch, steer and a
// waiting turn across a re-open are the only ones skipped.
func TestConformanceEveryDeclaredCheckPasses(t *testing.T) {
	r := newRig(t, nil)
	rep := conformance.Evaluate(t.Context(), r.driver, conformanceFixture(r))
	for _, res := range rep.Results {
		want := conformance.Passed
		switch res.Check {
		case conformance.CheckSteer, conformance.CheckBranch, conformance.CheckResumeWait:
			want = conformance.Skipped
		}
		if res.Status != want {
			t.Errorf("%s: %s, want %s: %v", res.Check, res.Status, want, res.Messages)
		}
	}
}

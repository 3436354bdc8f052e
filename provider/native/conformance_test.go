package native_test

import (
	"context"
	"testing"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/conformance"
	"github.com/agentry-dev/agentry/provider/native"
)

// conformanceDriver is a native driver whose agent follows the prompts of
// conformanceFixture.
func conformanceDriver(t *testing.T) *native.Driver {
	t.Helper()
	d, err := native.NewDriver(native.Config{Agent: func(ctx context.Context, def provider.Definition) (agent.Options, error) {
		return agent.Options{ID: "conformance", Model: &promptModel{}, Tools: newLab().tools()}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// conformanceFixture: "hello" is answered at once; "ask" calls a check-in
// tool (an approval request); "hold" runs until interrupted; the host-tool
// prompt calls the kit's tool with the arguments its schema wants.
func conformanceFixture() conformance.Fixture {
	return conformance.Fixture{
		Prompt:          "hello",
		RequestPrompt:   "ask",
		InterruptPrompt: "hold",
		HostToolPrompt:  "call " + conformance.HostToolName + ` {"text":"hi"}`,
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformanceDriver(t), conformanceFixture())
}

// Every check the native provider declares runs and passes; steer and
// interactions (not declared: a running agent takes no new input, and
// has no way to ask outside a turn's check-in) are the only ones
// skipped.
func TestConformanceEveryDeclaredCheckPasses(t *testing.T) {
	t.Parallel()
	rep := conformance.Evaluate(t.Context(), conformanceDriver(t), conformanceFixture())
	for _, res := range rep.Results {
		want := conformance.Passed
		if res.Check == conformance.CheckSteer || res.Check == conformance.CheckInteract {
			want = conformance.Skipped
		}
		if res.Status != want {
			t.Errorf("%s: %s, want %s: %v", res.Check, res.Status, want, res.Messages)
		}
	}
}

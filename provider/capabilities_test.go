package provider_test

import (
	"encoding/json"
	"testing"

	"github.com/agentry-dev/agentry/provider"
)

func TestParseCapabilities(t *testing.T) {
	t.Parallel()
	c, err := provider.ParseCapabilities([]byte(`{
		"providerKey": "claude-code",
		"sessions": {"resume": true, "branch": "through_turn"},
		"turns": {"interrupt": true, "steer": false},
		"requests": {"approval": true, "elicitation": true},
		"hostBinding": {"supported": true, "instructionPlacements": ["system", "context"]},
		"authentication": {"supported": true, "flows": ["oauth", "api_key"]},
		"limits": {"maxInputBytes": 4096}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.ProviderKey != "claude-code" || !c.Sessions.Resume || c.Sessions.Branch != provider.BranchThroughTurn ||
		!c.Turns.Interrupt || c.Turns.Steer || !c.Requests.Approval || !c.Requests.Elicitation {
		t.Errorf("parsed %+v", c)
	}
	if got := c.HostBinding.InstructionPlacements; len(got) != 2 || got[0] != provider.PlacementContext {
		t.Errorf("placements not sorted: %v", got)
	}
	if got := c.Authentication.Flows; len(got) != 2 || got[0] != "api_key" {
		t.Errorf("flows not sorted: %v", got)
	}
	if c.Limits.MaxInputBytes != 4096 || c.Limits.MaxHostTools != provider.DefaultMaxHostTools {
		t.Errorf("limits %+v", c.Limits)
	}

	min, err := provider.ParseCapabilities([]byte(`{"providerKey":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if min.Sessions.Branch != provider.BranchUnsupported || min.Limits.MaxInputBytes != provider.DefaultMaxInputBytes {
		t.Errorf("defaults not applied: %+v", min)
	}
}

func TestParseCapabilitiesRefusals(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"not json":                  `{`,
		"two values":                `{"providerKey":"x"} {}`,
		"unknown field":             `{"providerKey":"x","sessions":{"fork":true}}`,
		"bad key":                   `{"providerKey":"X"}`,
		"no key":                    `{}`,
		"bad branch":                `{"providerKey":"x","sessions":{"branch":"always"}}`,
		"placements unsupported":    `{"providerKey":"x","hostBinding":{"instructionPlacements":["system"]}}`,
		"unknown placement":         `{"providerKey":"x","hostBinding":{"supported":true,"instructionPlacements":["footer"]}}`,
		"duplicate placement":       `{"providerKey":"x","hostBinding":{"supported":true,"instructionPlacements":["system","system"]}}`,
		"auth without flows":        `{"providerKey":"x","authentication":{"supported":true}}`,
		"flows without auth":        `{"providerKey":"x","authentication":{"flows":["oauth"]}}`,
		"bad flow":                  `{"providerKey":"x","authentication":{"supported":true,"flows":["OAuth"]}}`,
		"duplicate flow":            `{"providerKey":"x","authentication":{"supported":true,"flows":["a","a"]}}`,
		"negative input limit":      `{"providerKey":"x","limits":{"maxInputBytes":-1}}`,
		"huge input limit":          `{"providerKey":"x","limits":{"maxInputBytes":1000000000}}`,
		"too many host tools limit": `{"providerKey":"x","limits":{"maxHostTools":257}}`,
		"wrong type":                `{"providerKey":"x","turns":{"steer":"yes"}}`,
	} {
		_, err := provider.ParseCapabilities([]byte(doc))
		if !provider.HasCode(err, provider.CodeInvalidCapabilities) {
			t.Errorf("%s: err = %v, want invalid_capabilities", name, err)
		}
		sawCode(provider.CodeInvalidCapabilities)
	}
}

func TestCapabilitiesEqual(t *testing.T) {
	t.Parallel()
	a := provider.Capabilities{ProviderKey: "x", HostBinding: provider.HostBindingSupport{Supported: true,
		InstructionPlacements: []provider.Placement{provider.PlacementSystem, provider.PlacementContext}}}
	b := provider.Capabilities{ProviderKey: "x", Sessions: provider.SessionCapabilities{Branch: provider.BranchUnsupported},
		HostBinding: provider.HostBindingSupport{Supported: true,
			InstructionPlacements: []provider.Placement{provider.PlacementContext, provider.PlacementSystem}},
		Limits: provider.Limits{MaxInputBytes: provider.DefaultMaxInputBytes}}
	if !a.Equal(b) {
		t.Error("equivalent declarations are not Equal")
	}
	b.Turns.Steer = true
	if a.Equal(b) {
		t.Error("different declarations are Equal")
	}
}

// FuzzParseCapabilities: whatever parses is normalised, survives a round
// trip through JSON unchanged, and normalising it again changes nothing.
func FuzzParseCapabilities(f *testing.F) {
	for _, s := range []string{
		`{"providerKey":"x"}`,
		`{"providerKey":"a.b","sessions":{"resume":true,"branch":"through_turn"},"turns":{"interrupt":true,"steer":true}}`,
		`{"providerKey":"x","hostBinding":{"supported":true,"instructionPlacements":["context","system"]}}`,
		`{"providerKey":"x","authentication":{"supported":true,"flows":["b","a"]},"limits":{"maxInputBytes":1,"maxHostTools":256}}`,
		`{"providerKey":"x","requests":{"approval":true}}`,
		`{"providerKey":"X"}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := provider.ParseCapabilities(data)
		if err != nil {
			if !provider.HasCode(err, provider.CodeInvalidCapabilities) {
				t.Fatalf("refusal without the code: %v", err)
			}
			return
		}
		again, err := provider.CheckCapabilities(c)
		if err != nil || !again.Equal(c) {
			t.Fatalf("normalising twice: %v", err)
		}
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := provider.ParseCapabilities(raw)
		if err != nil {
			t.Fatalf("round trip refused %s: %v", raw, err)
		}
		if !back.Equal(c) {
			t.Fatalf("round trip changed %s", raw)
		}
		if c.Limits.MaxInputBytes < 1 || c.Limits.MaxHostTools < 1 || provider.CheckProviderKey(c.ProviderKey) != nil {
			t.Fatalf("accepted an unusable declaration: %+v", c)
		}
	})
}

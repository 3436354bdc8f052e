package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Capabilities is what a provider declares it can do. The wrapper
// [Validate] builds enforces it: a port the declaration leaves out must be
// absent, a declared one present, and every output and input is gated by
// it. The zero value of every field is "not supported".
type Capabilities struct {
	// ProviderKey names the provider: 1 to 100 characters matching
	// ^[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$.
	ProviderKey    string                `json:"providerKey"`
	Sessions       SessionCapabilities   `json:"sessions"`
	Turns          TurnCapabilities      `json:"turns"`
	Requests       RequestCapabilities   `json:"requests"`
	HostBinding    HostBindingSupport    `json:"hostBinding"`
	Authentication AuthenticationSupport `json:"authentication"`
	Interactions   InteractionSupport    `json:"interactions"`
	Limits         Limits                `json:"limits"`
}

// SessionCapabilities: every provider creates sessions; resume and branch
// are optional ports ([Resumer], [Brancher]).
type SessionCapabilities struct {
	Resume bool `json:"resume"`
	// ResumePending: a resumed session whose last turn was waiting on a
	// request comes back waiting on it, so the host can Resolve it. Its
	// sessions implement [Pender]. Requires Resume.
	ResumePending bool          `json:"resumePending,omitempty"`
	Branch        BranchSupport `json:"branch"`
}

// BranchSupport says whether and how a session can be branched.
type BranchSupport string

const (
	// BranchUnsupported (also the empty value): no [Brancher].
	BranchUnsupported BranchSupport = "unsupported"
	// BranchThroughTurn: a session branches from a source session as it
	// stood after one of its turns.
	BranchThroughTurn BranchSupport = "through_turn"
)

// TurnCapabilities: optional session ports ([Interrupter], [Steerer]).
type TurnCapabilities struct {
	Interrupt bool `json:"interrupt"`
	Steer     bool `json:"steer"`
}

// RequestCapabilities gates the requests a turn may raise for the host.
type RequestCapabilities struct {
	Approval    bool `json:"approval"`
	Elicitation bool `json:"elicitation"`
}

// Placement says where a host binding's instructions go.
type Placement string

const (
	// PlacementSystem: joined to the provider's system instructions.
	PlacementSystem Placement = "system"
	// PlacementContext: given to the agent as context at the start of the
	// session, like a first message it did not have to answer.
	PlacementContext Placement = "context"
)

// HostBindingSupport says whether sessions accept host bindings, and which
// instruction placements they honour.
type HostBindingSupport struct {
	Supported             bool        `json:"supported"`
	InstructionPlacements []Placement `json:"instructionPlacements,omitempty"`
}

// AuthenticationSupport says whether the provider runs authentication
// flows (an optional [Authenticator] port), and which.
type AuthenticationSupport struct {
	Supported bool `json:"supported"`
	// Flows names the flows, each shaped like a provider key.
	Flows []string `json:"flows,omitempty"`
}

// Limits bound what the wrapper lets through. Zero means the default.
type Limits struct {
	// MaxInputBytes bounds a turn's and a steer's input (default 1 MiB,
	// at most 64 MiB).
	MaxInputBytes int `json:"maxInputBytes,omitempty"`
	// MaxHostTools bounds the tools one host binding may lend (default 64,
	// at most 256).
	MaxHostTools int `json:"maxHostTools,omitempty"`
}

// Limit defaults and ceilings.
const (
	DefaultMaxInputBytes = 1 << 20
	MaxMaxInputBytes     = 64 << 20
	DefaultMaxHostTools  = 64
	MaxMaxHostTools      = 256
)

// ParseCapabilities reads a JSON capability declaration (the form
// Capabilities marshals to; unknown fields are refused) and checks it
// with [CheckCapabilities].
func ParseCapabilities(data []byte) (Capabilities, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Capabilities
	if err := dec.Decode(&c); err != nil {
		return Capabilities{}, &ContractError{Code: CodeInvalidCapabilities, Message: "the declaration is not a capabilities JSON object", Err: jsonProblem(err)}
	}
	if dec.More() {
		return Capabilities{}, &ContractError{Code: CodeInvalidCapabilities, Message: "the declaration holds more than one JSON value"}
	}
	return CheckCapabilities(c)
}

// jsonProblem keeps a JSON decoding error's position and kind without
// quoting the input.
func jsonProblem(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Errorf("field %q has the wrong JSON type", te.Field)
	}
	return err
}

// CheckCapabilities checks c and returns it normalised: the empty branch
// support becomes BranchUnsupported, zero limits their defaults, and
// placements, flows and interaction kinds sorted.
func CheckCapabilities(c Capabilities) (Capabilities, error) {
	bad := func(format string, args ...any) (Capabilities, error) {
		e := violation("", CodeInvalidCapabilities, format, args...)
		if CheckProviderKey(c.ProviderKey) == nil {
			e.Provider = c.ProviderKey
		}
		return Capabilities{}, e
	}
	if err := CheckProviderKey(c.ProviderKey); err != nil {
		return bad("%v", err)
	}
	switch c.Sessions.Branch {
	case "":
		c.Sessions.Branch = BranchUnsupported
	case BranchUnsupported, BranchThroughTurn:
	default:
		return bad("sessions.branch must be %q or %q", BranchUnsupported, BranchThroughTurn)
	}

	if c.Sessions.ResumePending && !c.Sessions.Resume {
		return bad("sessions.resumePending needs sessions.resume")
	}

	hb := c.HostBinding
	if !hb.Supported && len(hb.InstructionPlacements) > 0 {
		return bad("hostBinding lists instruction placements but is not supported")
	}
	hb.InstructionPlacements = slices.Clone(hb.InstructionPlacements)
	slices.Sort(hb.InstructionPlacements)
	for i, p := range hb.InstructionPlacements {
		if p != PlacementSystem && p != PlacementContext {
			return bad("hostBinding.instructionPlacements[%d] is not %q or %q", i, PlacementSystem, PlacementContext)
		}
		if i > 0 && hb.InstructionPlacements[i-1] == p {
			return bad("hostBinding.instructionPlacements lists %q twice", p)
		}
	}
	c.HostBinding = hb

	au := c.Authentication
	switch {
	case au.Supported && len(au.Flows) == 0:
		return bad("authentication is supported but names no flows")
	case !au.Supported && len(au.Flows) > 0:
		return bad("authentication lists flows but is not supported")
	}
	au.Flows = slices.Clone(au.Flows)
	slices.Sort(au.Flows)
	for i, f := range au.Flows {
		if err := CheckProviderKey(f); err != nil {
			return bad("authentication flow %d is not a valid flow name", i)
		}
		if i > 0 && au.Flows[i-1] == f {
			return bad("authentication lists flow %q twice", f)
		}
	}
	c.Authentication = au

	kinds := slices.Clone(c.Interactions.Kinds)
	slices.Sort(kinds)
	for i, k := range kinds {
		if k != InteractionQuestion && k != InteractionNotice {
			return bad("interactions.kinds[%d] is not %q or %q", i, InteractionQuestion, InteractionNotice)
		}
		if i > 0 && kinds[i-1] == k {
			return bad("interactions.kinds lists %q twice", k)
		}
	}
	c.Interactions.Kinds = kinds

	l := &c.Limits
	switch {
	case l.MaxInputBytes == 0:
		l.MaxInputBytes = DefaultMaxInputBytes
	case l.MaxInputBytes < 0 || l.MaxInputBytes > MaxMaxInputBytes:
		return bad("limits.maxInputBytes must be between 1 and %d", MaxMaxInputBytes)
	}
	switch {
	case l.MaxHostTools == 0:
		l.MaxHostTools = DefaultMaxHostTools
	case l.MaxHostTools < 0 || l.MaxHostTools > MaxMaxHostTools:
		return bad("limits.maxHostTools must be between 1 and %d", MaxMaxHostTools)
	}
	return c, nil
}

// Equal reports whether c and d declare the same thing once normalised.
func (c Capabilities) Equal(d Capabilities) bool {
	c, errC := CheckCapabilities(c)
	d, errD := CheckCapabilities(d)
	if errC != nil || errD != nil {
		return false
	}
	return c.ProviderKey == d.ProviderKey && c.Sessions == d.Sessions && c.Turns == d.Turns &&
		c.Requests == d.Requests && c.Limits == d.Limits &&
		c.HostBinding.Supported == d.HostBinding.Supported &&
		slices.Equal(c.HostBinding.InstructionPlacements, d.HostBinding.InstructionPlacements) &&
		c.Authentication.Supported == d.Authentication.Supported &&
		slices.Equal(c.Authentication.Flows, d.Authentication.Flows) &&
		slices.Equal(c.Interactions.Kinds, d.Interactions.Kinds)
}

// supportsPlacement reports whether host-binding instructions may use p.
func (c Capabilities) supportsPlacement(p Placement) bool {
	return slices.Contains(c.HostBinding.InstructionPlacements, p)
}

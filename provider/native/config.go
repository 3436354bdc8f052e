package native

import (
	"bytes"
	"encoding/json"

	"github.com/agentry-dev/agentry/internal/jsonerr"
	"github.com/agentry-dev/agentry/tool"
)

// SessionConfig is what a native session's configuration
// (CreateRequest.Configuration, and the same field of Resume and Branch)
// may say. It is the only way identity reaches the agent: the host decides
// who a session acts for and says so here, on every opening.
type SessionConfig struct {
	// Identity reaches every tool call of the session (tool.Call.Identity)
	// and the agent's event meta exactly as given. Absent means nil: no
	// identity is ever derived from the session id, the binding or the
	// working directory. A conversation is resumed or branched only under
	// the identity it was created with.
	Identity *tool.Identity `json:"identity,omitempty"`
}

// JSON returns c as a configuration for a session opening ({} for the
// zero value).
func (c SessionConfig) JSON() json.RawMessage {
	b, _ := json.Marshal(c) // a struct of strings always marshals
	return b
}

// ParseSessionConfig reads a session's configuration: empty, or one JSON
// object with at most the fields of [SessionConfig]. Unknown fields are
// refused rather than ignored, so a misspelt "identity" cannot quietly open
// a session with none. The error describes the problem without quoting the
// input.
func ParseSessionConfig(raw json.RawMessage) (SessionConfig, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return SessionConfig{}, nil
	}
	var c SessionConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return SessionConfig{}, &ConfigError{Problem: jsonerr.Describe(err, "it has a field other than \"identity\" (or an identity field other than tenant, principal, conversationId)")}
	}
	if dec.More() {
		return SessionConfig{}, &ConfigError{Problem: "it holds more than one JSON value"}
	}
	if bytes.TrimSpace(raw)[0] != '{' {
		return SessionConfig{}, &ConfigError{Problem: "it is not a JSON object"}
	}
	return c, nil
}

// ConfigError refuses a session configuration.
type ConfigError struct {
	Problem string
}

func (e *ConfigError) Error() string {
	return "native: the session configuration is unusable: " + e.Problem +
		`; pass empty, or {"identity":{"tenant":...,"principal":...}}`
}

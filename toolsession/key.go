package toolsession

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Scope says how long a registered cleanup may live.
type Scope string

const (
	// ScopeCall lives until the tool call that registered it settles.
	ScopeCall Scope = "call"
	// ScopeRun lives until the run reaches a terminal (an answer or an
	// error). A pause is not a terminal.
	ScopeRun Scope = "run"
	// ScopeSession lives until the composition root closes the hosted
	// conversation.
	ScopeSession Scope = "session"
	// ScopeShutdown lives until the process shuts down. It is a moment,
	// not a key: Key refuses it.
	ScopeShutdown Scope = "shutdown"
)

// Valid reports whether s is one of the four scopes.
func (s Scope) Valid() bool {
	switch s {
	case ScopeCall, ScopeRun, ScopeSession, ScopeShutdown:
		return true
	}
	return false
}

// Reason says which firing site closed a registration.
type Reason string

const (
	ReasonCallEnd    Reason = "call-end"
	ReasonRunEnd     Reason = "run-end"
	ReasonSessionEnd Reason = "session-end"
	ReasonShutdown   Reason = "shutdown"
	ReasonIdle       Reason = "idle"
	ReasonEvicted    Reason = "evicted"
)

// Facts are what a door knows about a call. Tenant and Principal come from
// the caller's identity only; empty means absent.
type Facts struct {
	ToolCallID, RunID, SessionID, Tenant, Principal string
}

// Key derives the isolation key a tool holds a session under.
//
//	call     c=<toolCallId>
//	run      t=<tenant>/p=<principal>/r=<runId>
//	session  t=<tenant>/p=<principal>/s=<sessionId>
//
// ok is false when a fact the scope needs is missing, and always for
// ScopeShutdown and unknown scopes. Key never falls back to another scope:
// a missing session id is a refusal, not a run key.
//
// Every field is encoded injectively ('%' → %25, '/' → %2F, a literal "_"
// → %5F, absent → "_"), so two different fact sets never share a key.
func Key(scope Scope, f Facts) (key string, ok bool) {
	switch scope {
	case ScopeCall:
		if f.ToolCallID == "" {
			return "", false
		}
		return "c=" + escape(f.ToolCallID), true
	case ScopeRun:
		if f.RunID == "" {
			return "", false
		}
		return owner(f) + "/r=" + escape(f.RunID), true
	case ScopeSession:
		if f.SessionID == "" {
			return "", false
		}
		return owner(f) + "/s=" + escape(f.SessionID), true
	}
	return "", false
}

func owner(f Facts) string {
	return "t=" + escape(f.Tenant) + "/p=" + escape(f.Principal)
}

// escape encodes one key field. Absent is "_"; a present "_" is "%5F" so
// the two never meet.
func escape(v string) string {
	switch {
	case v == "":
		return "_"
	case v == "_":
		return "%5F"
	case !strings.ContainsAny(v, "%/"):
		return v
	}
	var b strings.Builder
	b.Grow(len(v) + 8)
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(v[i])
		}
	}
	return b.String()
}

// HashKey is the only form of an isolation key that may leave the process:
// the first 12 hex characters of its SHA-256. It is enough to join two
// records and not enough to say whose they are.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

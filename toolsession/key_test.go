package toolsession_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/toolsession"
)

func TestKey(t *testing.T) {
	t.Parallel()
	full := toolsession.Facts{ToolCallID: "call-1", RunID: "run-1", SessionID: "s-1", Tenant: "acme", Principal: "bob"}
	tests := []struct {
		name  string
		scope toolsession.Scope
		facts toolsession.Facts
		want  string
		ok    bool
	}{
		{"call", toolsession.ScopeCall, full, "c=call-1", true},
		{"run", toolsession.ScopeRun, full, "t=acme/p=bob/r=run-1", true},
		{"session", toolsession.ScopeSession, full, "t=acme/p=bob/s=s-1", true},
		{"shutdown is a time, not a key", toolsession.ScopeShutdown, full, "", false},
		{"unknown scope", toolsession.Scope("forever"), full, "", false},
		{"zero scope", "", full, "", false},
		{"call without call id", toolsession.ScopeCall, toolsession.Facts{RunID: "r"}, "", false},
		{"run without run id", toolsession.ScopeRun, toolsession.Facts{SessionID: "s", Tenant: "a"}, "", false},
		{"session without session id never becomes a run key", toolsession.ScopeSession, toolsession.Facts{RunID: "r", Tenant: "a", Principal: "b"}, "", false},
		{"absent tenant and principal", toolsession.ScopeRun, toolsession.Facts{RunID: "r"}, "t=_/p=_/r=r", true},
		{"literal underscore is not absent", toolsession.ScopeRun, toolsession.Facts{RunID: "r", Tenant: "_", Principal: "_"}, "t=%5F/p=%5F/r=r", true},
		{"slash encoded", toolsession.ScopeSession, toolsession.Facts{SessionID: "a/b", Tenant: "acme/p=bob", Principal: "x"}, "t=acme%2Fp=bob/p=x/s=a%2Fb", true},
		{"percent encoded first", toolsession.ScopeRun, toolsession.Facts{RunID: "%2F", Tenant: "100%"}, "t=100%25/p=_/r=%252F", true},
		{"conversation id is never in a key", toolsession.ScopeRun, toolsession.Facts{RunID: "r", Tenant: "a", Principal: "b"}, "t=a/p=b/r=r", true},
		{"call key ignores identity", toolsession.ScopeCall, toolsession.Facts{ToolCallID: "c/1", Tenant: "a"}, "c=c%2F1", true},
		{"double underscore is literal", toolsession.ScopeRun, toolsession.Facts{RunID: "r", Tenant: "__"}, "t=__/p=_/r=r", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := toolsession.Key(tc.scope, tc.facts)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("Key(%q, %+v) = %q, %v; want %q, %v", tc.scope, tc.facts, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestKeySeparatesLookalikeOwners(t *testing.T) {
	t.Parallel()
	a, _ := toolsession.Key(toolsession.ScopeRun, toolsession.Facts{RunID: "r", Tenant: "acme/p=bob", Principal: "x"})
	b, _ := toolsession.Key(toolsession.ScopeRun, toolsession.Facts{RunID: "r", Tenant: "acme", Principal: "bob/p=x"})
	if a == b {
		t.Fatalf("tenant %q and tenant %q share key %q", "acme/p=bob", "acme", a)
	}
	absent, _ := toolsession.Key(toolsession.ScopeSession, toolsession.Facts{SessionID: "s"})
	literal, _ := toolsession.Key(toolsession.ScopeSession, toolsession.Facts{SessionID: "s", Tenant: "_", Principal: "_"})
	if absent == literal {
		t.Fatalf("absent identity and literal \"_\" share key %q", absent)
	}
	other, _ := toolsession.Key(toolsession.ScopeSession, toolsession.Facts{SessionID: "s", Tenant: "acme", Principal: "alice"})
	mine, _ := toolsession.Key(toolsession.ScopeSession, toolsession.Facts{SessionID: "s", Tenant: "acme", Principal: "bob"})
	if other == mine {
		t.Fatal("two principals sending the same session id got the same key")
	}
}

func TestHashKey(t *testing.T) {
	t.Parallel()
	h := toolsession.HashKey("t=acme/p=bob/r=run-1")
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(h) {
		t.Fatalf("HashKey = %q, want 12 lower-case hex characters", h)
	}
	if h != toolsession.HashKey("t=acme/p=bob/r=run-1") {
		t.Fatal("HashKey is not deterministic")
	}
	// sha256("") begins e3b0c44298fc.
	if got := toolsession.HashKey(""); got != "e3b0c44298fc" {
		t.Fatalf("HashKey(\"\") = %q, want the SHA-256 prefix e3b0c44298fc", got)
	}
	if strings.Contains(h, "acme") || h == toolsession.HashKey("t=acme/p=bob/r=run-2") {
		t.Fatal("HashKey leaks or collides on neighbouring keys")
	}
}

// relevant projects facts onto what a scope's key depends on.
func relevant(s toolsession.Scope, f toolsession.Facts) toolsession.Facts {
	switch s {
	case toolsession.ScopeCall:
		return toolsession.Facts{ToolCallID: f.ToolCallID}
	case toolsession.ScopeRun:
		return toolsession.Facts{RunID: f.RunID, Tenant: f.Tenant, Principal: f.Principal}
	default:
		return toolsession.Facts{SessionID: f.SessionID, Tenant: f.Tenant, Principal: f.Principal}
	}
}

// FuzzKeyInjective checks that two fact sets share a key if and only if
// the facts the scope depends on are equal.
func FuzzKeyInjective(f *testing.F) {
	f.Add(uint8(1), "r", "acme/p=bob", "x", "r", "acme", "bob/p=x")
	f.Add(uint8(2), "s", "", "", "s", "_", "_")
	f.Add(uint8(1), "%2F", "a", "b", "/", "a", "b")
	f.Add(uint8(0), "c/1", "", "", "c%2F1", "", "")
	f.Add(uint8(2), "s", "%", "%25", "s", "%25", "%")
	f.Fuzz(func(t *testing.T, sc uint8, id1, ten1, pr1, id2, ten2, pr2 string) {
		scope := []toolsession.Scope{toolsession.ScopeCall, toolsession.ScopeRun, toolsession.ScopeSession}[int(sc)%3]
		a := toolsession.Facts{ToolCallID: id1, RunID: id1, SessionID: id1, Tenant: ten1, Principal: pr1}
		b := toolsession.Facts{ToolCallID: id2, RunID: id2, SessionID: id2, Tenant: ten2, Principal: pr2}
		ka, oka := toolsession.Key(scope, a)
		kb, okb := toolsession.Key(scope, b)
		if oka != (id1 != "") || okb != (id2 != "") {
			t.Fatalf("ok must follow the presence of the scope's id: %v %v", oka, okb)
		}
		if !oka || !okb {
			return
		}
		same := relevant(scope, a) == relevant(scope, b)
		if (ka == kb) != same {
			t.Fatalf("scope %s: facts %+v and %+v: keys %q and %q (facts equal: %v)", scope, a, b, ka, kb, same)
		}
	})
}

package host_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
)

const ruleConv = "ses_00000000000000000000000000000001"

// TestCommandShape: what a command rule matches, and what it must not.
func TestCommandShape(t *testing.T) {
	cases := []struct {
		pattern string
		args    string
		match   bool
	}{
		{"git status", `{"command":"git status"}`, true},
		{"git status", `{"command":"  git   status\t"}`, true},
		{"git status", `{"command":["git","status"]}`, true},
		{"git status", `{"command":"git status","description":"see what changed","timeout":5}`, true},
		{"git diff *", `{"command":"git diff main"}`, true},
		{"git diff *", `{"command":"git diff src/a.go"}`, true},
		{"ls -la", `{"command":"ls -la"}`, true},

		// Anything a shell reads as syntax: never matched, whatever the pattern.
		{"git status", `{"command":"git status; rm -rf /"}`, false},
		{"git diff *", `{"command":"git diff $(rm -rf /)"}`, false},
		{"git diff *", "{\"command\":\"git diff `id`\"}", false},
		{"git diff *", `{"command":"git diff a|sh"}`, false},
		{"git diff *", `{"command":"git diff a&&b"}`, false},
		{"git diff *", `{"command":"git diff >/etc/passwd"}`, false},
		{"git diff *", `{"command":"git diff *"}`, false},
		{"git diff *", `{"command":"git diff ~"}`, false},
		{"git diff *", `{"command":"git diff 'a b'"}`, false},
		{"git diff *", `{"command":"git diff a\nrm"}`, false},
		{"git diff *", `{"command":"git diff $HOME"}`, false},
		{"git diff *", `{"command":["git","diff","a;b"]}`, false},
		{"git diff *", `{"command":["git","diff","a b"]}`, false},
		// "*" is one operand: never an option, never two words, never none.
		{"git diff *", `{"command":"git diff --output=/tmp/x"}`, false},
		{"git diff *", `{"command":"git diff a b"}`, false},
		{"git diff *", `{"command":"git diff"}`, false},
		// The program is literal; the words are all there is.
		{"git status", `{"command":"FOO=1 git status"}`, false},
		{"git status", `{"command":"/usr/bin/git status"}`, false},
		{"git status", `{"command":"git status --porcelain"}`, false},
		{"git status", `{"command":"git  stat"}`, false},
		// Keys that change how a command runs: asked.
		{"git status", `{"command":"git status","dangerouslyDisableSandbox":true}`, false},
		{"git status", `{"command":"git status","cwd":"/"}`, false},
		// Not a command.
		{"git status", `{"code":"git status"}`, false},
		{"git status", `{"command":7}`, false},
		{"git status", `{"command":[]}`, false},
		{"git status", `["git","status"]`, false},
		{"git status", ``, false},
	}
	for _, c := range cases {
		r := host.Rule{Tool: "Bash", Match: host.MatchCommand, Pattern: c.pattern}
		if got := r.Matches(ruleConv, "Bash", json.RawMessage(c.args)); got != c.match {
			t.Errorf("pattern %q on %s: matched %v, want %v", c.pattern, c.args, got, c.match)
		}
	}
	// Another tool, or another conversation of a conversation's rule.
	r := host.Rule{Tool: "Bash", Match: host.MatchCommand, Pattern: "git status", Conversation: ruleConv}
	if r.Matches(ruleConv, "Shell", json.RawMessage(`{"command":"git status"}`)) || r.Matches("ses_other", "Bash", json.RawMessage(`{"command":"git status"}`)) {
		t.Error("a rule matched another tool or another conversation")
	}
}

// TestCommandPatterns: patterns refused when they are made.
func TestCommandPatterns(t *testing.T) {
	for _, p := range []string{"", "   ", "* status", "-rf", "FOO=1", "git status;", "git $X", "git 'a'", "git **", "rm -rf ~", strings.Repeat("a ", 65)} {
		if _, err := host.ParseCommandPattern(p); err == nil {
			t.Errorf("pattern %q was accepted", p)
		}
	}
	for _, p := range []string{"git status", "git diff *", "npm run test", "go test ./...", "ls -la src/"} {
		if _, err := host.ParseCommandPattern(p); err != nil {
			t.Errorf("pattern %q: %v", p, err)
		}
	}
}

// TestExactShape: an exact rule matches the same JSON value and nothing
// else; code is never matched by anything but itself.
func TestExactShape(t *testing.T) {
	r := host.Rule{Tool: "run_code", Match: host.MatchExact, Args: json.RawMessage(`{"code":"print(1)","n":1}`)}
	for args, want := range map[string]bool{
		`{"code":"print(1)","n":1}`:           true,
		`{ "n": 1, "code": "print(1)" }`:      true,
		`{"code":"print(1)","n":1.0}`:         false, // another number as written
		`{"code":"print(1)","n":"1"}`:         false,
		`{"code":"print(1) ","n":1}`:          false,
		`{"code":"print(1)"}`:                 false,
		`{"code":"print(1)","n":1,"x":0}`:     false,
		`{"code":"print(1)","n":1} {}`:        false,
		`{"code":"print(1)\ufffd","n":1}`:     false,
		"{\"code\":\"print(1)\xff\",\"n\":1}": false,
	} {
		if got := r.Matches(ruleConv, "run_code", json.RawMessage(args)); got != want {
			t.Errorf("%s: matched %v, want %v", args, got, want)
		}
	}
	// Any arguments holds only in one conversation.
	if (host.Rule{Tool: "run_code", Match: host.MatchAny}).Matches(ruleConv, "run_code", json.RawMessage(`{}`)) {
		t.Error("a rule for any arguments with no conversation matched")
	}
	if !(host.Rule{Tool: "run_code", Match: host.MatchAny, Conversation: ruleConv}).Matches(ruleConv, "run_code", nil) {
		t.Error("a conversation's rule for any arguments did not match there")
	}
}

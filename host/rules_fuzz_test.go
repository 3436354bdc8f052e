package host

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzRuleShape: whatever a pattern and arguments hold, a command rule
// matches only commands of plain words that follow the pattern, and an
// exact rule only the same JSON value.
func FuzzRuleShape(f *testing.F) {
	f.Add("git diff *", `{"command":"git diff main"}`, `{"command":"git diff main"}`)
	f.Add("git status", `{"command":"git status; rm -rf /"}`, `{"code":"print(1)"}`)
	f.Add("ls -la", `{"command":["ls","-la"],"description":"list"}`, `{"a":1,"b":[1,2]}`)
	f.Fuzz(func(t *testing.T, pattern, args, other string) {
		words, err := ParseCommandPattern(pattern)
		if err == nil {
			if words[0] == "*" || strings.HasPrefix(words[0], "-") {
				t.Fatalf("pattern %q: the program is not literal", pattern)
			}
			for _, w := range words {
				if w != "*" && !plainWord(w) {
					t.Fatalf("pattern %q kept the word %q", pattern, w)
				}
			}
		}
		r := Rule{Tool: "Bash", Match: MatchCommand, Pattern: pattern}
		if r.Matches("ses_x", "Bash", json.RawMessage(args)) {
			if err != nil {
				t.Fatalf("a refused pattern %q matched", pattern)
			}
			got, ok := commandOf(json.RawMessage(args))
			if !ok || len(got) != len(words) || got[0] != words[0] {
				t.Fatalf("pattern %q matched %s", pattern, args)
			}
			for i, w := range got {
				if !plainWord(w) || strings.ContainsAny(w, ";|&$`<>(){}[]*?~!#'\"\\ \t\n") {
					t.Fatalf("pattern %q matched the word %q of %s", pattern, w, args)
				}
				if words[i] == "*" && strings.HasPrefix(w, "-") {
					t.Fatalf("a * matched the option %q", w)
				}
			}
		}

		c, ok := canonicalArgs(json.RawMessage(args))
		if !ok {
			return
		}
		if c2, ok := canonicalArgs(c); !ok || !bytes.Equal(c, c2) {
			t.Fatalf("canonical form not stable: %s then %s", c, c2)
		}
		exact := Rule{Tool: "run_code", Match: MatchExact, Args: c}
		if exact.Matches("ses_x", "run_code", json.RawMessage(other)) && !sameJSON(t, args, other) {
			t.Fatalf("an exact rule of %s matched %s", args, other)
		}
		if !exact.Matches("ses_x", "run_code", json.RawMessage(args)) {
			t.Fatalf("an exact rule of %s did not match itself", args)
		}
	})
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	dec := func(s string) any {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("matched arguments that are not JSON: %s", s)
		}
		return v
	}
	return reflect.DeepEqual(dec(a), dec(b))
}

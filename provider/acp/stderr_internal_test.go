package acp

import (
	"strings"
	"testing"
)

// tailOf is a Process that has only a stderr tail.
type tailOf struct {
	Process
	tail string
}

func (t tailOf) StderrTail() string { return t.tail }

func TestLastWords(t *testing.T) {
	t.Parallel()
	env := []string{"KEY=sk-abcdef", "LONGER=sk-abcdef-and-more", "ON=1", "EMPTY="}
	for _, c := range []struct{ name, tail, want string }{
		{"none", "", ""},
		{"lines, blank ones left out", "a\n\n  b  \nc\n", "a | b | c"},
		{"the last five", "1\n2\n3\n4\n5\n6\n7\n", "3 | 4 | 5 | 6 | 7"},
		{"values redacted, longest first", "key sk-abcdef-and-more then sk-abcdef; flag 1\n", "key <LONGER> then <KEY>; flag 1"},
		{"a value across lines", "x sk-abc\ndef y\n", "x sk-abc | def y"},
		{"a long line clipped", strings.Repeat("é", 200) + "\n", strings.Repeat("é", 75) + "…"},
		{"a full tail's first line left out", "sk-abcdef-and-more" + strings.Repeat("z", stderrTailBytes) + "\nlast\n", "last"},
	} {
		if got := lastWords(tailOf{tail: c.tail}, env); got != c.want {
			t.Errorf("%s: %q; want %q", c.name, got, c.want)
		}
	}
	if got := lastWords(struct{ Process }{}, env); got != "" {
		t.Errorf("a process that keeps no tail: %q", got)
	}
}

// No value of four bytes or more shows whole in what is reported, unless
// it holds the brackets a redaction writes.
func FuzzRedactEnv(f *testing.F) {
	f.Add("error: bad key sk-123456 for sk-1234567", "sk-123456", "sk-1234567")
	f.Add("aaaaa", "aaaa", "aaa")
	f.Add("<K>x", "<K>x", "abcd")
	f.Fuzz(func(t *testing.T, text, v1, v2 string) {
		env := []string{"K=" + v1, "L=" + v2}
		got := redactEnv(text, env)
		for _, v := range []string{v1, v2} {
			if len(v) >= minRedactBytes && !strings.ContainsAny(v, "<>") && strings.Contains(got, v) {
				t.Fatalf("redactEnv(%q) = %q shows %q", text, got, v)
			}
		}
	})
}

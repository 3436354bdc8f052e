package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	for in, want := range map[string][]string{
		"claude-code-acp":                       {"claude-code-acp"},
		"  gemini   --experimental-acp":         {"gemini", "--experimental-acp"},
		`node '/opt/a b/x.js' "--flag=a \"q\""`: {"node", "/opt/a b/x.js", `--flag=a "q"`},
		`a\ b c`:                                {"a b", "c"},
		`''`:                                    {""},
	} {
		got, err := splitCommand(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "   ", "'open", `"open`, `trail\`} {
		if got, err := splitCommand(in); err == nil {
			t.Errorf("splitCommand(%q) = %q; want an error", in, got)
		}
	}
}

func FuzzSplitCommand(f *testing.F) {
	for _, s := range []string{"claude-code-acp", `node "a b" 'c d' e\ f`, "'", `"\"`, "\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := splitCommand(s)
		if err != nil {
			return
		}
		if len(words) == 0 {
			t.Fatalf("splitCommand(%q) gave no words and no error", s)
		}
		// Words without quoting characters or blanks survive a join.
		plain := true
		for _, w := range words {
			plain = plain && w != "" && !strings.ContainsAny(w, " \t\n'\"\\")
		}
		if plain {
			again, err := splitCommand(strings.Join(words, " "))
			if err != nil || !reflect.DeepEqual(again, words) {
				t.Fatalf("splitCommand(join(%q)) = %q, %v", words, again, err)
			}
		}
	})
}

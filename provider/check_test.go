package provider_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/provider"
)

var keyPattern = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$`)

func TestCheckProviderKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"claude-code", true},
		{"codex.v2_beta", true},
		{"0", true},
		{strings.Repeat("a", 100), true},
		{strings.Repeat("a", 101), false},
		{"", false},
		{"-a", false},
		{"a-", false},
		{".a", false},
		{"a.", false},
		{"A", false},
		{"a b", false},
		{"a/b", false},
		{"é", false},
	} {
		err := provider.CheckProviderKey(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("CheckProviderKey(%q) = %v, want ok=%v", tc.key, err, tc.ok)
		}
		if err != nil && tc.key != "" && strings.Contains(err.Error(), tc.key) {
			t.Errorf("CheckProviderKey(%q) quotes the input: %v", tc.key, err)
		}
	}
}

func FuzzCheckProviderKey(f *testing.F) {
	for _, s := range []string{"a", "claude-code", "a.b_c-d", "-", "a-", strings.Repeat("z", 101), "A", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := keyPattern.MatchString(s) && len(s) <= 100
		got := provider.CheckProviderKey(s) == nil
		if got != want {
			t.Fatalf("CheckProviderKey(%q) ok=%v; the pattern says %v", s, got, want)
		}
	})
}

func TestCheckID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		id   string
		ok   bool
	}{
		{"plain", "session-1", true},
		{"inner space", "a b", true},
		{"unicode", "sessão/ü:1", true},
		{"256 runes", strings.Repeat("é", 256), true},
		{"257 runes", strings.Repeat("é", 257), false},
		{"empty", "", false},
		{"leading space", " a", false},
		{"trailing space", "a ", false},
		{"trailing tab", "a\t", false},
		{"trailing nbsp", "a\u00a0", false},
		{"newline", "a\nb", false},
		{"nul", "a\x00b", false},
		{"del", "a\x7fb", false},
		{"c1", "a\u0085b", false},
		{"bidi override", "a\u202eb", false},
		{"zero width joiner", "a\u200db", false},
		{"invalid utf8", "a\xffb", false},
	} {
		err := provider.CheckID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("%s: CheckID = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func FuzzCheckID(f *testing.F) {
	for _, s := range []string{"a", " a", "a ", "a\nb", strings.Repeat("x", 256), strings.Repeat("x", 257), "\xff", "\u202e", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := provider.CheckID(s)
		if err != nil {
			if len(s) > 3 && strings.Contains(err.Error(), s) {
				t.Fatalf("the error quotes the id: %v", err)
			}
			return
		}
		// Accepted: every promise holds.
		n := utf8.RuneCountInString(s)
		if !utf8.ValidString(s) || n < 1 || n > 256 {
			t.Fatalf("accepted %q: %d runes, valid=%v", s, n, utf8.ValidString(s))
		}
		for _, r := range s {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("accepted %q with control or format character %U", s, r)
			}
		}
		if strings.TrimSpace(s) != s {
			t.Fatalf("accepted %q with surrounding space", s)
		}
	})
}

func TestCheckWorkingDirectory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dir string
		ok  bool
	}{
		{"/", true},
		{"/work/repo", true},
		{"/work/my repo/ü", true},
		{"/" + strings.Repeat("a", 4095), true},
		{"/" + strings.Repeat("a", 4096), false},
		{"", false},
		{"work/repo", false},
		{"./repo", false},
		{"/work/repo/", false},
		{"/work//repo", false},
		{"/work/./repo", false},
		{"/work/../repo", false},
		{"/work/re\npo", false},
		{"/work/re\x00po", false},
		{"/work/\xff", false},
	} {
		err := provider.CheckWorkingDirectory(tc.dir)
		if (err == nil) != tc.ok {
			t.Errorf("CheckWorkingDirectory(%.40q) = %v, want ok=%v", tc.dir, err, tc.ok)
		}
	}
}

func FuzzCheckWorkingDirectory(f *testing.F) {
	for _, s := range []string{"/", "/a", "/a/", "a", "/a/../b", "//a", "/a\x00", "/\u202e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if provider.CheckWorkingDirectory(s) != nil {
			return
		}
		if !filepath.IsAbs(s) || filepath.Clean(s) != s || len(s) > 4096 || !utf8.ValidString(s) {
			t.Fatalf("accepted %q", s)
		}
		for _, r := range s {
			if unicode.IsControl(r) {
				t.Fatalf("accepted %q with a control character", s)
			}
		}
	})
}

func TestCheckConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw string
		ok  bool
	}{
		{"", true},
		{"  ", true},
		{`{}`, true},
		{`{"model":"x","n":1}`, true},
		{`[]`, false},
		{`"x"`, false},
		{`{} {}`, false},
		{`{`, false},
		{`null`, false},
	} {
		err := provider.CheckConfiguration(json.RawMessage(tc.raw))
		if (err == nil) != tc.ok {
			t.Errorf("CheckConfiguration(%q) = %v, want ok=%v", tc.raw, err, tc.ok)
		}
	}
}

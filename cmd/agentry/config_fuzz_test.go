package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseConfig feeds the configuration loader arbitrary files: it
// never panics, every refusal names the file, and what it accepts names
// only serve's flags and applies to them without a panic.
func FuzzParseConfig(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "config", "*.toml"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seed corpus in testdata/config: %v", err)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("max-turns = 0x10\ncheck-in = []\n\"max-open-sessions\" = 3\n"))
	f.Add([]byte("a.b.c = 1\n[[x]]\ny = 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, flags := serveFlags(t)
		cf, err := parseConfig("f.toml", b, flags)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.toml") {
					t.Fatalf("a refusal that does not name the file: %q", line)
				}
			}
			return
		}
		for _, s := range cf.settings {
			if flags.Lookup(s.key) == nil {
				t.Fatalf("accepted key %q, which is no flag", s.key)
			}
		}
		if err := cf.apply(flags); err != nil && !strings.HasPrefix(err.Error(), "f.toml:") {
			t.Fatalf("a refusal that does not name the file: %q", err)
		}
	})
}

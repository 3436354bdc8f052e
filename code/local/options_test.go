package local

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/jail"
)

func TestSettingsDefaults(t *testing.T) {
	s, err := newSettings(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.timeout != 30*time.Second || s.maxChars != 8000 || s.path != os.Getenv("PATH") || s.jail != nil {
		t.Fatalf("defaults: timeout %s, cut %d, path %q", s.timeout, s.maxChars, s.path)
	}
	j, err := newSettings(Options{Jail: &Jail{}})
	if err != nil {
		t.Fatal(err)
	}
	if j.path != jail.DefaultPath || j.jail == nil {
		t.Fatalf("a jail's PATH is %q, want %q", j.path, jail.DefaultPath)
	}
	p, err := newSettings(Options{Env: map[string]string{"PATH": "/opt/bin", "B": "2", "A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if env := p.environ("{}"); strings.Join(env, " ") != "PATH=/opt/bin A=1 B=2 AGENTRY_INPUTS={}" {
		t.Fatalf("environment %v", env)
	}
	for _, bad := range []Options{
		{Env: map[string]string{"A=B": "x"}},
		{Env: map[string]string{"A": "x\x00y"}},
		{Commands: map[string]string{"python": ""}},
		{Jail: &Jail{Memory: -1}},
		{Jail: &Jail{ReadOnly: []string{"relative/dir"}}},
	} {
		if _, err := newSettings(bad); err == nil {
			t.Errorf("options %+v were accepted", bad)
		}
	}
}

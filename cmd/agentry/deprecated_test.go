package main

import (
	"strings"
	"testing"
)

// The renamed serve flags: the old name sets the new one's value and says
// it is deprecated; both at once is refused; help shows only the new name.
func TestServeRenamedFlagsStillWork(t *testing.T) {
	for _, r := range renamedServeFlags {
		t.Run(r.old, func(t *testing.T) {
			cmd := newServeCmd()
			f := cmd.Flags()
			if err := f.Parse([]string{"--" + r.old + "=7"}); err != nil {
				t.Fatal(err)
			}
			if got := f.Lookup(r.new).Value.String(); got != "7" {
				t.Fatalf("--%s=7 left --%s at %s", r.old, r.new, got)
			}
			var stderr strings.Builder
			if err := warnRenamed(f, renamedServeFlags, &stderr); err != nil {
				t.Fatal(err)
			}
			if want := "--" + r.old + " is deprecated and goes in the next release; use --" + r.new; !strings.Contains(stderr.String(), want) {
				t.Fatalf("stderr %q does not say %q", stderr.String(), want)
			}

			both := newServeCmd().Flags()
			if err := both.Parse([]string{"--" + r.old + "=7", "--" + r.new + "=8"}); err != nil {
				t.Fatal(err)
			}
			if err := warnRenamed(both, renamedServeFlags, &stderr); err == nil || !strings.Contains(err.Error(), "give only --"+r.new) {
				t.Fatalf("both names: %v", err)
			}

			fresh := newServeCmd().Flags()
			var quiet strings.Builder
			if err := warnRenamed(fresh, renamedServeFlags, &quiet); err != nil || quiet.Len() != 0 {
				t.Fatalf("no old name given: %v, %q", err, quiet.String())
			}
			usage := newServeCmd().UsageString()
			if !strings.Contains(usage, "--"+r.new) || strings.Contains(usage, "--"+r.old+" ") {
				t.Fatalf("help must name --%s and hide --%s:\n%s", r.new, r.old, usage)
			}
		})
	}
}

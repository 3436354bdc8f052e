package sandbox_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/internal/sandbox"
)

func TestSystemMountsShowTheSystemAndNoUsers(t *testing.T) {
	a := sandbox.SystemMounts()
	if !slices.Equal(a[:3], []string{"--ro-bind", "/usr", "/usr"}) {
		t.Fatalf("SystemMounts does not start with /usr: %q", a)
	}
	for _, dir := range sandbox.SystemDirs {
		fi, err := os.Lstat(dir)
		if err != nil {
			if slices.Contains(a, dir) {
				t.Errorf("%s is missing here but mounted", dir)
			}
			continue
		}
		if !slices.Contains(a, dir) {
			t.Errorf("%s (mode %v) is not mounted", dir, fi.Mode())
		}
	}
	for _, arg := range a {
		for _, secret := range []string{"passwd", "shadow", "group", "/home", "/root"} {
			if strings.Contains(arg, secret) {
				t.Errorf("SystemMounts shows %q", arg)
			}
		}
	}
}

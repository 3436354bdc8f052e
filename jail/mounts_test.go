package jail

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestSystemMountsShowTheSystemAndNoUsers(t *testing.T) {
	a := systemMounts()
	if !slices.Equal(a[:3], []string{"--ro-bind", "/usr", "/usr"}) {
		t.Fatalf("systemMounts does not start with /usr: %q", a)
	}
	for _, dir := range systemDirs {
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
				t.Errorf("systemMounts shows %q", arg)
			}
		}
	}
}

//go:build linux

package jail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOwner(t *testing.T) {
	me := Self()
	if me.Pid != os.Getpid() || me.Start == 0 || !me.Alive() {
		t.Fatalf("Self() = %+v", me)
	}
	back, err := ParseOwner(me.String())
	if err != nil || back != me {
		t.Fatalf("ParseOwner(%q) = %+v, %v", me.String(), back, err)
	}
	// Same pid, another start: a process the pid once named, now gone.
	if (Owner{Pid: me.Pid, Start: me.Start + 1}).Alive() {
		t.Fatal("a reused pid passes for its old owner")
	}
	if (Owner{Pid: 1 << 30, Start: 1}).Alive() {
		t.Fatal("a pid that does not exist is alive")
	}
	for _, bad := range []string{"", "1", "a-1", "1-b", "-1-2", "01-2", "1-02", "0-5"} {
		if _, err := ParseOwner(bad); err == nil {
			t.Errorf("ParseOwner(%q) accepted", bad)
		}
	}
}

func TestParseStartTime(t *testing.T) {
	line := "1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20"
	if got, err := parseStartTime(line); err != nil || got != 4242 {
		t.Fatalf("got %d, %v", got, err)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2"} {
		if _, err := parseStartTime(bad); err == nil {
			t.Errorf("parseStartTime(%q) accepted", bad)
		}
	}
}

func FuzzParseOwner(f *testing.F) {
	for _, s := range []string{"1-2", "4321-99887766", "", "-", "1-", "9999999999999999999999-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseOwner(s)
		if err != nil {
			return
		}
		if o.Pid <= 0 || o.String() != strings.TrimSpace(s) {
			t.Fatalf("ParseOwner(%q) = %+v, which writes as %q", s, o, o.String())
		}
	})
}

func FuzzParseStartTime(f *testing.F) {
	f.Add("1 (sh) S 0 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 77 1 1")
	f.Add("7 ((x)) R")
	f.Fuzz(func(t *testing.T, s string) { _, _ = parseStartTime(s) })
}

func FuzzParseMountPoints(f *testing.F) {
	f.Add(`27 1 254:0 / / rw - ext4 /dev/vda rw` + "\n" + `42 27 0:39 / /tmp/a\040b rw - tmpfs agentry rw,size=1k`)
	f.Add(`\`)
	f.Fuzz(func(t *testing.T, s string) {
		for _, m := range parseMountPoints(s) {
			_ = m
		}
	})
}

func TestSweepDirs(t *testing.T) {
	base := t.TempDir()
	me := Self()
	dead := Owner{Pid: me.Pid, Start: me.Start + 1}
	mk := func(name string, o *Owner) string {
		d := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(d, "work", "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "work", "sub", "data"), []byte("user data"), 0o600)
		os.Chmod(filepath.Join(d, "work", "sub"), 0) // code may lock its own dirs
		if o != nil {
			os.WriteFile(filepath.Join(d, OwnerFile), []byte(o.String()), 0o600)
		}
		return d
	}
	stale := mk("agentry-abc-1", &dead)
	live := mk("agentry-abc-2", &me)
	unmarked := mk("agentry-abc-3", nil)
	other := mk("other-4", &dead)
	// A leftover tmpfs inside the stale one is detached first.
	mounted := false
	if os.Geteuid() == 0 {
		mp := filepath.Join(stale, "fs")
		os.Mkdir(mp, 0o700)
		if err := mountTmpfs(mp, 1<<20, 0, 0); err != nil {
			t.Fatal(err)
		}
		mounted = true
	}
	got := sweepDirs(base, "agentry-")
	if len(got.Failed) != 0 {
		t.Fatalf("sweep failed: %v", got.Failed)
	}
	if len(got.Paths) != 1 || got.Paths[0] != stale || len(got.Owners) != 1 || got.Owners[0] != dead {
		t.Fatalf("swept %+v, want only %s", got, stale)
	}
	for _, d := range []string{live, unmarked, other} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s was touched: %v", d, err)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("%s is still there: %v", stale, err)
	}
	if mounted {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(b), stale) {
			t.Fatal("the leftover tmpfs is still mounted")
		}
	}
	for _, d := range []string{live, unmarked, other} {
		os.Chmod(filepath.Join(d, "work", "sub"), 0o700)
	}
}

package acp

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A workspace handed to the agent's user after the session opened it (as
// the jail hands it at launch) gets files and directories the client
// writes owned by that user, so the agent can rewrite them itself; one
// that stays root's keeps what the client writes root's.
func TestClientWritesBelongToTheWorkspaceOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("handing files to another user needs root")
	}
	owner := func(t *testing.T, p string) uint32 {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Uid
	}
	for _, tc := range []struct {
		name string
		uid  int // the owner the workspace is given after it is opened; 0 keeps root's
	}{{"handed over after open", 65534}, {"root's", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := openWorkspace(dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer w.close()
			if err := os.Chown(dir, tc.uid, tc.uid); err != nil {
				t.Fatal(err)
			}
			if err := w.write("sub/deep/a.txt", "one\n"); err != nil {
				t.Fatal(err)
			}
			if err := w.write("sub/deep/a.txt", "two\n"); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"sub", "sub/deep", "sub/deep/a.txt"} {
				if got := owner(t, filepath.Join(dir, p)); got != uint32(tc.uid) {
					t.Errorf("%s is owned by uid %d, want %d", p, got, tc.uid)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "sub/deep/a.txt")); string(b) != "two\n" {
				t.Errorf("a.txt holds %q", b)
			}
		})
	}
}

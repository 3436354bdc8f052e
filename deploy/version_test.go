package deploy

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A binary built from a git checkout names the commit it was built from,
// whether the tree had changes, and, when the linker stamps them, the
// release version and build time.
func TestVersionOfABuiltBinary(t *testing.T) {
	need(t, "git", "git")
	src := vcsCheckout(t)
	commit := gitOut(t, src, "rev-parse", "HEAD")
	dirty := gitOut(t, src, "status", "--porcelain") != ""
	bin := filepath.Join(t.TempDir(), "agentry")
	// -trimpath and CGO off as .ci/release builds: the build cache is then
	// shared with the release builds, and no package compiles again just
	// because the tree sits in another directory.
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-o", bin,
		"-ldflags", "-X main.version=v9.8.7-test -X main.buildTime=2026-12-02T08:00:00Z", "./cmd/agentry")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	var f struct {
		Version    string `json:"version"`
		Module     string `json:"module"`
		Commit     string `json:"commit"`
		Dirty      *bool  `json:"dirty"`
		CommitTime string `json:"commit_time"`
		BuildTime  string `json:"build_time"`
	}
	if err != nil || json.Unmarshal(out, &f) != nil {
		t.Fatalf("version --json: %v, %q", err, out)
	}
	if f.Commit != commit || f.Dirty == nil || *f.Dirty != dirty || f.CommitTime == "" {
		t.Fatalf("commit %q dirty %v at %q; want %s dirty %v", f.Commit, f.Dirty, f.CommitTime, commit, dirty)
	}
	if f.Version != "v9.8.7-test" || f.BuildTime != "2026-12-02T08:00:00Z" || f.Module != "github.com/agentry-dev/agentry" {
		t.Fatalf("stamped facts: %+v", f)
	}
	out, err = exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "agentry v9.8.7-test\n  commit:    "+commit) || !strings.Contains(string(out), "built:     2026-12-02T08:00:00Z") {
		t.Fatalf("version: %v\n%s", err, out)
	}
}

// gitOut runs git in dir and returns its output without the line end.
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return strings.TrimSpace(gitRaw(t, dir, args...))
}

func gitRaw(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	return string(out)
}

// vcsCheckout returns a directory holding this working tree where the go
// command stamps version control facts. That is the module root itself in
// a plain clone. In a git worktree (.git is a file there) the go command
// finds no repository — it looks for a .git directory — so the tree is
// reproduced in a shared clone: HEAD checked out, then every uncommitted
// change (modified, added, deleted, untracked) copied over it, so its
// commit and its dirtiness are this tree's.
func vcsCheckout(t *testing.T) string {
	t.Helper()
	root := gitOut(t, ".", "rev-parse", "--show-toplevel")
	if fi, err := os.Stat(filepath.Join(root, ".git")); err == nil && fi.IsDir() {
		return root
	}
	clone := filepath.Join(t.TempDir(), "src")
	gitOut(t, root, "clone", "-q", "--shared", "--no-checkout", gitOut(t, root, "rev-parse", "--path-format=absolute", "--git-common-dir"), clone)
	gitOut(t, clone, "checkout", "-q", "--detach", gitOut(t, root, "rev-parse", "HEAD"))
	status := gitRaw(t, root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
	entries := strings.Split(status, "\x00")
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if len(e) < 4 {
			continue
		}
		code, path := e[:2], e[3:]
		if code[0] == 'R' || code[0] == 'C' { // the next entry is the source path
			i++
			if code[0] == 'R' {
				_ = os.Remove(filepath.Join(clone, entries[i]))
			}
		}
		copyOver(t, filepath.Join(root, path), filepath.Join(clone, path))
	}
	return clone
}

// copyOver makes dst what src is now: a copy, or gone when src is.
func copyOver(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

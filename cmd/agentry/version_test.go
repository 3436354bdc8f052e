package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	out, err := execute(t, "version")
	if err != nil || !strings.HasPrefix(out, "agentry ") || !strings.Contains(out, "\n  go:") {
		t.Fatalf("version: %q, %v", out, err)
	}
	out, err = execute(t, "version", "--json")
	var f buildFacts
	if err != nil || json.Unmarshal([]byte(out), &f) != nil || f.Version == "" || f.Go == "" {
		t.Fatalf("version --json: %q, %v", out, err)
	}
}

func TestReadBuildFacts(t *testing.T) {
	yes, no := true, false
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	main := debug.Module{Path: "github.com/agentry-dev/agentry", Version: "(devel)"}
	for _, tc := range []struct {
		name           string
		bi             *debug.BuildInfo
		stamped, built string
		want           buildFacts
	}{
		{name: "no build information", want: buildFacts{Version: "devel"}},
		{name: "a plain build outside git", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: main},
			want: buildFacts{Version: "devel", Module: main.Path, Go: "go1.26.8"}},
		{name: "a git checkout with changes", bi: &debug.BuildInfo{GoVersion: "go1.26.8",
			Main:     debug.Module{Path: main.Path, Version: "v0.0.0-20261202074100-ce59b7176673+dirty"},
			Settings: vcs("vcs", "git", "vcs.revision", "ce59b7176673b918e1174278bfdd4cf026b8fc2a", "vcs.time", "2026-12-02T07:41:00Z", "vcs.modified", "true")},
			want: buildFacts{Version: "v0.0.0-20261202074100-ce59b7176673+dirty", Module: main.Path, Go: "go1.26.8",
				Commit: "ce59b7176673b918e1174278bfdd4cf026b8fc2a", CommitTime: "2026-12-02T07:41:00Z", Dirty: &yes}},
		{name: "a release build", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: main,
			Settings: vcs("vcs.revision", "ce59b7176673b918e1174278bfdd4cf026b8fc2a", "vcs.modified", "false")},
			stamped: "v0.1.0", built: "2026-12-02T08:00:00Z",
			want: buildFacts{Version: "v0.1.0", Module: main.Path, Go: "go1.26.8", BuildTime: "2026-12-02T08:00:00Z",
				Commit: "ce59b7176673b918e1174278bfdd4cf026b8fc2a", Dirty: &no}},
		{name: "vcs.modified without a revision is not reported", bi: &debug.BuildInfo{Main: main, Settings: vcs("vcs.modified", "true", "vcs.time", "2026-12-02T07:41:00Z")},
			want: buildFacts{Version: "devel", Module: main.Path}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readBuildFacts(tc.bi, tc.stamped, tc.built)
			if tc.want.Go == "" {
				tc.want.Go = runtime.Version()
			}
			tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if !bytes.Equal(gj, wj) {
				t.Fatalf("got  %s\nwant %s", gj, wj)
			}
			var text bytes.Buffer
			got.write(&text)
			if !strings.HasPrefix(text.String(), "agentry "+tc.want.Version+"\n") {
				t.Fatalf("text:\n%s", text.String())
			}
			if tc.want.Commit == "" && !strings.Contains(text.String(), "commit:    not recorded") ||
				tc.want.Dirty != nil && *tc.want.Dirty && !strings.Contains(text.String(), "(dirty: built with uncommitted changes)") {
				t.Fatalf("text does not state the commit as it is:\n%s", text.String())
			}
		})
	}
}

// A binary built from a git checkout names the commit it was built from,
// whether the tree had changes, and, when the linker stamps them, the
// release version and build time.
func TestVersionOfABuiltBinary(t *testing.T) {
	src := vcsCheckout(t)
	head := gitOut(t, src, "rev-parse", "HEAD")
	dirty := gitOut(t, src, "status", "--porcelain") != ""
	bin := filepath.Join(t.TempDir(), "agentry")
	// Built as buildAgentry builds (no -trimpath), so in a plain clone only
	// the link is new; .ci/release's -trimpath builds are tested in deploy.
	build := exec.Command(goTool(), "build", "-buildvcs=true", "-o", bin,
		"-ldflags", "-X main.version=v9.8.7-test -X main.buildTime=2026-12-02T08:00:00Z", "./cmd/agentry")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, errout, code := exe(t, bin, nil, "version", "--json")
	var f buildFacts
	if code != 0 || json.Unmarshal([]byte(out), &f) != nil {
		t.Fatalf("version --json: exit %d, %q, %q", code, out, errout)
	}
	if f.Commit != head || f.Dirty == nil || *f.Dirty != dirty || f.CommitTime == "" {
		t.Fatalf("commit %q dirty %v at %q; want %s dirty %v", f.Commit, f.Dirty, f.CommitTime, head, dirty)
	}
	if f.Version != "v9.8.7-test" || f.BuildTime != "2026-12-02T08:00:00Z" || f.Module != "github.com/agentry-dev/agentry" {
		t.Fatalf("stamped facts: %+v", f)
	}
	out, _, code = exe(t, bin, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "agentry v9.8.7-test\n  commit:    "+head) || !strings.Contains(out, "built:     2026-12-02T08:00:00Z") {
		t.Fatalf("version:\n%s", out)
	}
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
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
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is missing: the version test needs a git checkout")
	}
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

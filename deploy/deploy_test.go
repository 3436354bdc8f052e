// Package deploy holds what ships agentry beyond its source — the systemd
// unit here, the Containerfile and the .ci/release and .ci/image scripts at
// the root — and the tests that check them: the release binaries as built,
// the image's filesystem with agentry run from it, and the unit as systemd
// reads it, with its hardening leaving the jail working.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// scratch is this test binary's own directory for what its tests share
// (the release binaries), removed when they are done.
var scratch string

func TestMain(m *testing.M) {
	var err error
	if scratch, err = os.MkdirTemp("", "agentry-deploy-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(scratch)
	os.Exit(code)
}

// repoRoot is the checkout this package sits in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// need finds a program; without it the test fails under CI=true and skips,
// loudly, elsewhere.
func need(t *testing.T, program, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing and CI=true: install it (Debian: apt-get install %s; .ci/run does)", program, debianPackage)
	}
	t.Skipf("LOUD: %s is not on PATH; this test needs it (apt-get install %s)", program, debianPackage)
	return ""
}

// needRoot: podman's storage, chroot and the capability check need root.
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but not root: %s needs root", why)
	}
	t.Skipf("LOUD: not root; %s needs root", why)
}

// run runs a program and fails the test unless it exits 0; it returns
// stdout.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// head is the commit checked out, which every binary built here must name.
func head(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(run(t, repoRoot(t), nil, "git", "rev-parse", "HEAD"))
}

var (
	releaseOnce sync.Once
	releaseDir  string
	releaseErr  error
)

// release returns the directory holding .ci/release's output: the one
// AGENTRY_RELEASE_DIR names (.ci/run builds it before the tests), or one
// built here once for every test of this package.
func release(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("AGENTRY_RELEASE_DIR"); dir != "" {
		return dir
	}
	need(t, "git", "git")
	releaseOnce.Do(func() {
		dir := filepath.Join(scratch, "dist")
		cmd := exec.Command(filepath.Join(repoRoot(t), ".ci", "release"))
		cmd.Env = append(os.Environ(), "OUT="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			releaseErr = fmt.Errorf(".ci/release: %v\n%s", err, out)
			return
		}
		releaseDir = dir
	})
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseDir
}

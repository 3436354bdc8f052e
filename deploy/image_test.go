package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The image's user: the Containerfile makes it.
const imageUID, imageGID = 10001, 10001

// The container image, built by .ci/image with podman on a debootstrapped
// Debian base. Containers cannot run on the CI machines (see .ci/image), so
// the image is exported and agentry is run from its filesystem: in a chroot
// as the image's user, and in a bubblewrap root (as a container would give
// it: its own mount and PID namespaces), where the image's own bubblewrap
// must jail the demo's interpreter.
func TestImage(t *testing.T) {
	needRoot(t, "podman's storage and the chroot")
	need(t, "podman", "podman")
	need(t, "debootstrap", "debootstrap")
	tag := image(t)
	checkImageConfig(t, tag)

	root := exportImage(t, tag)
	checkImageFiles(t, root)

	t.Run("version in a chroot", func(t *testing.T) {
		out, errout, err := inChroot(t, root, "/usr/local/bin/agentry", "version", "--json")
		var v struct {
			Commit   string `json:"commit"`
			Platform string `json:"platform"`
		}
		if err != nil || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("agentry version --json in the image: %v\n%s\n%s", err, out, errout)
		}
		if want := head(t); v.Commit != want || v.Platform != "linux/amd64" {
			t.Fatalf("the image's agentry: commit %s on %s, want %s on linux/amd64", v.Commit, v.Platform, want)
		}
	})
	t.Run("demo in a chroot", func(t *testing.T) {
		out, errout, err := inChroot(t, root, "/usr/local/bin/agentry", "demo")
		// A chroot cannot make user namespaces, so the demo says it runs
		// unjailed, and why; the tour itself must pass.
		if err != nil || !strings.Contains(out, "verdict: zero leaks") || !strings.Contains(out+errout, "UNJAILED") {
			t.Fatalf("agentry demo in a chroot of the image: %v\n%s\n%s", err, out, errout)
		}
	})
	t.Run("demo jailed by the image's bubblewrap", func(t *testing.T) {
		need(t, "bwrap", "bubblewrap")
		need(t, "setpriv", "util-linux")
		out, errout, err := inBwrapRoot(t, root, "/usr/local/bin/agentry", "demo")
		if err != nil || !strings.Contains(out, "verdict: zero leaks") || !strings.Contains(out, "jailed with bubblewrap") || strings.Contains(out+errout, "UNJAILED") {
			t.Fatalf("agentry demo in a bubblewrap root of the image: %v\n%s\n%s", err, out, errout)
		}
	})
}

// image returns the tag of the image to check: AGENTRY_IMAGE (.ci/run
// builds it before the tests), or one .ci/image builds now under a name of
// this run's own and removes when the test ends.
func image(t *testing.T) string {
	t.Helper()
	if tag := os.Getenv("AGENTRY_IMAGE"); tag != "" {
		return tag
	}
	tag := fmt.Sprintf("localhost/agentry-test:%d-%d", os.Getpid(), time.Now().UnixNano())
	env := []string{"AGENTRY_BINARY=" + filepath.Join(release(t), "agentry-linux-amd64")}
	run(t, repoRoot(t), env, filepath.Join(repoRoot(t), ".ci", "image"), tag)
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "--force", tag).Run() })
	return tag
}

func checkImageConfig(t *testing.T, tag string) {
	t.Helper()
	var inspected []struct {
		Config struct {
			User       string
			WorkingDir string
			Entrypoint []string
			Volumes    map[string]struct{}
			Env        []string
		}
		Size int64
	}
	if err := json.Unmarshal([]byte(run(t, "", nil, "podman", "image", "inspect", tag)), &inspected); err != nil || len(inspected) != 1 {
		t.Fatalf("podman image inspect %s: %v", tag, err)
	}
	c := inspected[0].Config
	if c.User != "agentry" || c.WorkingDir != "/var/lib/agentry" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/agentry"}) {
		t.Errorf("image config: user %q, workdir %q, entrypoint %q", c.User, c.WorkingDir, c.Entrypoint)
	}
	if _, ok := c.Volumes["/var/lib/agentry"]; !ok {
		t.Errorf("the data directory is not a volume: %v", c.Volumes)
	}
	t.Logf("image %s: %.0f MB", tag, float64(inspected[0].Size)/1e6)
}

// exportImage writes the image's filesystem into a directory: a container
// is created (never started) and exported.
func exportImage(t *testing.T, tag string) string {
	t.Helper()
	name := fmt.Sprintf("agentry-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	run(t, "", nil, "podman", "create", "--name", name, tag)
	t.Cleanup(func() { _ = exec.Command("podman", "rm", "--force", name).Run() })
	// The image's user must reach the tree (a bubblewrap root binds it).
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tarball := filepath.Join(dir, "image.tar")
	run(t, "", nil, "podman", "export", "--output", tarball, name)
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "", nil, "tar", "--numeric-owner", "-xpf", tarball, "-C", root)
	if err := os.Remove(tarball); err != nil {
		t.Fatal(err)
	}
	// The device nodes a process expects, as a container runtime would
	// provide them (debootstrap leaves them in the base; make sure).
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"urandom", 1, 9}} {
		p := filepath.Join(root, "dev", d.name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&fs.ModeCharDevice != 0 {
			continue
		}
		_ = os.Remove(p)
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, int(d.major<<8|d.minor)); err != nil {
			t.Fatalf("mknod %s: %v", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// checkImageFiles: what the image must hold, and what it must not.
func checkImageFiles(t *testing.T, root string) {
	t.Helper()
	for _, p := range []string{"/usr/local/bin/agentry", "/usr/bin/bwrap", "/usr/bin/python3", "/usr/bin/prlimit", "/usr/bin/setpriv", "/usr/bin/nsenter"} {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s is not an executable in the image: %v", p, err)
			continue
		}
		// The jail is chosen to work through user namespaces, so nothing is
		// setuid: not bwrap either.
		if fi.Mode()&fs.ModeSetuid != 0 {
			t.Errorf("%s is setuid in the image", p)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); err != nil || fi.Size() < 1000 {
		t.Errorf("no CA certificates in the image: %v", err)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil || !bytes.Contains(passwd, []byte(fmt.Sprintf("\nagentry:x:%d:%d:", imageUID, imageGID))) {
		t.Errorf("no agentry user %d in the image's /etc/passwd: %v", imageUID, err)
	}
	fi, err := os.Stat(filepath.Join(root, "var/lib/agentry"))
	if err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != imageUID || fi.Mode().Perm() != 0o750 {
		t.Errorf("the data directory: %v, %v", fi, err)
	}
	for _, p := range []string{"usr/local/go", "var/lib/apt/lists/lock"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the image holds %s, which it should not (%v)", p, err)
		}
	}
	lists, _ := filepath.Glob(filepath.Join(root, "var/lib/apt/lists/*_Packages"))
	if len(lists) > 0 {
		t.Errorf("the image keeps apt's package lists: %v", lists)
	}
}

// imageEnv is the environment the image sets, as a container would start.
var imageEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/var/lib/agentry"}

// inChroot runs a program of the image in a chroot of root, as the image's
// user, in its working directory.
func inChroot(t *testing.T, root, prog string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(bounded(t), prog, args...)
	cmd.Env = imageEnv
	cmd.Dir = "/var/lib/agentry"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: imageUID, Gid: imageGID, Groups: []uint32{}},
	}
	return output(cmd)
}

// inBwrapRoot runs a program of the image with root as its whole
// filesystem, in mount and PID namespaces of its own, as the image's user —
// the view a container gives it, without the container runtime these
// machines cannot run. Unlike a chroot it can make user namespaces, so the
// image's bubblewrap can jail.
func inBwrapRoot(t *testing.T, root, prog string, args ...string) (string, string, error) {
	argv := []string{
		"--reuid", fmt.Sprint(imageUID), "--regid", fmt.Sprint(imageGID), "--clear-groups", "--",
		"bwrap", "--bind", root, "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
		"--chdir", "/var/lib/agentry", "--", prog,
	}
	cmd := exec.CommandContext(bounded(t), "setpriv", append(argv, args...)...)
	cmd.Env = imageEnv
	return output(cmd)
}

// bounded is the test's context, ended after three minutes: a program of
// the image that hangs is killed.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func output(cmd *exec.Cmd) (string, string, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

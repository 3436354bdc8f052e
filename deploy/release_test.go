package deploy

import (
	"bufio"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The release binaries as .ci/release builds them: one per platform, for
// the machine they name, stripped, -trimpath, CGO off, carrying the commit
// they were built from and their build time, listed in SHA256SUMS with
// their true digests.
func TestRelease(t *testing.T) {
	dir := release(t)
	commit := head(t)
	want := map[string]elf.Machine{"agentry-linux-amd64": elf.EM_X86_64, "agentry-linux-arm64": elf.EM_AARCH64}

	sums := readSums(t, filepath.Join(dir, "SHA256SUMS"))
	if len(sums) != len(want) {
		t.Fatalf("SHA256SUMS lists %v; want exactly %d binaries", sums, len(want))
	}
	for name, machine := range want {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		digest := sha256.Sum256(b)
		if got := hex.EncodeToString(digest[:]); sums[name] != got {
			t.Errorf("%s: SHA256SUMS says %q, the file's digest is %s", name, sums[name], got)
		}
		checkELF(t, path, machine)
		checkBuildInfo(t, path, commit)
		t.Logf("%s: %.1f MiB (%d bytes)", name, float64(len(b))/(1<<20), len(b))
	}

	// The binary for this machine says what it is.
	self := filepath.Join(dir, "agentry-"+runtime.GOOS+"-"+runtime.GOARCH)
	if _, ok := want[filepath.Base(self)]; !ok {
		t.Skipf("LOUD: no release binary runs on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	out, err := exec.Command(self, "version", "--json").Output()
	if err != nil {
		t.Fatalf("%s version --json: %v", self, err)
	}
	var v struct {
		Version   string `json:"version"`
		Commit    string `json:"commit"`
		Dirty     *bool  `json:"dirty"`
		BuildTime string `json:"build_time"`
		Platform  string `json:"platform"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version --json: %v\n%s", err, out)
	}
	if v.Commit != commit || v.Dirty == nil || *v.Dirty || v.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("version --json of the release binary: %s", out)
	}
	if _, err := time.Parse(time.RFC3339, v.BuildTime); err != nil {
		t.Fatalf("build_time %q is not RFC 3339: %v", v.BuildTime, err)
	}
	// No tag on HEAD and none given: the go command's pseudo-version,
	// which names the commit.
	if os.Getenv("AGENTRY_RELEASE_DIR") == "" && !strings.Contains(v.Version, commit[:12]) {
		t.Fatalf("version %q does not name commit %s", v.Version, commit[:12])
	}
}

func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		digest, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(digest) != 64 {
			t.Fatalf("%s: a line not in sha256sum's format: %q", path, sc.Text())
		}
		sums[name] = digest
	}
	return sums
}

// checkELF: the binary is for machine and stripped of symbols (-s) and
// DWARF (-w).
func checkELF(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s is not an ELF binary: %v", path, err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s is for %v, want %v", path, f.Machine, machine)
	}
	for _, s := range []string{".symtab", ".debug_info", ".zdebug_info"} {
		if f.Section(s) != nil {
			t.Errorf("%s has a %s section: not stripped", path, s)
		}
	}
}

// checkBuildInfo: built with -trimpath, CGO off, from commit, with no
// uncommitted changes. (With -trimpath the go command records no -ldflags;
// checkELF sees -s -w, and version --json the stamped build time.)
func checkBuildInfo(t *testing.T, path, commit string) {
	t.Helper()
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"-trimpath": "true", "CGO_ENABLED": "0", "vcs.revision": commit, "vcs.modified": "false"} {
		if settings[k] != v {
			t.Errorf("%s: build setting %s = %q, want %q", path, k, settings[k], v)
		}
	}
}

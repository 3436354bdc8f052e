package deploy

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const unitFile = "agentry.service"

// systemd reads the unit without a complaint, in a root holding the system's
// own units and the release binary where ExecStart names it; a misspelled
// option in a copy of it is reported, so the check can fail.
func TestSystemdUnit(t *testing.T) {
	analyze := need(t, "systemd-analyze", "systemd")
	root := unitRoot(t)
	out, err := exec.Command(analyze, "verify", "--root="+root, "/etc/systemd/system/"+unitFile).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}

	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	broken := bytes.Replace(unit, []byte("\nProtectSystem=strict"), []byte("\nProtectSytem=strict"), 1)
	if err := os.WriteFile(filepath.Join(root, "etc/systemd/system/broken.service"), broken, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ = exec.Command(analyze, "verify", "--root="+root, "/etc/systemd/system/broken.service").CombinedOutput()
	if !bytes.Contains(out, []byte("Unknown key")) {
		t.Fatalf("a misspelled option passed systemd-analyze verify:\n%s", out)
	}

	// How exposed the service is, by systemd's own measure (docs/deploy.md
	// quotes it): hardening dropped by mistake raises it.
	out, err = exec.Command(analyze, "security", "--offline=true", "--root="+root, "/etc/systemd/system/"+unitFile).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 5.3 {
		t.Fatalf("the unit's exposure level is %.1f; it was 5.1 — which hardening went?", level)
	}
	t.Logf("systemd-analyze security: exposure %s", m[1])
}

// unitRoot is a directory systemd-analyze --root reads as a system: the
// unit, the system's units it depends on, and agentry at /usr/local/bin.
func unitRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	units := filepath.Join(root, "usr/lib/systemd/system")
	if err := os.MkdirAll(filepath.Dir(units), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "", nil, "cp", "-a", "/usr/lib/systemd/system", units)
	for _, f := range []struct{ src, dst string }{
		{unitFile, "etc/systemd/system/" + unitFile},
		{filepath.Join(release(t), "agentry-linux-amd64"), "usr/local/bin/agentry"},
	} {
		dst := filepath.Join(root, f.dst)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "", nil, "cp", f.src, dst)
	}
	return root
}

// The unit's capability bounding set and no_new_privs leave both jails
// whole, set with setpriv as systemd would set them: agentry run answers
// with its code jailed and every per-session cap applied (it says nothing on
// stderr, where it would name a cap it could not apply or a jail it could
// not build), and the agent jail's own launch tests pass. Each capability
// of the set is needed: without any one of them, one of these fails.
func TestSystemdUnitCapabilitiesKeepTheJail(t *testing.T) {
	needRoot(t, "the capability bounding set")
	need(t, "setpriv", "util-linux")
	need(t, "bwrap", "bubblewrap")
	need(t, "python3", "python3")
	caps, nnp := unitPrivileges(t)
	if !nnp {
		t.Fatal("the unit does not set NoNewPrivileges=yes")
	}
	asTheUnit := func(dir, prog string, args ...string) (string, string, error) {
		argv := append([]string{"--no-new-privs", "--inh-caps=-all", "--bounding-set=-all," + strings.Join(caps, ","), "--", prog}, args...)
		cmd := exec.CommandContext(bounded(t), "setpriv", argv...)
		cmd.Dir = dir
		return output(cmd)
	}

	t.Run("code jail", func(t *testing.T) {
		bin := filepath.Join(release(t), "agentry-linux-amd64")
		dir := t.TempDir()
		out, errout, err := asTheUnit(dir, bin, "run", "--runner", "jail", "--events", "e.ndjson", "print(6*7)")
		if err != nil || out != "42\n" || errout != "" {
			t.Fatalf("agentry run under the unit's capabilities (%s): %v\nstdout %q\nstderr:\n%s", strings.Join(caps, ","), err, out, errout)
		}
		audit := exec.Command(bin, "events", "audit", "e.ndjson")
		audit.Dir = dir
		if b, err := audit.CombinedOutput(); err != nil {
			t.Fatalf("events audit: %v\n%s", err, b)
		}
	})

	t.Run("agent jail", func(t *testing.T) {
		// The jail package's tests that launch a jailed agent: its
		// filesystem, network allowlist, caps, seccomp filter and stop.
		testBin := filepath.Join(t.TempDir(), "jail.test")
		run(t, repoRoot(t), nil, "go", "test", "-c", "-o", testBin, "./jail")
		launches := "^(TestSandboxedAgentGetsTheFilter|TestSandboxedMemoryCap|TestSandboxedDiskCap|TestCommandConfinedLikeTheAgent|" +
			"TestFilesystemIsConfined|TestNetworkOnlyTheAllowlist|TestStopKillsTheWholeJail|TestAgentExit)$"
		out, errout, err := asTheUnit(filepath.Join(repoRoot(t), "jail"), testBin, "-test.run", launches, "-test.v")
		if err != nil || strings.Contains(out, "--- SKIP") || strings.Count(out, "--- PASS") < 8 {
			t.Fatalf("the jail's launch tests under the unit's capabilities: %v\n%s\n%s", err, out, errout)
		}
	})
}

// unitPrivileges reads CapabilityBoundingSet (as setpriv's +cap list) and
// NoNewPrivileges from the unit.
func unitPrivileges(t *testing.T) (caps []string, noNewPrivileges bool) {
	t.Helper()
	f, err := os.Open(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		switch {
		case !ok:
		case key == "CapabilityBoundingSet":
			for _, c := range strings.Fields(value) {
				caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
		case key == "NoNewPrivileges":
			noNewPrivileges = value == "yes"
		}
	}
	if len(caps) == 0 {
		t.Fatal("the unit has no CapabilityBoundingSet")
	}
	return caps, noNewPrivileges
}

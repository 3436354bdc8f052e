package jail

import (
	"strings"
	"testing"
)

func TestCodeDefaults(t *testing.T) {
	c, err := NewCode(CodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--as=2147483648", "--nproc=64", "--cpu=600", "--fsize=1073741824", "--nofile=1024", "--core=0"}
	if strings.Join(c.limits, " ") != strings.Join(want, " ") {
		t.Fatalf("code jail rlimits %v, want %v", c.limits, want)
	}
	if c.caps != (cellLimits{Memory: 2 << 30, Processes: 256, CPUs: 1}) || c.disk != 1<<30 || c.uid != defaultUID {
		t.Fatalf("code jail caps %+v, disk %d, uid %d", c.caps, c.disk, c.uid)
	}
	for _, bad := range []CodeOptions{{Memory: -1}, {SessionCPUs: -1}, {Disk: -5}, {ReadOnly: []string{"relative/dir"}}} {
		if _, err := NewCode(bad); err == nil || !strings.HasPrefix(err.Error(), "jail: ") {
			t.Errorf("NewCode(%+v) = %v; want a refusal", bad, err)
		}
	}
}

// The one argument builder: both profiles' command lines are bubblewrap's
// full confinement, differing only where the profile says.
func TestBwrapArgs(t *testing.T) {
	code := bwrapView{net: true, fds: fdArg("--seccomp", 4), userns: true, readOnly: []string{"/opt/venv"},
		binds: [][2]string{{"/tmp/c/fs/work", "/work"}, {"/tmp/c/fs/tmp", "/tmp"}}, chdir: "/work",
		prlimit: "/usr/bin/prlimit", limits: []string{"--nproc=64"}, argv: []string{"/usr/bin/python3", "-c", "x"}}.args()
	agent := bwrapView{net: true, insideID: insideUID, fds: fdArg("--info-fd", 3), etc: [][2]string{{"passwd", "/tmp/a/etc/passwd"}},
		binds: [][2]string{{"/ws", "/ws"}}, chdir: "/ws", prlimit: "/usr/bin/prlimit", argv: []string{"agent"}}.args()
	terminal := bwrapView{chdir: "/ws", prlimit: "/usr/bin/prlimit", argv: []string{"sh"}}.args()
	has := func(a []string, seq ...string) bool {
		return strings.Contains(" "+strings.Join(a, " ")+" ", " "+strings.Join(seq, " ")+" ")
	}
	for name, a := range map[string][]string{"code": code, "agent": agent, "terminal": terminal} {
		for _, seq := range [][]string{{"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"},
			{"--die-with-parent", "--new-session"}, {"--ro-bind", "/usr", "/usr"}, {"--proc", "/proc", "--dev", "/dev"},
			{"--remount-ro", "/dev", "--remount-ro", "/"}} {
			if !has(a, seq...) {
				t.Errorf("%s: %q lacks %q", name, a, seq)
			}
		}
		if i, j := strings.Index(strings.Join(a, " "), "--bind "), strings.Index(strings.Join(a, " "), "--remount-ro / "); i > j && i >= 0 {
			t.Errorf("%s: a writable bind after the root is made read-only: %q", name, a)
		}
	}
	for _, want := range [][]string{{"--unshare-net"}, {"--seccomp", "4"}, {"--disable-userns"}, {"--ro-bind", "/opt/venv", "/opt/venv"},
		{"--bind", "/tmp/c/fs/work", "/work"}, {"--chdir", "/work", "--", "/usr/bin/prlimit", "--nproc=64", "--", "/usr/bin/python3", "-c", "x"}} {
		if !has(code, want...) {
			t.Errorf("code: %q lacks %q", code, want)
		}
	}
	for _, want := range [][]string{{"--unshare-net"}, {"--uid", "1000", "--gid", "1000"}, {"--info-fd", "3"}, {"--ro-bind", "/tmp/a/etc/passwd", "/etc/passwd"}} {
		if !has(agent, want...) {
			t.Errorf("agent: %q lacks %q", agent, want)
		}
	}
	if has(terminal, "--unshare-net") || has(terminal, "--uid") {
		t.Errorf("a terminal joins its agent's network and keeps its ids: %q", terminal)
	}
}

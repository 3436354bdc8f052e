//go:build linux

package jail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/internal/sandbox"
)

// ready finds bwrap and the util-linux programs, and proves once that
// bubblewrap can build a jail with its own network namespace as the
// jail's user. Success is cached; a failure is not, so a fixed machine
// recovers without a restart.
func (s *settings) ready(ctx context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return nil
	}
	bw, err := exec.LookPath(s.bwrap)
	if err != nil {
		return fmt.Errorf("%w: bubblewrap (%q) is not installed; install the Debian package bubblewrap (apt-get install bubblewrap) — a jailed agent never runs unjailed", ErrNoJail, s.bwrap)
	}
	tools := map[string]*string{"nsenter": &s.nsenter, "prlimit": &s.prlimit}
	for name, dst := range tools {
		p, err := lookPath(name, DefaultPath)
		if err != nil {
			return fmt.Errorf("%w: %s is not in %s; install the Debian package util-linux", ErrNoJail, name, DefaultPath)
		}
		*dst = p
	}
	if _, err := lookPath("setpriv", DefaultPath); err != nil {
		return fmt.Errorf("%w: setpriv is not in %s; install the Debian package util-linux", ErrNoJail, DefaultPath)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: agentry runs as uid %d, and jailing an agent needs root: root places the agent's network forwarders in its namespace and hands its directories to an unprivileged user; run agentry as root, or use the explicit unjailed single-user launcher", ErrNoJail, os.Geteuid())
	}
	s.bwrap = bw
	help, _ := exec.CommandContext(ctx, bw, "--help").CombinedOutput()
	s.userns = bytes.Contains(help, []byte("--disable-userns"))

	d, err := newSessionDirs(s.dir, "probe", nil)
	if err != nil {
		return err
	}
	defer d.remove()
	if err := d.writeEtc(""); err != nil {
		return err
	}
	if err := chownTree(d.root, s.uid, s.gid); err != nil {
		return fmt.Errorf("jail: giving the probe's directory to uid %d: %w", s.uid, err)
	}
	truth, err := lookPath("true", DefaultPath)
	if err != nil {
		return fmt.Errorf("%w: true(1) is not in %s; install the Debian package coreutils", ErrNoJail, DefaultPath)
	}
	args := s.args(jailView{dirs: d, workspace: d.tmp, workspaceReal: d.tmp, cwd: "/tmp", net: true}, nil, []string{truth})
	cmd := exec.CommandContext(ctx, bw, args...)
	cmd.Env = []string{"PATH=" + DefaultPath}
	cmd.SysProcAttr = s.sysProcAttr()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: bubblewrap could not build a jail here (%v: %s); it needs unprivileged user namespaces "+
			"(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; in a container, allow them in its seccomp/AppArmor profile), "+
			"and %s must be traversable by uid %d",
			ErrNoJail, err, strings.TrimSpace(tail(out.String(), 400)), s.dir, s.uid)
	}
	s.probed = true
	return nil
}

// sysProcAttr: bwrap leads its own process group, dies with agentry's
// thread that started it, and runs as the jail's user with no
// supplementary groups.
func (s *settings) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.gid), Groups: []uint32{}},
	}
}

// jailView is what one bwrap invocation mounts.
type jailView struct {
	dirs                     sessionDirs
	workspace, workspaceReal string
	install                  []string
	cwd                      string
	net                      bool // a network namespace of its own (the agent); false: the caller placed it in one
}

// args is bwrap's command line: extra are options before "--" (the info
// and block descriptors, a Confiner's), argv what runs under prlimit.
func (s *settings) args(v jailView, extra []string, argv []string) []string {
	a := []string{
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
		"--uid", strconv.Itoa(InsideUID), "--gid", strconv.Itoa(InsideUID),
		"--die-with-parent", "--new-session",
		"--hostname", "sandbox",
	}
	if v.net {
		a = append(a, "--unshare-net")
	}
	if s.userns {
		a = append(a, "--disable-userns")
	}
	a = append(a, sandbox.SystemMounts()...)
	for _, f := range []string{"passwd", "group", "hosts", "nsswitch.conf"} {
		a = append(a, "--ro-bind", filepath.Join(v.dirs.etc, f), "/etc/"+f)
	}
	for _, p := range s.readOnly {
		a = append(a, "--ro-bind", p, p)
	}
	for _, p := range v.install {
		a = append(a, "--ro-bind", p, p)
	}
	a = append(a,
		"--proc", "/proc",
		"--dev", "/dev",
		"--bind", v.dirs.tmp, "/tmp",
		"--bind", v.dirs.home, Home,
		"--bind", v.workspaceReal, v.workspace,
	)
	// Before the remounts, so that a Confiner's mounts can be made.
	a = append(a, extra...)
	a = append(a,
		// Nothing else is writable: not the root, not /dev.
		"--remount-ro", "/dev",
		"--remount-ro", "/",
		"--chdir", v.cwd,
		"--", s.prlimit)
	a = append(a, s.limits...)
	a = append(a, "--")
	return append(a, argv...)
}

// launch is Launch on Linux.
func (s *settings) launch(ctx context.Context, spec Spec) (*Process, error) {
	began := time.Now()
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("jail: Spec.Argv is empty; name the agent's command")
	}
	if err := validLabel(spec.Label); err != nil {
		return nil, err
	}
	path, err := checkEnv("Spec.Env", spec.Env, map[string]bool{})
	if err != nil {
		return nil, err
	}
	if path == "" {
		path = DefaultPath
	}
	ws, wsReal, err := s.workspacePath(spec.Workspace)
	if err != nil {
		return nil, err
	}
	allow, err := newAllowlist(spec.AllowHosts)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, x := range spec.Expose {
		switch {
		case x.Name == "":
			return nil, fmt.Errorf("jail: a Spec.Expose entry has no Name")
		case names[x.Name]:
			return nil, fmt.Errorf("jail: Spec.Expose names %q twice", x.Name)
		case x.Listener == nil:
			return nil, fmt.Errorf("jail: Spec.Expose[%q] has no Listener", x.Name)
		}
		names[x.Name] = true
	}
	install, err := s.installDirs(spec.Argv[0], path)
	if err != nil {
		return nil, err
	}
	for _, d := range install {
		if within(d, wsReal) || within(wsReal, d) {
			return nil, fmt.Errorf("jail: the agent's install directory %s and the workspace %s overlap; the agent could rewrite itself, or see the workspace's neighbours: install it elsewhere", d, ws)
		}
	}
	if err := reachable("Spec.Workspace", wsReal, s.uid, s.gid); err != nil {
		return nil, err
	}
	for _, d := range append(install, s.readOnly...) {
		if err := reachable("the read-only mount", d, s.uid, s.gid); err != nil {
			return nil, err
		}
	}
	plan, err := planNetwork(allow)
	if err != nil {
		return nil, err
	}
	proxyPort, exposePorts := plan.ports(len(spec.Expose))
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()

	p := &proc{s: s, label: spec.Label, emit: spec.Events, env: spec.Env, path: path,
		view:    jailView{workspace: ws, workspaceReal: wsReal, install: install, cwd: ws},
		exposed: map[string]string{}, done: make(chan struct{}), stderr: newTail(8 << 10)}
	p.life, p.endLife = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			p.abort()
		}
	}()
	// The Confiner sees the private directory while it is empty (it may
	// mount the disk cap there), before HOME, /tmp and /etc are made in it.
	// The agent's descriptors 3 and 4 are the info and block pipes.
	var conf *Confinement
	p.view.dirs, err = newSessionDirs(s.dir, spec.Label, func(root string) error {
		var err error
		conf, err = p.confine(ctx, ConfineRequest{Label: spec.Label, FirstFD: 5, Dir: root})
		p.agentConf = conf
		return err
	})
	if err != nil {
		return nil, err
	}
	if spec.Home != "" {
		if err := copyTree(spec.Home, p.view.dirs.home); err != nil {
			return nil, err
		}
	}
	if err := p.view.dirs.writeEtc(plan.hosts); err != nil {
		return nil, err
	}
	for _, d := range []string{p.view.dirs.root, p.view.dirs.home, p.view.dirs.tmp} {
		if err := chownTree(d, s.uid, s.gid); err != nil {
			return nil, fmt.Errorf("jail: giving the agent's private directory to uid %d: %w", s.uid, err)
		}
	}
	if err := chownTree(wsReal, s.uid, s.gid); err != nil {
		return nil, fmt.Errorf("jail: giving the workspace to the agent's uid %d: %w", s.uid, err)
	}

	proxyURL := "http://" + listenAddr(netip.AddrPortFrom(loopback4, proxyPort))
	p.agentEnv = append(p.environ(nil),
		"HTTP_PROXY="+proxyURL, "HTTPS_PROXY="+proxyURL, "http_proxy="+proxyURL, "https_proxy="+proxyURL,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")

	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("jail: making pipes: %w", err)
	}
	defer infoR.Close()
	blockR, blockW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		return nil, fmt.Errorf("jail: making pipes: %w", err)
	}
	defer blockW.Close()
	files := []*os.File{infoW, blockR}
	extra := []string{"--info-fd", "3", "--block-fd", "4"}
	if conf != nil {
		extra = append(extra, conf.Args...)
		files = append(files, conf.Files...)
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		blockR.Close()
		return nil, fmt.Errorf("jail: making pipes: %w", err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		blockR.Close()
		stdinR.Close()
		stdinW.Close()
		return nil, fmt.Errorf("jail: making pipes: %w", err)
	}
	p.stdin, p.stdout = stdinW, stdoutR

	cmd := exec.Command(s.bwrap, s.args(jailView{dirs: p.view.dirs, workspace: ws, workspaceReal: wsReal, install: install, cwd: ws, net: true}, extra, spec.Argv)...)
	cmd.Env = p.agentEnv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, p.stderr
	cmd.ExtraFiles = files
	cmd.SysProcAttr = s.sysProcAttr()
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	for _, f := range []*os.File{infoW, blockR, stdinR, stdoutW} {
		f.Close()
	}
	if conf != nil {
		for _, f := range conf.Files {
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jail: starting bubblewrap: %w", err)
	}
	p.cmd = cmd
	p.exited = make(chan struct{})
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()

	pid, err := readChildPid(ctx, infoR, p.exited, p.stderr)
	if err != nil {
		return nil, err
	}
	p.initPid = pid
	if p.netns, err = os.Open(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
		return nil, fmt.Errorf("jail: opening the agent's network namespace: %w", err)
	}
	if p.netnsIno, err = inode(p.netns); err != nil {
		return nil, err
	}
	if own, err := os.Stat("/proc/self/ns/net"); err != nil || own.Sys().(*syscall.Stat_t).Ino == p.netnsIno {
		return nil, fmt.Errorf("jail: bubblewrap did not give the agent a network namespace of its own; refusing to run it on the host's network")
	}

	p.net = newNetwork(spec.Label, allow, s.dialTimeout, spec.Events)
	var ls *jailListeners
	err = inNetns(p.netns, func() error {
		var err error
		deadline, _ := ctx.Deadline()
		ls, err = setupNetns(plan, proxyPort, exposePorts, deadline)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range plan.forwards {
		if ls.forwards[i] != nil {
			p.net.serve(ls.forwards[i], &plan.forwards[i])
		}
	}
	p.net.serve(ls.proxy, nil)
	for i, x := range spec.Expose {
		p.net.serve(ls.exposed[i], &forward{expose: &spec.Expose[i]})
		p.exposed[x.Name] = ls.exposed[i].Addr().String()
	}
	raw := ls.raw
	p.net.addCloser(raw)
	p.net.goroutine(func() { p.net.watch(raw) })
	if conf != nil && conf.Attach != nil {
		if err := conf.Attach(pid); err != nil {
			return nil, fmt.Errorf("jail: the Confiner could not attach the agent: %w", err)
		}
	}
	// The agent runs from here.
	if _, err := blockW.Write([]byte{1}); err != nil {
		<-p.exited
		return nil, fmt.Errorf("jail: bubblewrap ended before the agent ran: %s", strings.TrimSpace(tail(p.stderr.String(), 400)))
	}
	blockW.Close()
	ok = true
	go p.wait()

	applied := []string{"namespaces", "network-allowlist", "rlimits"}
	notApplied := append([]string(nil), NotApplied...)
	if conf != nil {
		applied = append(applied, conf.Applied...)
		notApplied = slicesWithout(notApplied, conf.Applied)
	}
	exposedNames := make([]string, 0, len(spec.Expose))
	for _, x := range spec.Expose {
		exposedNames = append(exposedNames, x.Name)
	}
	p.send(event.TypeJailStarted, &event.JailStarted{Label: spec.Label, UID: s.uid,
		Applied: strings.Join(applied, ","), NotApplied: strings.Join(notApplied, ","),
		AllowHosts: strings.Join(allow.strings(), ","), Exposed: strings.Join(exposedNames, ","), StartMs: event.Ms(time.Since(began))})
	return &Process{p: p}, nil
}

// installDirs are the directories to mount read-only so that argv0 and
// the interpreter of its #! line run inside the jail.
func (s *settings) installDirs(argv0, path string) ([]string, error) {
	prog, err := lookPath(argv0, path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCommand, err)
	}
	paths := []string{prog}
	real, err := filepath.EvalSymlinks(prog)
	if err != nil {
		return nil, fmt.Errorf("jail: the agent's command %s: %w", prog, err)
	}
	paths = append(paths, real)
	interp, err := interpreter(real, path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCommand, real, err)
	}
	if interp != "" {
		paths = append(paths, interp)
		if r, err := filepath.EvalSymlinks(interp); err == nil {
			paths = append(paths, r)
		} else {
			return nil, fmt.Errorf("jail: the agent's interpreter %s: %w", interp, err)
		}
	}
	var dirs []string
	seen := map[string]bool{}
	for _, p := range paths {
		d := installDir(p)
		if d == "" || seen[d] {
			continue
		}
		if err := s.mountable(d); err != nil {
			return nil, fmt.Errorf("jail: the agent's install directory %s (for %s): %v; install it in a directory of its own, or add that directory to Options.ReadOnly", d, p, err)
		}
		seen[d] = true
		dirs = append(dirs, d)
	}
	return dirs, nil
}

// readChildPid reads bwrap's --info-fd report: the host pid of the
// jail's first process.
func readChildPid(ctx context.Context, info *os.File, exited <-chan struct{}, stderr *tailBuffer) (int, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = info.SetReadDeadline(dl)
	}
	var v struct {
		Pid int `json:"child-pid"`
	}
	err := json.NewDecoder(info).Decode(&v)
	if err == nil && v.Pid > 0 {
		return v.Pid, nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, fmt.Errorf("jail: bubblewrap did not start within the start bound; raise Options.StartTimeout or look at the machine's load")
	}
	// bwrap ended before reporting: say why.
	select {
	case <-exited:
		return 0, fmt.Errorf("jail: bubblewrap could not start the agent: %s", strings.TrimSpace(tail(stderr.String(), 400)))
	case <-ctx.Done():
		return 0, fmt.Errorf("jail: bubblewrap did not report its child: %v", ctx.Err())
	}
}

func inode(f *os.File) (uint64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("jail: reading the agent's network namespace: %w", err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}

func slicesWithout(list, drop []string) []string {
	out := list[:0]
	for _, x := range list {
		keep := true
		for _, d := range drop {
			if x == d {
				keep = false
			}
		}
		if keep {
			out = append(out, x)
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

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
	"strings"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/internal/undo"
)

// ready sweeps, once, what dead agentry processes left, then finds bwrap
// and the util-linux programs, and proves once that bubblewrap can build a
// jail with its own network namespace as the jail's user. Success is
// cached; a failure is not, so a fixed machine recovers without a restart.
func (s *agentSettings) ready(ctx context.Context) error {
	s.sweepOnce.Do(func() { sweep(ctx, s.dir, agentPrivatePrefix, agentSweeper, true, s.events) })
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return nil
	}
	if err := s.findTools(ctx); err != nil {
		return err
	}
	if err := s.probe(ctx); err != nil {
		return err
	}
	s.probed = true
	return nil
}

// findTools finds bubblewrap, nsenter, prlimit and setpriv, and refuses a
// process that is not root.
func (s *agentSettings) findTools(ctx context.Context) error {
	bw, err := exec.LookPath(s.bwrap)
	if err != nil {
		return fmt.Errorf("%w: bubblewrap (%q) is not installed; install the Debian package bubblewrap (apt-get install bubblewrap) — a jailed agent never runs unjailed", ErrNoJail, s.bwrap)
	}
	for name, dst := range map[string]*string{"nsenter": &s.nsenter, "prlimit": &s.prlimit, "setpriv": nil} {
		p, err := lookPath(name, DefaultPath)
		if err != nil {
			return fmt.Errorf("%w: %s is not in %s; install the Debian package util-linux", ErrNoJail, name, DefaultPath)
		}
		if dst != nil {
			*dst = p
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: agentry runs as uid %d, and jailing an agent needs root: root places the agent's network forwarders in its namespace and hands its directories to an unprivileged user; run agentry as root, or use the explicit unjailed single-user launcher", ErrNoJail, os.Geteuid())
	}
	s.bwrap = bw
	help, _ := exec.CommandContext(ctx, bw, "--help").CombinedOutput()
	s.userns = bytes.Contains(help, []byte("--disable-userns"))
	return nil
}

// probe runs true(1) in a jail with its own network namespace, as the
// jail's user, in a cell of its own.
func (s *agentSettings) probe(ctx context.Context) error {
	truth, err := lookPath("true", DefaultPath)
	if err != nil {
		return fmt.Errorf("%w: true(1) is not in %s; install the Debian package coreutils", ErrNoJail, DefaultPath)
	}
	cell, err := openCell(s.cellSpec("probe", nil, false))
	if err != nil {
		return err
	}
	defer cell.Remove(context.Background())
	etc, err := writeEtc(cell.Dir("etc"), "")
	if err == nil {
		err = cell.giveTo(s.uid, s.gid)
	}
	if err != nil {
		return fmt.Errorf("jail: preparing the probe's directory for uid %d: %w", s.uid, err)
	}
	tmp := cell.Dir("tmp")
	v := bwrapView{net: true, insideID: insideUID, userns: s.userns, etc: etc, readOnly: s.readOnly,
		binds: append(cell.binds, [2]string{tmp, tmp}), chdir: "/tmp", prlimit: s.prlimit, limits: s.limits, argv: []string{truth}}
	cmd := exec.CommandContext(ctx, s.bwrap, v.args()...)
	cmd.Env = []string{"PATH=" + DefaultPath}
	cmd.SysProcAttr = jailedProcAttr(s.uid, s.gid, true)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: bubblewrap could not build a jail here (%v: %s); it needs unprivileged user namespaces "+
			"(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; in a container, allow them in its seccomp/AppArmor profile), "+
			"and %s must be traversable by uid %d",
			ErrNoJail, err, strings.TrimSpace(tail(out.String(), 400)), s.dir, s.uid)
	}
	return nil
}

// cellSpec is the cell of an agent labelled label: HOME (unless the
// agent's HOME is kept outside it, keptHome), /tmp and the jail's /etc
// files, under the caps when there are any.
func (s *agentSettings) cellSpec(label string, caps *agentCaps, keptHome bool) cellSpec {
	if label == "" {
		label = "agent"
	}
	spec := cellSpec{parent: s.dir, prefix: agentPrivatePrefix + label + "-", dirs: []string{"home", "tmp", "etc"},
		binds: map[string]string{"tmp": "/tmp", "home": agentHome}}
	if keptHome {
		spec.dirs, spec.binds = []string{"tmp", "etc"}, map[string]string{"tmp": "/tmp"}
	}
	caps.cell(&spec)
	return spec
}

// launch is Launch on Linux: the plan is checked, then each step acquires
// one part of the jail and pushes how to give it back on the launch's one
// cleanup stack; a step that fails gives back everything, newest first.
func (s *agentSettings) launch(ctx context.Context, spec Spec) (_ *Process, err error) {
	began := time.Now()
	plan, err := s.plan(spec)
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()

	st := &starting{p: newProc(s, spec, plan), spec: spec, plan: plan}
	defer st.stack.OnError(&err)
	// Whatever the steps acquire for the jail's life, release frees last.
	st.stack.Push(st.p.release)
	for _, step := range []func(context.Context) error{st.makeCell, st.startBwrap, st.enterNetns, st.placeNetwork, st.run} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	st.stack.Keep()
	closeFiles(st.infoR, st.blockW)
	go st.p.wait()
	st.p.sendStarted(plan, began)
	return &Process{p: st.p}, nil
}

// starting is one launch in progress: what its steps share.
type starting struct {
	p     *proc
	spec  Spec
	plan  launchPlan
	stack undo.Stack // failure-only undos; release is the first step pushed

	infoR  *os.File // bwrap's --info-fd report
	blockW *os.File // a byte lets the agent run
}

// makeCell makes the agent's cell (under the caps, which see it empty: a
// disk cap is mounted before HOME, /tmp and /etc are made in it), copies
// the HOME template, writes the jail's /etc files, and hands the cell and
// the workspace to the jail's user.
func (st *starting) makeCell(context.Context) error {
	p, s := st.p, st.p.s
	home := st.plan.home
	cell, err := openCell(s.cellSpec(st.spec.Label, s.caps, home != ""))
	if err != nil {
		return err
	}
	p.cell = cell
	binds := append([][2]string(nil), cell.binds...)
	switch {
	case home != "":
		if err := seedHome(home, st.spec.Home); err != nil {
			return err
		}
		if err := chownTree(home, s.uid, s.gid); err != nil {
			return fmt.Errorf("jail: giving the agent's HOME to uid %d: %w", s.uid, err)
		}
		binds = append(binds, [2]string{home, agentHome})
	case st.spec.Home != "":
		if err := copyTree(st.spec.Home, cell.Dir("home")); err != nil {
			return err
		}
	}
	etc, err := writeEtc(cell.Dir("etc"), st.plan.hosts)
	if err != nil {
		return err
	}
	if err := cell.giveTo(s.uid, s.gid); err != nil {
		return fmt.Errorf("jail: giving the agent's private directory to uid %d: %w", s.uid, err)
	}
	if err := chownTree(st.plan.wsReal, s.uid, s.gid); err != nil {
		return fmt.Errorf("jail: giving the workspace to the agent's uid %d: %w", s.uid, err)
	}
	p.view = bwrapView{insideID: insideUID, userns: s.userns, etc: etc,
		readOnly: append(append([]string(nil), s.readOnly...), st.plan.install...),
		binds:    append(binds, [2]string{st.plan.wsReal, st.plan.ws}),
		prlimit:  s.prlimit, limits: s.limits}
	return nil
}

// pipes makes n pipes; on failure none is left open.
func pipes(n int) ([][2]*os.File, error) {
	out := make([][2]*os.File, 0, n)
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range out {
				p[0].Close()
				p[1].Close()
			}
			return nil, fmt.Errorf("jail: making pipes: %w", err)
		}
		out = append(out, [2]*os.File{r, w})
	}
	return out, nil
}

// startBwrap starts bubblewrap, held back on --block-fd before it runs the
// agent, with --info-fd reporting the jail's first pid.
func (st *starting) startBwrap(context.Context) error {
	p, s := st.p, st.p.s
	proxyURL := "http://" + listenAddr(netip.AddrPortFrom(loopback4, st.plan.proxyPort))
	p.agentEnv = append(p.environ(nil),
		"HTTP_PROXY="+proxyURL, "HTTPS_PROXY="+proxyURL, "http_proxy="+proxyURL, "https_proxy="+proxyURL,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	ps, err := pipes(4) // info, block, stdin, stdout
	if err != nil {
		return err
	}
	info, block, stdin, stdout := ps[0], ps[1], ps[2], ps[3]
	st.infoR, st.blockW, p.stdin, p.stdout = info[0], block[1], stdin[1], stdout[0]
	st.stack.PushFunc(func() { closeFiles(st.infoR, st.blockW, p.stdin, p.stdout) })
	child := []*os.File{info[1], block[0], stdin[0], stdout[1]}
	defer closeFiles(child...)
	files := []*os.File{info[1], block[0]}
	fds := append(fdArg("--info-fd", 3), fdArg("--block-fd", 4)...)
	if s.caps.seccomp() {
		sec, err := seccompFile()
		if err != nil {
			return err
		}
		defer sec.Close()
		files = append(files, sec)
		fds = append(fds, fdArg("--seccomp", 5)...)
	}
	v := p.view
	v.net, v.fds, v.chdir, v.argv = true, fds, st.plan.ws, st.spec.Argv
	cmd := exec.Command(s.bwrap, v.args()...)
	cmd.Env = p.agentEnv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin[0], stdout[1], p.stderr
	cmd.ExtraFiles = files
	cmd.SysProcAttr = jailedProcAttr(s.uid, s.gid, true)
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("jail: starting bubblewrap: %w", err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	st.stack.PushFunc(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return nil
}

// enterNetns learns the jail's first pid and opens its network namespace,
// refusing one that is the host's.
func (st *starting) enterNetns(ctx context.Context) error {
	p := st.p
	pid, err := readChildPid(ctx, st.infoR, p.exited, p.stderr)
	if err != nil {
		return err
	}
	p.initPid = pid
	if p.netns, err = os.Open(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
		return fmt.Errorf("jail: opening the agent's network namespace: %w", err)
	}
	if p.netnsIno, err = inode(p.netns); err != nil {
		return err
	}
	// Whatever entered the namespace meanwhile goes with the jail.
	st.stack.PushFunc(p.killNetns)
	if own, err := os.Stat("/proc/self/ns/net"); err != nil || own.Sys().(*syscall.Stat_t).Ino == p.netnsIno {
		return fmt.Errorf("jail: bubblewrap did not give the agent a network namespace of its own; refusing to run it on the host's network")
	}
	return nil
}

// placeNetwork opens, inside the namespace, a forwarder per allowed
// endpoint, the egress proxy, a listener per exposed one, and the raw
// socket that watches for refused dials; the host side serves them all.
func (st *starting) placeNetwork(ctx context.Context) error {
	p, plan := st.p, st.plan
	p.net = newNetwork(st.spec.Label, plan.allow, p.s.dialTimeout, st.spec.Events)
	var ls *jailListeners
	err := inNetns(p.netns, func() error {
		var err error
		deadline, _ := ctx.Deadline()
		ls, err = setupNetns(plan.net, plan.proxyPort, plan.exposePorts, deadline)
		return err
	})
	if err != nil {
		return err
	}
	for i := range plan.net.forwards {
		if ls.forwards[i] != nil {
			p.net.serve(ls.forwards[i], &plan.net.forwards[i])
		}
	}
	p.net.serve(ls.proxy, nil)
	for i, x := range st.spec.Expose {
		p.net.serve(ls.exposed[i], &forward{expose: &st.spec.Expose[i]})
		p.exposed[x.Name] = ls.exposed[i].Addr().String()
	}
	raw := ls.raw
	p.net.addCloser(raw)
	p.net.goroutine(func() { p.net.watch(raw) })
	return nil
}

// run moves the jail into its cell's control group, then lets the agent
// run.
func (st *starting) run(context.Context) error {
	p := st.p
	if err := p.cell.group.Enter(p.initPid); err != nil {
		return fmt.Errorf("jail: moving the agent into its control group: %w", err)
	}
	if _, err := st.blockW.Write([]byte{1}); err != nil {
		<-p.exited
		return fmt.Errorf("jail: bubblewrap ended before the agent ran: %s", strings.TrimSpace(tail(p.stderr.String(), 400)))
	}
	return nil
}

// sendStarted reports the launch: what confines the agent and what does
// not.
func (p *proc) sendStarted(plan launchPlan, began time.Time) {
	applied := append([]string{"namespaces", "network-allowlist", "rlimits"}, p.s.caps.applied(p.cell)...)
	var missing []string
	for _, name := range notApplied {
		if !contains(applied, name) {
			missing = append(missing, name)
		}
	}
	p.send(TypeStarted, &Started{Label: p.label, UID: p.s.uid,
		Applied: strings.Join(applied, ","), NotApplied: strings.Join(missing, ","),
		AllowHosts: strings.Join(plan.allow.strings(), ","), Exposed: strings.Join(plan.exposed, ","), StartMs: event.Ms(time.Since(began))})
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
		return 0, fmt.Errorf("jail: bubblewrap did not start within the start bound; raise AgentOptions.StartTimeout or look at the machine's load")
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

func closeFiles(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

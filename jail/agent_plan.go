package jail

import (
	"fmt"
	"os"
	"path/filepath"
)

// launchPlan is a Spec checked against the jail's settings, before
// anything is made: everything a launch's steps need to know.
type launchPlan struct {
	path        string // the agent's PATH
	ws, wsReal  string // the workspace as given and with symlinks resolved
	home        string // Spec.HomeDir, cleaned; "" for a private HOME
	install     []string
	allow       *allowlist
	net         netPlan
	hosts       string
	proxyPort   uint16
	exposePorts []uint16
	exposed     []string // the names of Spec.Expose, in order
}

// plan checks spec and lays out its jail.
func (s *agentSettings) plan(spec Spec) (launchPlan, error) {
	var lp launchPlan
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return lp, fmt.Errorf("jail: Spec.Argv is empty; name the agent's command")
	}
	if err := validLabel(spec.Label); err != nil {
		return lp, err
	}
	path, err := checkEnv("Spec.Env", spec.Env, map[string]bool{})
	if err != nil {
		return lp, err
	}
	lp.path = path
	if lp.path == "" {
		lp.path = DefaultPath
	}
	if lp.ws, lp.wsReal, err = s.workspacePath(spec.Workspace); err != nil {
		return lp, err
	}
	if lp.home, err = s.homePath(spec.HomeDir, lp.wsReal); err != nil {
		return lp, err
	}
	if lp.allow, err = newAllowlist(spec.AllowHosts); err != nil {
		return lp, err
	}
	if lp.exposed, err = exposedNames(spec.Expose); err != nil {
		return lp, err
	}
	if err := s.checkMounts(&lp, spec.Argv); err != nil {
		return lp, err
	}
	if lp.net, err = planNetwork(lp.allow); err != nil {
		return lp, err
	}
	lp.hosts = lp.net.hosts
	lp.proxyPort, lp.exposePorts = lp.net.ports(len(spec.Expose))
	return lp, nil
}

// exposedNames checks Spec.Expose: each entry named, once, with a
// listener.
func exposedNames(expose []Exposed) ([]string, error) {
	names := make([]string, 0, len(expose))
	seen := map[string]bool{}
	for _, x := range expose {
		switch {
		case x.Name == "":
			return nil, fmt.Errorf("jail: a Spec.Expose entry has no Name")
		case seen[x.Name]:
			return nil, fmt.Errorf("jail: Spec.Expose names %q twice", x.Name)
		case x.Listener == nil:
			return nil, fmt.Errorf("jail: Spec.Expose[%q] has no Listener", x.Name)
		}
		seen[x.Name] = true
		names = append(names, x.Name)
	}
	return names, nil
}

// checkMounts finds the agent's install directories and refuses mounts
// that overlap the workspace or that the jail's user cannot reach.
func (s *agentSettings) checkMounts(lp *launchPlan, argv []string) error {
	install, err := s.installDirs(argv, lp.path)
	if err != nil {
		return err
	}
	for _, d := range install {
		if within(d, lp.wsReal) || within(lp.wsReal, d) {
			return fmt.Errorf("jail: the agent's install directory %s and the workspace %s overlap; the agent could rewrite itself, or see the workspace's neighbours: install it elsewhere", d, lp.ws)
		}
		if lp.home != "" && (within(d, lp.home) || within(lp.home, d)) {
			return fmt.Errorf("jail: the agent's install directory %s and its HOME %s overlap; the agent could rewrite itself: install it elsewhere", d, lp.home)
		}
	}
	if err := reachable("Spec.Workspace", lp.wsReal, s.uid, s.gid); err != nil {
		return err
	}
	for _, d := range append(append([]string(nil), install...), s.readOnly...) {
		if err := reachable("the read-only mount", d, s.uid, s.gid); err != nil {
			return err
		}
	}
	lp.install = install
	return nil
}

// installDirs are the directories to mount read-only so that argv[0],
// the interpreter of its #! line, and every script the command line
// names by its absolute path (node /opt/agent/dist/index.js) run inside
// the jail.
func (s *agentSettings) installDirs(argv []string, path string) ([]string, error) {
	prog, err := lookPath(argv[0], path)
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
	scripts, err := scriptArgs(argv[1:])
	if err != nil {
		return nil, err
	}
	paths = append(paths, scripts...)
	var dirs []string
	seen := map[string]bool{}
	for _, p := range paths {
		d := installDir(p)
		if d == "" || seen[d] {
			continue
		}
		if err := s.mountable(d); err != nil {
			return nil, fmt.Errorf("jail: the agent's install directory %s (for %s): %v; install it in a directory of its own, or add that directory to AgentOptions.ReadOnly", d, p, err)
		}
		seen[d] = true
		dirs = append(dirs, d)
	}
	return dirs, nil
}

// scriptArgs are the files an agent's arguments name by absolute path
// (the script node runs), as given and with links resolved: what the
// command needs besides its program. An argument that names no regular
// file (a flag, a word, a directory) is not one.
func scriptArgs(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if !filepath.IsAbs(a) {
			continue
		}
		fi, err := os.Stat(a)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		real, err := filepath.EvalSymlinks(a)
		if err != nil {
			return nil, fmt.Errorf("jail: the agent's script %s: %w", a, err)
		}
		out = append(out, a, real)
	}
	return out, nil
}

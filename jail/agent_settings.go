package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// protected are host paths an install directory or workspace may never be,
// nor contain: mounting them would hand the agent the system or the host's
// own state.
var protected = []string{"/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys", "/dev", "/boot", "/run", "/var", "/root", "/home"}

// agentSettings is AgentOptions with the defaults applied and checked,
// and what the first Check learnt about this machine.
type agentSettings struct {
	bwrap, nsenter, prlimit string
	uid, gid                int
	dir                     string
	readOnly                []string
	limits                  []string // prlimit flags
	startTimeout            time.Duration
	dialTimeout             time.Duration
	caps                    *agentCaps // nil: no caps
	events                  func(event.Event)

	sweepOnce sync.Once
	probeMu   sync.Mutex
	probed    bool
	userns    bool // bwrap has --disable-userns
}

func newAgentSettings(o AgentOptions) (*agentSettings, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("jail: AgentOptions.Dir %q: %w", o.Dir, err)
	}
	caps, err := newAgentCaps(o.Caps)
	if err != nil {
		return nil, err
	}
	s := &agentSettings{
		bwrap: o.Bwrap, uid: o.UID, gid: o.GID, dir: dir,
		limits: []string{
			"--nproc=" + strconv.Itoa(o.Processes),
			"--nofile=" + strconv.Itoa(o.OpenFiles),
			"--fsize=" + strconv.FormatInt(o.FileSize, 10),
			"--core=0",
		},
		startTimeout: o.StartTimeout,
		dialTimeout:  o.DialTimeout,
		caps:         caps,
		events:       o.Events,
	}
	for _, p := range o.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("jail: AgentOptions.ReadOnly path %q is not absolute", p)
		}
		p = filepath.Clean(p)
		if err := s.mountable(p); err != nil {
			return nil, fmt.Errorf("jail: AgentOptions.ReadOnly path %q: %v", p, err)
		}
		s.readOnly = append(s.readOnly, p)
	}
	return s, nil
}

func (o *AgentOptions) defaults() error {
	for _, d := range []struct {
		v   *int
		def int
	}{{&o.UID, defaultUID}, {&o.GID, defaultUID}, {&o.Processes, agentProcesses}, {&o.OpenFiles, agentOpenFiles}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.FileSize == 0 {
		o.FileSize = defaultFileSize
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = agentStartTimeout
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = agentDialTimeout
	}
	if o.UID < 0 || o.GID < 0 || o.Processes < 0 || o.OpenFiles < 0 || o.FileSize < 0 || o.StartTimeout < 0 || o.DialTimeout < 0 {
		return fmt.Errorf("jail: an AgentOptions value is negative; use 0 for the default or a positive value")
	}
	if o.Bwrap == "" {
		o.Bwrap = "bwrap"
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	return nil
}

// within reports whether p is base or lies under it.
func within(p, base string) bool {
	return p == base || base == "/" || strings.HasPrefix(p, base+"/")
}

// mountable refuses a path whose mount would expose what no agent may
// see: a protected system path itself or an ancestor of one, or an
// ancestor of the directory holding every session's private files.
func (s *agentSettings) mountable(p string) error {
	for _, q := range protected {
		if within(q, p) {
			return fmt.Errorf("it is or contains %s, which the jail never mounts whole; name a directory of its own", q)
		}
	}
	if within(s.dir, p) {
		return fmt.Errorf("it contains %s, where every session's private directory lives", s.dir)
	}
	return nil
}

// visible reports whether the jail's system mounts already show p.
func visible(p string) bool {
	if within(p, "/usr") {
		return true
	}
	for _, d := range systemDirs {
		if within(p, d) {
			return true
		}
	}
	return false
}

// installDir is the directory to mount for a program at p (a resolved
// path): "" when the system mounts show it; the tree up to its outermost
// node_modules for a package installed with npm (so its dependencies
// resolve); its own directory otherwise.
func installDir(p string) string {
	if visible(p) {
		return ""
	}
	if i := strings.Index(p, "/node_modules/"); i >= 0 {
		return p[:i+len("/node_modules")]
	}
	return filepath.Dir(p)
}

// interpreter reads the #! line of a script: the program that runs it,
// looked up on path when it is "env NAME". "" when p is not a script.
func interpreter(p, path string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	line := string(buf[:n])
	if !strings.HasPrefix(line, "#!") {
		return "", nil
	}
	line, _, _ = strings.Cut(line[2:], "\n")
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return "", nil
	}
	prog := fields[0]
	if filepath.Base(prog) == "env" {
		prog = ""
		for _, f := range fields[1:] {
			if strings.HasPrefix(f, "-") || strings.Contains(f, "=") {
				continue
			}
			prog = f
			break
		}
		if prog == "" {
			return "", fmt.Errorf("its #! line %q names no program", line)
		}
		found, err := lookPath(prog, path)
		if err != nil {
			return "", fmt.Errorf("its #! line runs %q, which is not on PATH %q", prog, path)
		}
		return found, nil
	}
	return prog, nil
}

// lookPath finds prog on path, the jail's PATH (not the host's).
func lookPath(prog, path string) (string, error) {
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			return "", fmt.Errorf("%q is a relative path; give an absolute one or a name on PATH", prog)
		}
		if isExecutable(prog) {
			return filepath.Clean(prog), nil
		}
		return "", fmt.Errorf("%q is not an executable file", prog)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, prog)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q is not on PATH %q", prog, path)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// validLabel refuses a label that cannot be part of a path or an event.
func validLabel(l string) error {
	if len(l) > 32 {
		return fmt.Errorf("jail: Spec.Label is %d characters; use at most 32 (a key hash)", len(l))
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("jail: Spec.Label holds %q; use letters, digits, '.', '_' and '-'", c)
		}
	}
	return nil
}

// reserved are the variables the jail sets itself.
var reserved = map[string]bool{
	"HOME": true, "HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
}

// checkEnv validates NAME=VALUE pairs and returns the PATH they set ("" if
// none).
func checkEnv(field string, env []string, seen map[string]bool) (string, error) {
	path := ""
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		switch {
		case !ok || name == "":
			return "", fmt.Errorf("jail: %s entry %q is not NAME=VALUE", field, kv)
		case strings.ContainsRune(kv, 0):
			return "", fmt.Errorf("jail: %s variable %s holds a NUL byte, which no environment can carry", field, name)
		case reserved[name]:
			return "", fmt.Errorf("jail: %s cannot set %s: the jail sets it (a private HOME, its own egress proxy)", field, name)
		case seen[name]:
			return "", fmt.Errorf("jail: %s sets %s twice; keep one", field, name)
		}
		seen[name] = true
		if name == "PATH" {
			path = value
		}
	}
	return path, nil
}

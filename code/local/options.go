package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
)

// Defaults of [Options].
const (
	DefaultTimeout        = 30 * time.Second
	DefaultMaxOutputChars = 8000
	DefaultStartTimeout   = 10 * time.Second
	DefaultPoolRefill     = 20 * time.Millisecond
)

// Options configure a runner. Zero values take the defaults.
type Options struct {
	// Env is handed to the code on top of PATH. Nothing else from the
	// host's environment reaches it.
	Env map[string]string
	// Path is the PATH the code sees and interpreters are found on
	// (default: the host's PATH; jail.DefaultPath in a jail).
	Path string
	// Dir is where session directories are made (default os.TempDir()).
	// In a jail started as root it must be traversable by Jail.UID.
	Dir string
	// Timeout bounds one execution unless the request sets its own
	// (default 30s).
	Timeout time.Duration
	// MaxOutputChars cuts each output stream (default 8,000 characters);
	// the cut is reported in Result.Truncated.
	MaxOutputChars int
	// Commands overrides the program run for a language ("python" →
	// "/opt/py/bin/python3"). Defaults: python → python3, bash → bash,
	// sh → sh.
	Commands map[string]string
	// StartTimeout bounds how long an interpreter may take to become ready
	// (default 10s).
	StartTimeout time.Duration
	// Jail, when set, runs every process inside bubblewrap.
	Jail *Jail
	// Pool keeps interpreters started ahead of need (NewInterpreter
	// only). Off unless Pool.Size > 0.
	Pool Pool
	// Events, when set, receives what the runner has to say about itself:
	// agentry.runner.limits once, when its first session starts (what it
	// caps, and what it cannot cap on this machine), and
	// agentry.runner.swept for each sweep of what a killed predecessor
	// left. It must not block.
	Events func(event.Event)
}

// Pool is a bounded pool of pre-started interpreters. A session's Start
// takes one when one is ready (and starts one itself otherwise); the
// pool then starts a replacement, at most one per Refill. A pooled
// interpreter has never run anyone's code, is bound to its session's key
// only when taken (its directory renamed after the key's digest), and is
// never returned to the pool: Stop ends it like any other.
type Pool struct {
	// Size is how many interpreters are kept ready (0: no pool).
	Size int
	// Refill is the least time between two starts that refill the pool
	// (default 20ms), so a burst of takes does not become a burst of
	// starts.
	Refill time.Duration
}

// Jail configures the bubblewrap jail: the code profile of package jail,
// whose package comment says what a jailed session can and cannot do.
// The zero Jail takes every default.
type Jail = jail.CodeOptions

// ErrNoJail is wrapped by every refusal to run jailed: bwrap or prlimit
// is missing, or bubblewrap cannot build a jail on this machine.
var ErrNoJail = jail.ErrNoJail

// CheckJail proves that bubblewrap can build jail j on this machine, the
// way a jailed runner's first Start does. The error wraps ErrNoJail and
// names the fix.
func CheckJail(ctx context.Context, j Jail) error {
	c, err := jail.NewCode(j)
	if err != nil {
		return err
	}
	return c.Ready(ctx)
}

// languages the local runners know, and the programs they run by default.
var defaultCommands = map[string]string{"python": "python3", "bash": "bash", "sh": "sh"}

var aliases = map[string]string{"python3": "python", "py": "python", "shell": "sh"}

func canonicalLanguage(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	if a, ok := aliases[l]; ok {
		return a
	}
	return l
}

// settings is Options with the defaults applied and validated.
type settings struct {
	env          []string // operator's K=V, sorted
	path         string
	dir          string
	timeout      time.Duration
	maxChars     int
	commands     map[string]string
	startTimeout time.Duration
	jail         *jail.Code // nil: not jailed
	pool         Pool
	events       func(event.Event)

	sweepOnce  sync.Once
	statedOnce sync.Once
}

// ErrUnknownLanguage and ErrInterpreterMissing are wrapped by the errors
// of Start and Execute that could not find what to run.
var (
	ErrUnknownLanguage    = errors.New("local: unknown language")
	ErrInterpreterMissing = errors.New("local: interpreter not found")
)

func newSettings(o Options) (*settings, error) {
	s := &settings{
		path:         o.Path,
		dir:          o.Dir,
		timeout:      o.Timeout,
		maxChars:     o.MaxOutputChars,
		startTimeout: o.StartTimeout,
		commands:     make(map[string]string, len(defaultCommands)),
		pool:         o.Pool,
		events:       o.Events,
	}
	if s.pool.Size < 0 || s.pool.Refill < 0 {
		return nil, fmt.Errorf("local: Options.Pool has a negative size or refill; use 0 for no pool")
	}
	if s.pool.Refill == 0 {
		s.pool.Refill = DefaultPoolRefill
	}
	for k, v := range defaultCommands {
		s.commands[k] = v
	}
	for k, v := range o.Commands {
		if v == "" {
			return nil, fmt.Errorf("local: Options.Commands[%q] is empty; name a program or drop the entry", k)
		}
		s.commands[canonicalLanguage(k)] = v
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.maxChars <= 0 {
		s.maxChars = DefaultMaxOutputChars
	}
	if s.startTimeout <= 0 {
		s.startTimeout = DefaultStartTimeout
	}
	if s.dir == "" {
		s.dir = os.TempDir()
	}
	if !filepath.IsAbs(s.dir) {
		abs, err := filepath.Abs(s.dir)
		if err != nil {
			return nil, fmt.Errorf("local: Options.Dir %q: %w", s.dir, err)
		}
		s.dir = abs
	}
	keys := make([]string, 0, len(o.Env))
	for k, v := range o.Env {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return nil, fmt.Errorf("local: Options.Env has an invalid variable name %q; names cannot be empty or hold '=' or NUL", k)
		case strings.ContainsRune(v, 0):
			return nil, fmt.Errorf("local: Options.Env[%q] holds a NUL byte, which no environment can carry", k)
		case k == code.InputsEnv:
			return nil, fmt.Errorf("local: Options.Env cannot set %s: the runner sets it to the staged inputs", code.InputsEnv)
		case k == "PATH":
			if s.path == "" {
				s.path = v
			}
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.env = append(s.env, k+"="+o.Env[k])
	}
	if o.Jail != nil {
		j, err := jail.NewCode(*o.Jail)
		if err != nil {
			return nil, err
		}
		s.jail = j
		if s.path == "" {
			s.path = jail.DefaultPath
		}
	}
	if s.path == "" {
		s.path = os.Getenv("PATH")
	}
	return s, nil
}

// environ is the whole environment of the code: PATH, the operator's
// variables, and the staged inputs.
func (s *settings) environ(inputs string) []string {
	env := make([]string, 0, len(s.env)+2)
	env = append(env, "PATH="+s.path)
	env = append(env, s.env...)
	return append(env, code.InputsEnv+"="+inputs)
}

// program resolves the interpreter for a language, as the code will see
// it. In a jail it must lie under a path the jail mounts.
func (s *settings) program(language string) (string, error) {
	lang := canonicalLanguage(language)
	prog, ok := s.commands[lang]
	if !ok {
		known := make([]string, 0, len(s.commands))
		for k := range s.commands {
			known = append(known, k)
		}
		sort.Strings(known)
		return "", fmt.Errorf("%w %q: this runner runs %s; pick one of those, or map the language to a program in Options.Commands",
			ErrUnknownLanguage, language, strings.Join(known, ", "))
	}
	path, err := lookPath(prog, s.path)
	if err != nil {
		return "", fmt.Errorf("%w: the %s interpreter %q is not on PATH %q; install it (Debian: apt-get install %s) or set Options.Commands[%q] to its path",
			ErrInterpreterMissing, lang, prog, s.path, debianPackage(lang), lang)
	}
	if s.jail != nil {
		if err := s.jail.Visible(path); err != nil {
			return "", err
		}
	}
	return path, nil
}

func debianPackage(lang string) string {
	switch lang {
	case "python":
		return "python3"
	case "sh":
		return "dash"
	}
	return lang
}

// lookPath finds prog on path (not the host's PATH, which the code does
// not see).
func lookPath(prog, path string) (string, error) {
	if strings.Contains(prog, "/") {
		if isExecutable(prog) {
			return filepath.Abs(prog)
		}
		return "", exec.ErrNotFound
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
	return "", exec.ErrNotFound
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

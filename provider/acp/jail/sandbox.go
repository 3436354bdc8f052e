package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/internal/sandbox"
)

// Caps are what one jailed agent — the agent, every process it starts and
// its terminals, together — may use. Zero values take the defaults, which
// are the interpreter jail's (code/local).
type Caps struct {
	// Memory caps the memory of all the jail's processes (default 1 GiB).
	// What HOME and /tmp hold counts on top of it, up to Disk: those are
	// memory (a tmpfs).
	Memory int64
	// Processes caps processes and threads at once (default 256).
	Processes int
	// CPUs caps CPU time in cores' worth (default 1).
	CPUs float64
	// Disk caps what HOME and /tmp hold together (default 1 GiB): a write
	// past it fails with ENOSPC. The workspace is the caller's directory
	// and is not under this cap.
	Disk int64
}

// Cap defaults (the interpreter jail's).
const (
	DefaultMemory        = 1 << 30
	DefaultCapProcesses  = 256
	DefaultCPUs          = 1.0
	DefaultDisk          = 1 << 30
	minimumDisk          = 1 << 20
	sandboxedDescription = "seccomp,memory,pids,cpu,disk"
)

// Sandbox is the [Confiner] built on internal/sandbox: the seccomp filter
// for every jailed process, one control group per agent with the memory,
// process and CPU caps (its terminals join it), and a size-capped tmpfs
// holding the agent's HOME and /tmp. What this machine cannot apply is
// named by Gaps, left out of the jail's applied list and so reported in
// every agentry.jail.started event's notApplied; nothing is dropped
// quietly. Safe for concurrent use.
type Sandbox struct {
	caps     Caps
	openOnce sync.Once
	cg       *sandbox.Cgroups
	gaps     map[string]string // limit name (NotApplied's words) → why
}

var _ Confiner = (*Sandbox)(nil)

// NewSandbox checks c and returns the Confiner. It opens nothing until
// the first Confine.
func NewSandbox(c Caps) (*Sandbox, error) {
	if c.Memory == 0 {
		c.Memory = DefaultMemory
	}
	if c.Processes == 0 {
		c.Processes = DefaultCapProcesses
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.Disk == 0 {
		c.Disk = DefaultDisk
	}
	if c.Memory < 0 || c.Processes < 0 || c.CPUs < 0 || c.Disk < 0 {
		return nil, errors.New("jail: a Caps value is negative; use 0 for the default or a positive value")
	}
	if c.Disk < minimumDisk {
		return nil, fmt.Errorf("jail: Caps.Disk is %d bytes; give at least 1MiB", c.Disk)
	}
	return &Sandbox{caps: c}, nil
}

// Caps are the caps in force, defaults applied.
func (s *Sandbox) Caps() Caps { return s.caps }

// open learns once what this machine lets the sandbox apply.
func (s *Sandbox) open() {
	s.openOnce.Do(func() {
		s.gaps = map[string]string{}
		if _, err := sandbox.SeccompProgram(); err != nil {
			s.gaps["seccomp"] = err.Error()
		}
		s.cg = sandbox.OpenCgroups()
		for limit, name := range map[string]string{"memory cap": "memory", "process cap": "pids", "CPU cap": "cpu"} {
			if why, ok := s.cg.Gaps()[limit]; ok {
				s.gaps[name] = why
			}
		}
		if err := sandbox.CheckTmpfs(os.TempDir()); err != nil {
			s.gaps["disk"] = err.Error()
		}
	})
}

// Gaps names each limit this machine cannot apply ("memory", "disk", …)
// and why. Empty when every cap applies.
func (s *Sandbox) Gaps() map[string]string {
	s.open()
	out := make(map[string]string, len(s.gaps))
	for k, v := range s.gaps {
		out[k] = v
	}
	return out
}

// Close removes the sandbox's own control groups; every agent it
// confined must have ended.
func (s *Sandbox) Close() error {
	if s.cg == nil {
		return nil
	}
	return s.cg.Close()
}

// Confine implements [Confiner].
func (s *Sandbox) Confine(ctx context.Context, r ConfineRequest) (*Confinement, error) {
	s.open()
	c := &Confinement{}
	var undo []func() error
	c.Release = func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			if err := undo[i](); err != nil {
				errs = append(errs, err)
			}
		}
		undo = nil
		return errors.Join(errs...)
	}
	fail := func(err error) (*Confinement, error) {
		_ = c.Release()
		return nil, err
	}
	if s.gaps["seccomp"] == "" {
		f, err := sandbox.SeccompFile()
		if err != nil {
			return fail(err)
		}
		undo = append(undo, func() error { f.Close(); return nil })
		c.Files = append(c.Files, f)
		c.Args = append(c.Args, "--seccomp", strconv.Itoa(r.FirstFD))
		c.Applied = append(c.Applied, "seccomp")
	}
	if r.Command {
		// A terminal joins its agent's group: the caps are the jail's,
		// not one process's.
		if r.Agent != nil {
			c.Procs = r.Agent.Procs
		}
		return c, nil
	}
	if r.Dir != "" && s.gaps["disk"] == "" {
		if err := sandbox.MountTmpfs(r.Dir, s.caps.Disk, os.Getuid(), os.Getgid()); err != nil {
			return fail(fmt.Errorf("jail: the agent's disk cap: %w", err))
		}
		dir := r.Dir
		undo = append(undo, func() error { return sandbox.Unmount(dir) })
		c.Applied = append(c.Applied, "disk")
	}
	if s.cg.Version() != 0 {
		g, err := s.cg.Session(sandbox.Limits{Memory: s.caps.Memory + s.caps.Disk, Processes: s.caps.Processes, CPUs: s.caps.CPUs})
		if err != nil {
			return fail(fmt.Errorf("jail: making the agent's control group: %w", err))
		}
		undo = append(undo, func() error {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			return g.Remove(ctx)
		})
		c.Attach = g.Enter
		c.Procs = g.Procs()
		for _, name := range []string{"memory", "pids", "cpu"} {
			if s.gaps[name] == "" {
				c.Applied = append(c.Applied, name)
			}
		}
	}
	return c, nil
}

package jail

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// Caps are what one jailed agent — the agent, every process it starts and
// its terminals, together — may use. Zero values take the defaults, which
// are a code session's.
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

// minimumDisk is the least Caps.Disk: HOME must hold the agent's
// configuration.
const minimumDisk = 1 << 20

func (c *Caps) defaults() error {
	if c.Memory == 0 {
		c.Memory = defaultCellMemory
	}
	if c.Processes == 0 {
		c.Processes = defaultCellProcesses
	}
	if c.CPUs == 0 {
		c.CPUs = defaultCellCPUs
	}
	if c.Disk == 0 {
		c.Disk = defaultCellDisk
	}
	if c.Memory < 0 || c.Processes < 0 || c.CPUs < 0 || c.Disk < 0 {
		return errors.New("jail: a Caps value is negative; use 0 for the default or a positive value")
	}
	if c.Disk < minimumDisk {
		return fmt.Errorf("jail: Caps.Disk is %d bytes; give at least 1MiB", c.Disk)
	}
	return nil
}

// agentCaps applies Caps to each agent: the seccomp filter for the agent
// and each terminal, one control group per agent (its terminals join it),
// and a size-capped tmpfs holding its HOME and /tmp. What this machine
// cannot apply is a gap, named by Gaps and left out of each jail's
// applied list, so every agentry.jail.started event's notApplied says so.
// A nil *agentCaps applies nothing. Safe for concurrent use.
type agentCaps struct {
	caps     Caps
	openOnce sync.Once
	cg       *cgroups
	gaps     map[string]string // limit name (notApplied's words) → why
}

func newAgentCaps(c *Caps) (*agentCaps, error) {
	if c == nil {
		return nil, nil
	}
	caps := *c
	if err := caps.defaults(); err != nil {
		return nil, err
	}
	return &agentCaps{caps: caps}, nil
}

// open learns once what this machine lets the caps apply.
func (a *agentCaps) open() {
	a.openOnce.Do(func() {
		a.gaps = map[string]string{}
		if _, err := seccompProgram(); err != nil {
			a.gaps["seccomp"] = err.Error()
		}
		a.cg = openCgroups()
		for limit, name := range map[string]string{"memory cap": "memory", "process cap": "pids", "CPU cap": "cpu"} {
			if why, ok := a.cg.Gaps()[limit]; ok {
				a.gaps[name] = why
			}
		}
		if err := checkTmpfs(os.TempDir()); err != nil {
			a.gaps["disk"] = err.Error()
		}
	})
}

// Gaps names each cap this machine cannot apply and why.
func (a *agentCaps) Gaps() map[string]string {
	if a == nil {
		return map[string]string{}
	}
	a.open()
	out := make(map[string]string, len(a.gaps))
	for k, v := range a.gaps {
		out[k] = v
	}
	return out
}

func (a *agentCaps) close() error {
	if a == nil || a.cg == nil {
		return nil
	}
	return a.cg.Close()
}

// seccomp reports whether the filter applies.
func (a *agentCaps) seccomp() bool {
	if a == nil {
		return false
	}
	a.open()
	return a.gaps["seccomp"] == ""
}

// cell fills in what spec needs for the caps: the disk cap and the
// control group.
func (a *agentCaps) cell(spec *cellSpec) {
	if a == nil {
		return
	}
	a.open()
	if a.gaps["disk"] == "" {
		spec.disk, spec.diskUID, spec.diskGID = a.caps.Disk, os.Getuid(), os.Getgid()
	}
	spec.cg = a.cg
	spec.limits = cellLimits{Memory: a.caps.Memory + a.caps.Disk, Processes: a.caps.Processes, CPUs: a.caps.CPUs}
}

// applied names the caps in force on an agent in cell.
func (a *agentCaps) applied(cell *Cell) []string {
	if a == nil {
		return nil
	}
	var out []string
	if a.seccomp() {
		out = append(out, "seccomp")
	}
	if cell.fs != "" {
		out = append(out, "disk")
	}
	if cell.group != nil {
		for _, name := range []string{"memory", "pids", "cpu"} {
			if a.gaps[name] == "" {
				out = append(out, name)
			}
		}
	}
	return out
}

//go:build !linux

package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Off Linux there are no namespaces, cgroups or seccomp: every part of
// this package reports itself unavailable, so a jail refuses by name.

var errNotLinux = errors.New("jail: needs Linux")

var errNoMount = errNotLinux

var denied []string

// Owner names a process (Linux only: here no owner is ever alive).
type Owner struct {
	Pid   int
	Start uint64
}

// Self is this process; off Linux it has no start time.
func Self() Owner { return Owner{} }

func (o Owner) String() string { return "" }

// Alive is false off Linux.
func (o Owner) Alive() bool { return false }

// ParseOwner refuses off Linux.
func ParseOwner(string) (Owner, error) { return Owner{}, errNotLinux }

// OwnerFile is the marker a cell carries.
const OwnerFile = ".agentry-owner"

// Claim does nothing off Linux.
func Claim(string) error { return nil }

// ReadOwner refuses off Linux.
func ReadOwner(string) (Owner, error) { return Owner{}, errNotLinux }

type swept struct {
	Paths  []string
	Owners []Owner
	Failed []error
}

func sweepDirs(string, string) swept                     { return swept{} }
func sweepCgroups(context.Context) swept                 { return swept{} }
func removeAll(dir string) error                         { return os.RemoveAll(dir) }
func seccompProgram() ([]byte, error)                    { return nil, errNotLinux }
func seccompFile() (*os.File, error)                     { return nil, errNotLinux }
func mountTmpfs(string, int64, int, int) error           { return errNoMount }
func unmount(string) error                               { return nil }
func checkTmpfs(string) error                            { return errNoMount }
func fileOwner(fs.FileInfo) (int, int, bool)             { return 0, 0, false }
func contains(xs []string, x string) bool                { return false }
func jailedProcAttr(int, int, bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// Reap waits for cmd.
func Reap(cmd *exec.Cmd) error { return cmd.Wait() }

type cellLimits struct {
	Memory    int64
	Processes int
	CPUs      float64
}

type cgroups struct{}

func openCgroups() *cgroups   { return &cgroups{} }
func (*cgroups) Version() int { return 0 }
func (*cgroups) Gaps() map[string]string {
	return map[string]string{"memory cap": "needs Linux", "process cap": "needs Linux", "CPU cap": "needs Linux"}
}
func (*cgroups) Session(cellLimits) (*cgroup, error) { return nil, errNotLinux }
func (*cgroups) Close() error                        { return nil }

type cgroup struct{}

func (*cgroup) Enter(int) error               { return nil }
func (*cgroup) OOMKills() int                 { return 0 }
func (*cgroup) Usage() (time.Duration, int64) { return 0, 0 }
func (*cgroup) Procs() []string               { return nil }
func (*cgroup) Remove(context.Context) error  { return nil }

func (s *agentSettings) ready(context.Context) error {
	return fmt.Errorf("%w: jailed agents need Linux (bubblewrap and network namespaces)", ErrNoJail)
}

func (s *agentSettings) launch(ctx context.Context, _ Spec) (*Process, error) {
	return nil, s.ready(ctx)
}

type proc struct {
	s       *agentSettings
	stdin   io.WriteCloser
	stdout  io.ReadCloser
	done    chan struct{}
	exposed map[string]string
	stderr  fmt.Stringer
}

func (p *proc) exitErr() error             { return nil }
func (p *proc) stop(context.Context) error { return nil }
func (p *proc) command(context.Context, []string, string, []string) (*exec.Cmd, error) {
	return nil, fmt.Errorf("%w: jailed agents need Linux", ErrNoJail)
}

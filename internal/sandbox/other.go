//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"os"
)

// Off Linux there are no namespaces, cgroups or seccomp: every part of
// this package reports itself unavailable, so a jail refuses by name.

var errNotLinux = errors.New("sandbox: needs Linux")

// ErrNoMount is wrapped when a tmpfs cannot be mounted.
var ErrNoMount = errNotLinux

var Denied []string

type Owner struct {
	Pid   int
	Start uint64
}

func Self() Owner                      { return Owner{} }
func (o Owner) String() string         { return "" }
func (o Owner) Alive() bool            { return false }
func ParseOwner(string) (Owner, error) { return Owner{}, errNotLinux }

const OwnerFile = ".agentry-owner"

func Claim(string) error              { return nil }
func ReadOwner(string) (Owner, error) { return Owner{}, errNotLinux }

type Swept struct {
	Paths  []string
	Owners []Owner
	Failed []error
}

func SweepDirs(string, string) Swept           { return Swept{} }
func SweepCgroups(context.Context) Swept       { return Swept{} }
func RemoveAll(dir string) error               { return removeAll(dir) }
func SeccompProgram() ([]byte, error)          { return nil, errNotLinux }
func MountTmpfs(string, int64, int, int) error { return ErrNoMount }
func Unmount(string) error                     { return nil }
func CheckTmpfs(string) error                  { return ErrNoMount }

type Limits struct {
	Memory    int64
	Processes int
	CPUs      float64
}

type Cgroups struct{}

func OpenCgroups() *Cgroups   { return &Cgroups{} }
func (*Cgroups) Version() int { return 0 }
func (*Cgroups) Gaps() map[string]string {
	return map[string]string{"memory cap": "needs Linux", "process cap": "needs Linux", "CPU cap": "needs Linux"}
}
func (*Cgroups) Session(Limits) (*Group, error) { return nil, errNotLinux }
func (*Cgroups) Close() error                   { return nil }

type Group struct{}

func (*Group) Enter(int) error              { return nil }
func (*Group) OOMKills() int                { return 0 }
func (*Group) Procs() []string              { return nil }
func (*Group) Remove(context.Context) error { return nil }

func SeccompFile() (*os.File, error) { return nil, errNotLinux }

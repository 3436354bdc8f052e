//go:build linux

package jail

import (
	"os/exec"
	"syscall"
)

// jailedProcAttr: bubblewrap leads its own process group (so everything
// it leaves can be killed at once), is killed if the thread that started
// it dies, and — when drop is set, as root — runs as the jail's user with
// no supplementary groups.
func jailedProcAttr(uid, gid int, drop bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if drop {
		a.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	return a
}

// Reap waits for cmd (the leader of its own process group) to exit, kills
// whatever it left in its group — nothing outlives it — and only then
// reaps it, so the group's id cannot have been reused by then.
func Reap(cmd *exec.Cmd) error {
	if WaitExit(cmd.Process.Pid) == nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return cmd.Wait()
}

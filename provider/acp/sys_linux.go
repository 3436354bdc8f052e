//go:build linux

package acp

import "syscall"

// sysProcAttr puts a child in its own process group (so a stop reaches
// everything it started), asks the kernel to kill it if this process
// dies, and runs it as cred when given.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

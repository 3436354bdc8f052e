//go:build linux

package acp

import (
	"syscall"
	"unsafe"
)

// sysProcAttr puts a child in its own process group (so a stop reaches
// everything it started), asks the kernel to kill it if this process
// dies, and runs it as cred when given.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// waitExit blocks until the process exits without reaping it, so its
// process group's id cannot be reused while what it left is killed.
func waitExit(pid int) error {
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, 1 /* P_PID */, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

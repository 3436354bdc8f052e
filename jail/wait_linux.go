//go:build linux

package jail

import (
	"syscall"
	"unsafe"
)

// WaitExit blocks until process pid exits, without reaping it: while it
// is an unreaped zombie its pid, and so its process group's id, cannot
// be reused, and what it left in the group can be killed safely.
func WaitExit(pid int) error {
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, 1 /* P_PID */, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case 0:
			return nil
		}
		return e
	}
}

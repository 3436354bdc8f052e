//go:build linux

package local

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts an unjailed child in its own process group (so a
// timeout kills everything it started) and asks the kernel to kill it if
// this thread dies. (A jailed one's is the jail's.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// exitStatus is the shell's view of how a process ended: its exit code,
// or 128 + the signal that killed it.
func exitStatus(cmd *exec.Cmd) int {
	st := cmd.ProcessState
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// newOutputPipe makes a pipe whose read end is non-blocking and whose
// write end is a plain descriptor for another process.
func newOutputPipe() (outputPipe, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return outputPipe{}, err
	}
	// The code's end blocks like any stdout; one F_SETFL, since the only
	// status flag pipe2 set is O_NONBLOCK (close-on-exec is a descriptor
	// flag and stays).
	if _, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(p[1]), syscall.F_SETFL, 0); e != 0 {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return outputPipe{}, e
	}
	return outputPipe{rfd: p[0], wfd: p[1]}, nil
}

// socketPair makes the control socket pair, close-on-exec.
func socketPair() ([2]int, error) {
	return syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}

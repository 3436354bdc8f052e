//go:build unix && !linux

package acp

import (
	"errors"
	"syscall"
)

func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// waitExit cannot wait without reaping here, so what the agent leaves in
// its group is not killed when it exits on its own.
func waitExit(int) error { return errors.ErrUnsupported }

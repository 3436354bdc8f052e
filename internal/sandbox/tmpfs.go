//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// ErrNoMount is wrapped when this process may not mount a file system
// (it lacks CAP_SYS_ADMIN in its mount namespace).
var ErrNoMount = errors.New("sandbox: cannot mount a size-capped tmpfs")

// MountTmpfs mounts a tmpfs of at most size bytes on dir (which must
// exist and be empty), owned by uid:gid with mode 0700, without set-uid
// programs or device files. A write past size fails with ENOSPC. Its
// pages are memory: a cgroup memory limit counts what the session writes
// there.
func MountTmpfs(dir string, size int64, uid, gid int) error {
	if size <= 0 {
		return fmt.Errorf("sandbox: a tmpfs of %d bytes; give a positive size", size)
	}
	opts := "size=" + strconv.FormatInt(size, 10) + ",mode=0700,uid=" + strconv.Itoa(uid) + ",gid=" + strconv.Itoa(gid)
	if err := syscall.Mount("agentry", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		if err == syscall.EPERM || err == syscall.EACCES {
			return fmt.Errorf("%w: mounting needs CAP_SYS_ADMIN (run agentry as root, or in a user and mount namespace of its own): %v", ErrNoMount, err)
		}
		return fmt.Errorf("%w on %s: %v", ErrNoMount, dir, err)
	}
	return nil
}

// Unmount detaches the mount on dir; a dir with nothing mounted on it is
// not an error.
func Unmount(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil || err == syscall.EINVAL || err == syscall.ENOENT {
		return nil
	}
	return fmt.Errorf("sandbox: unmounting %s: %w", dir, err)
}

// CheckTmpfs proves that MountTmpfs works here, on a scratch directory
// under base that it removes again.
func CheckTmpfs(base string) error {
	dir, err := os.MkdirTemp(base, "agentry-probe-tmpfs-")
	if err != nil {
		return fmt.Errorf("%w: making a directory to try it on: %v", ErrNoMount, err)
	}
	defer os.Remove(dir)
	if err := MountTmpfs(dir, 1<<20, os.Getuid(), os.Getgid()); err != nil {
		return err
	}
	return Unmount(dir)
}

//go:build linux

package jail

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// errNoMount is wrapped when this process may not mount a file system
// (it lacks CAP_SYS_ADMIN in its mount namespace).
var errNoMount = errors.New("jail: cannot mount a size-capped tmpfs")

// mountTmpfs mounts a tmpfs of at most size bytes on dir (which must
// exist and be empty), owned by uid:gid with mode 0700, without set-uid
// programs or device files. A write past size fails with ENOSPC. Its
// pages are memory: a cgroup memory limit counts what the session writes
// there.
func mountTmpfs(dir string, size int64, uid, gid int) error {
	if size <= 0 {
		return fmt.Errorf("jail: a tmpfs of %d bytes; give a positive size", size)
	}
	opts := "size=" + strconv.FormatInt(size, 10) + ",mode=0700,uid=" + strconv.Itoa(uid) + ",gid=" + strconv.Itoa(gid)
	if err := syscall.Mount("agentry", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		if err == syscall.EPERM || err == syscall.EACCES {
			return fmt.Errorf("%w: mounting needs CAP_SYS_ADMIN (run agentry as root, or in a user and mount namespace of its own): %v", errNoMount, err)
		}
		return fmt.Errorf("%w on %s: %v", errNoMount, dir, err)
	}
	return nil
}

// unmount detaches the mount on dir; a dir with nothing mounted on it is
// not an error.
func unmount(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil || err == syscall.EINVAL || err == syscall.ENOENT {
		return nil
	}
	return fmt.Errorf("jail: unmounting %s: %w", dir, err)
}

// checkTmpfs proves that mountTmpfs works here, on a scratch directory
// under base that it removes again.
func checkTmpfs(base string) error {
	dir, err := os.MkdirTemp(base, "agentry-probe-tmpfs-")
	if err != nil {
		return fmt.Errorf("%w: making a directory to try it on: %v", errNoMount, err)
	}
	defer os.Remove(dir)
	if err := mountTmpfs(dir, 1<<20, os.Getuid(), os.Getgid()); err != nil {
		return err
	}
	return unmount(dir)
}

//go:build unix

package tarws

import (
	"os"
	"syscall"
)

// owner is who should own what an extraction makes: the workspace
// directory's owner, when this process runs as root and that owner is
// someone else (an agent's own user). chown is false otherwise.
func owner(root *os.Root) (uid, gid int, chown bool) {
	if os.Geteuid() != 0 {
		return 0, 0, false
	}
	fi, err := root.Stat(".")
	if err != nil {
		return 0, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || (st.Uid == 0 && st.Gid == 0) {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

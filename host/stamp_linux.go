package host

import (
	"os"
	"syscall"
)

// stampOf is the version a stat describes: size, modification and
// change times, and which inode (so a file renamed over the path is a
// new version even when its times are older).
func stampOf(info os.FileInfo) fileStamp {
	st := fileStamp{size: info.Size(), mod: info.ModTime().UnixNano()}
	if sys, ok := info.Sys().(*syscall.Stat_t); ok {
		st.chg = sys.Ctim.Nano()
		st.dev, st.inode = uint64(sys.Dev), sys.Ino //nolint:unconvert // Dev is uint32 on some architectures
	}
	return st
}

//go:build !linux

package host

import "os"

// stampOf is the version a stat describes: size and modification time
// (change time and inode are read on Linux only; the racy window covers
// the rest).
func stampOf(info os.FileInfo) fileStamp {
	return fileStamp{size: info.Size(), mod: info.ModTime().UnixNano()}
}

//go:build !linux

package local

// dirWatch is inotify-backed on Linux; elsewhere every execute walks.
type dirWatch struct{}

func newDirWatch(string) *dirWatch { return nil }
func (w *dirWatch) changed() bool  { return true }
func (w *dirWatch) track([]string) {}
func (w *dirWatch) close()         {}

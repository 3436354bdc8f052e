//go:build !linux

package sandbox

import "os"

func removeAll(dir string) error { return os.RemoveAll(dir) }

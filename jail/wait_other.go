//go:build !linux

package jail

import "errors"

// WaitExit cannot wait without reaping outside Linux: it returns
// errors.ErrUnsupported, and the caller does not sweep the process group
// after the process exits on its own.
func WaitExit(int) error { return errors.ErrUnsupported }

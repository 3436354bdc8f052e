//go:build linux

package local

import (
	"sync"
	"syscall"
)

// maxWatches bounds the directories one session watches; past it, every
// execute walks the work directory instead.
const maxWatches = 256

const watchMask = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MODIFY | syscall.IN_ATTRIB |
	syscall.IN_CLOSE_WRITE | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF |
	syscall.IN_MOVE_SELF | syscall.IN_DONT_FOLLOW | syscall.IN_ONLYDIR

// dirWatch tells, with one system call, whether anything changed under a
// session's work directory since it last asked (inotify), so that an
// execute that wrote nothing does not walk the directory. A nil *dirWatch
// (inotify unavailable, or its per-user instances used up) always says
// "changed". It is used by one execute at a time.
type dirWatch struct {
	mu      sync.Mutex
	fd      int
	watched map[string]bool
	full    bool
	buf     [4096]byte
}

func newDirWatch(root string) *dirWatch {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &dirWatch{fd: fd, watched: map[string]bool{}}
	w.track([]string{root})
	if !w.watched[root] {
		w.close()
		return nil
	}
	return w
}

// changed drains the pending events and reports whether there were any.
func (w *dirWatch) changed() bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 || w.full {
		return true
	}
	changed := false
	for {
		n, err := syscall.Read(w.fd, w.buf[:])
		switch {
		case n > 0:
			changed = true
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			return changed
		default:
			return true
		}
	}
}

// track watches directories a walk found (adding a watch twice is a
// no-op for the kernel).
func (w *dirWatch) track(dirs []string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 || w.full {
		return
	}
	for _, d := range dirs {
		if w.watched[d] {
			continue
		}
		if len(w.watched) >= maxWatches {
			w.full = true
			return
		}
		if _, err := syscall.InotifyAddWatch(w.fd, d, watchMask); err != nil {
			// An unwatched directory could change unseen: walk every time.
			w.full = true
			return
		}
		w.watched[d] = true
	}
}

func (w *dirWatch) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		syscall.Close(w.fd)
		w.fd = -1
	}
}

//go:build linux

package local

import (
	"encoding/binary"
	"sync"
	"syscall"
)

// maxWatches bounds the directories one session watches, and
// maxProcessWatches all sessions together, so that this process never
// takes more than a small share of the user's inotify watches (which other
// programs need too). Past either bound a session walks its work
// directory after every execute instead: slower, never wrong.
const (
	maxWatches        = 64
	maxProcessWatches = 8192
)

const watchMask = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MODIFY | syscall.IN_ATTRIB |
	syscall.IN_CLOSE_WRITE | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF |
	syscall.IN_MOVE_SELF | syscall.IN_DONT_FOLLOW | syscall.IN_ONLYDIR

// watcher is this process's one inotify instance, shared by every
// session: the per-user limit on instances is small (128 by default), so
// one per session would run out — for this process and for every other
// program of the same user. Events are read on demand, by the session
// asking whether its directory changed, and handed to the sessions their
// watches belong to. Nothing reads in the background.
type watcher struct {
	mu      sync.Mutex
	fd      int
	byWD    map[int32]*dirWatch
	watches int
	buf     [64 << 10]byte
}

var sharedWatcher = sync.OnceValue(func() *watcher {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	return &watcher{fd: fd, byWD: map[int32]*dirWatch{}}
})

// dirWatch tells, with one system call, whether anything changed under a
// session's work directory since it last asked, so that an execute that
// wrote nothing does not walk the directory. A nil *dirWatch (inotify
// unavailable) always says "changed".
type dirWatch struct {
	w *watcher
	// Guarded by w.mu.
	watched map[string]int32
	dirty   bool
	full    bool // some directory is not watched: always walk
	closed  bool
}

func newDirWatch(root string) *dirWatch {
	w := sharedWatcher()
	if w == nil {
		return nil
	}
	d := &dirWatch{w: w, watched: map[string]int32{}}
	d.track([]string{root})
	w.mu.Lock()
	_, ok := d.watched[root]
	w.mu.Unlock()
	if !ok {
		d.close()
		return nil
	}
	return d
}

// changed reports whether anything happened under the directory since
// the last call.
func (d *dirWatch) changed() bool {
	if d == nil {
		return true
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drain()
	c := d.dirty || d.full || d.closed
	d.dirty = false
	return c
}

// drain reads every pending event and marks the sessions they concern.
// Call with w.mu held.
func (w *watcher) drain() {
	for {
		n, err := syscall.Read(w.fd, w.buf[:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil || n <= 0:
			// EAGAIN: nothing more. Any other error: mark everyone,
			// the walk is the truth.
			if err != syscall.EAGAIN {
				w.markAll()
			}
			return
		}
		for _, ev := range parseEvents(w.buf[:n]) {
			if ev.mask&syscall.IN_Q_OVERFLOW != 0 {
				w.markAll()
				continue
			}
			d := w.byWD[ev.wd]
			if d == nil {
				continue
			}
			d.dirty = true
			if ev.mask&syscall.IN_IGNORED != 0 {
				// The directory went (or its watch was removed): forget
				// it, so that a walk that finds it again re-adds it.
				delete(w.byWD, ev.wd)
				w.watches--
				for p, wd := range d.watched {
					if wd == ev.wd {
						delete(d.watched, p)
					}
				}
			}
		}
	}
}

func (w *watcher) markAll() {
	for _, d := range w.byWD {
		d.dirty = true
	}
}

type inotifyEvent struct {
	wd   int32
	mask uint32
}

// parseEvents reads struct inotify_event records (wd, mask, cookie, len,
// then len bytes of name) in this machine's byte order; a torn record at
// the end is dropped.
func parseEvents(b []byte) []inotifyEvent {
	var out []inotifyEvent
	for len(b) >= syscall.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		n := int(binary.NativeEndian.Uint32(b[12:]))
		if n < 0 || n > len(b)-syscall.SizeofInotifyEvent {
			break
		}
		out = append(out, inotifyEvent{wd: wd, mask: mask})
		b = b[syscall.SizeofInotifyEvent+n:]
	}
	return out
}

// track watches directories a walk found (adding a watch twice is a
// no-op for the kernel).
func (d *dirWatch) track(dirs []string) {
	if d == nil {
		return
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if d.full || d.closed {
		return
	}
	for _, p := range dirs {
		if _, ok := d.watched[p]; ok {
			continue
		}
		if len(d.watched) >= maxWatches || w.watches >= maxProcessWatches {
			d.full = true
			return
		}
		wd, err := syscall.InotifyAddWatch(w.fd, p, watchMask)
		if err != nil {
			// An unwatched directory could change unseen: walk every time.
			d.full = true
			return
		}
		if other := w.byWD[int32(wd)]; other != nil && other != d {
			// The same directory under two sessions cannot be told
			// apart: both walk from now on.
			other.full, d.full = true, true
			return
		}
		if _, ok := w.byWD[int32(wd)]; !ok {
			w.watches++
		}
		d.watched[p] = int32(wd)
		w.byWD[int32(wd)] = d
	}
}

// close removes the session's watches from the shared instance.
func (d *dirWatch) close() {
	if d == nil {
		return
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	for _, wd := range d.watched {
		if w.byWD[wd] == d {
			_, _ = syscall.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.byWD, wd)
			w.watches--
		}
	}
	d.watched = nil
}

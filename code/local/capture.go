package local

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/code"
)

// capture keeps the first max characters of a stream and counts all of
// them, holding at most max characters in memory however much the code
// prints. Characters are counted as utf8.RuneCount would count the whole
// stream, across write boundaries.
type capture struct {
	max   int
	kept  []byte
	nkept int
	total int
	tail  [utf8.UTFMax]byte // an incomplete sequence at the end of the last write
	ntail int
}

func newCapture(max int) *capture { return &capture{max: max} }

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	if c.ntail > 0 {
		// A character was split across writes: rejoin it (rare, so the
		// copy does not matter).
		joined := make([]byte, 0, c.ntail+len(p))
		joined = append(append(joined, c.tail[:c.ntail]...), p...)
		c.ntail = 0
		p = joined
	}
	// Hold back a trailing incomplete sequence for the next write.
	end := len(p)
	for i := len(p) - 1; i >= 0 && i >= len(p)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				end = i
			}
			break
		}
	}
	c.add(p[:end])
	c.ntail = copy(c.tail[:], p[end:])
	return n, nil
}

// add takes whole sequences (or invalid bytes, one character each).
func (c *capture) add(p []byte) {
	if c.nkept < c.max {
		i := 0
		for i < len(p) && c.nkept < c.max {
			_, size := utf8.DecodeRune(p[i:])
			i += size
			c.nkept++
			c.total++
		}
		c.kept = append(c.kept, p[:i]...)
		p = p[i:]
	}
	c.total += utf8.RuneCount(p)
}

// finish counts a sequence left incomplete at the end of the stream.
func (c *capture) finish() {
	if c.ntail > 0 {
		rest := append([]byte(nil), c.tail[:c.ntail]...)
		c.ntail = 0
		c.add(rest)
	}
}

func (c *capture) String() string { return string(c.kept) }
func (c *capture) cut() bool      { return c.total > c.nkept }

var readBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readAll copies r into c until EOF, a read error, or r's deadline.
func readAll(c *capture, r *os.File) {
	bp := readBuffers.Get().(*[]byte)
	defer readBuffers.Put(bp)
	buf := *bp
	for {
		n, err := r.Read(buf)
		c.Write(buf[:n])
		if err != nil {
			c.finish()
			return
		}
	}
}

// truncation describes what two captures cut, or nil when nothing was.
func truncation(out, errs *capture) *code.Truncation {
	if !out.cut() && !errs.cut() {
		return nil
	}
	t := &code.Truncation{Stdout: out.cut(), Stderr: errs.cut()}
	if t.Stdout {
		t.OfChars = out.total
	}
	if t.Stderr && errs.total > t.OfChars {
		t.OfChars = errs.total
	}
	return t
}

// outputs reads an execution's stdout and stderr pipes into captures.
//
// Readers are goroutines on the runtime's poller. A short execute does not
// need them: its output sits in the pipes when its reply arrives, and one
// pass of non-blocking reads to EOF collects it (readLater). Readers start
// when the execute runs long enough that its output might fill a pipe, or
// when that pass finds a pipe still held open (a background process).
type outputs struct {
	stdout, stderr *capture
	out, err       outputPipe
	done           chan struct{} // one token per finished reader

	mu      sync.Mutex
	started bool // readers are running
	settled bool // the execute is over; readLater's timer must not start readers
}

func newOutputs(max int) (*outputs, error) {
	out, err := newOutputPipe()
	if err != nil {
		return nil, err
	}
	errs, err := newOutputPipe()
	if err != nil {
		out.close()
		return nil, err
	}
	return &outputs{stdout: newCapture(max), stderr: newCapture(max), out: out, err: errs, done: make(chan struct{}, 2)}, nil
}

// read starts the readers now: for a process, whose output arrives while
// it runs.
func (o *outputs) read() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.startLocked()
}

// readLater starts the readers only if the execute is still running
// after d.
func (o *outputs) readLater(d time.Duration) *time.Timer {
	return time.AfterFunc(d, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !o.settled {
			o.startLocked()
		}
	})
}

func (o *outputs) startLocked() {
	if o.started {
		return
	}
	o.started = true
	o.out.r = os.NewFile(uintptr(o.out.rfd), "stdout") // non-blocking: on the poller
	o.err.r = os.NewFile(uintptr(o.err.rfd), "stderr")
	go func() { readAll(o.stdout, o.out.r); o.done <- struct{}{} }()
	go func() { readAll(o.stderr, o.err.r); o.done <- struct{}{} }()
}

// finish collects the rest of a finished execution's output, giving the
// stragglers (a background process still holding a pipe) grace before
// cutting them off, and releases the pipes.
func (o *outputs) finish(grace time.Duration) {
	o.mu.Lock()
	o.settled = true
	started := o.started
	o.mu.Unlock()
	if !started {
		bp := readBuffers.Get().(*[]byte)
		eof := drainFD(o.out.rfd, o.stdout, *bp)
		eof = drainFD(o.err.rfd, o.stderr, *bp) && eof
		readBuffers.Put(bp)
		if eof {
			o.close()
			return
		}
		o.mu.Lock()
		o.startLocked()
		o.mu.Unlock()
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	for n := 0; n < 2; n++ {
		select {
		case <-o.done:
		case <-t.C:
			_ = o.out.r.SetReadDeadline(time.Now())
			_ = o.err.r.SetReadDeadline(time.Now())
			<-o.done
		}
	}
	o.close()
}

// drainFD reads a non-blocking descriptor until it would block (false) or
// reaches EOF (true).
func drainFD(fd int, c *capture, buf []byte) bool {
	for {
		n, err := syscall.Read(fd, buf)
		switch {
		case n > 0:
			c.Write(buf[:n])
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			return false
		default: // EOF, or an error that ends the stream all the same
			c.finish()
			return true
		}
	}
}

// close releases whatever is still open. Only the goroutine that owns the
// outputs calls it, after the readers are done.
func (o *outputs) close() {
	o.out.close()
	o.err.close()
}

// outputPipe is a pipe whose read end (non-blocking) the host reads and
// whose write end (a plain blocking descriptor, never on the poller) goes
// to the code. Files wrap the descriptors only when something needs one.
type outputPipe struct {
	rfd int
	r   *os.File // wraps rfd once readers run
	wfd int
	w   *os.File // wraps wfd for exec.Cmd
}

// writer is the write end as a file, for exec.Cmd.
func (p *outputPipe) writer() *os.File {
	if p.w == nil && p.wfd >= 0 {
		p.w = os.NewFile(uintptr(p.wfd), "output")
	}
	return p.w
}

func (p *outputPipe) closeWrite() {
	switch {
	case p.w != nil:
		_ = p.w.Close()
		p.w = nil
	case p.wfd >= 0:
		_ = syscall.Close(p.wfd)
	}
	p.wfd = -1
}

func (p *outputPipe) close() {
	p.closeWrite()
	switch {
	case p.r != nil:
		_ = p.r.Close()
		p.r = nil
	case p.rfd >= 0:
		_ = syscall.Close(p.rfd)
	}
	p.rfd = -1
}

// Artifacts: what an execution left in the work directory.

// maxScan bounds how many entries one snapshot walks.
const maxScan = 4096

// maxArtifacts bounds how many artifacts one result lists.
const maxArtifacts = 50

type fileStamp struct {
	size int64
	mod  time.Time
}

// snapshot records the regular files under dir (symlinks are not
// followed), up to maxScan entries, and the directories it walked.
func snapshot(dir string) (map[string]fileStamp, []string) {
	m := make(map[string]fileStamp)
	var dirs []string
	seen := 0
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		seen++
		if seen > maxScan {
			return fs.SkipAll
		}
		if e.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return nil
		}
		m[p] = fileStamp{size: fi.Size(), mod: fi.ModTime()}
		return nil
	})
	return m, dirs
}

// artifacts lists the files created or changed between two snapshots, as
// the code sees them (view maps a host path to the code's path). It is
// never nil: these runners report outputs. It lists at most maxArtifacts,
// by name, and states a cut in t (returned, allocated when nil).
func artifacts(before, after map[string]fileStamp, work string, view func(string) string, t *code.Truncation) ([]code.Artifact, *code.Truncation) {
	out := []code.Artifact{}
	for p, st := range after {
		if old, ok := before[p]; ok && old == st {
			continue
		}
		rel, err := filepath.Rel(work, p)
		if err != nil {
			continue
		}
		out = append(out, code.Artifact{Name: rel, Bytes: st.size, URI: "file://" + view(p)})
	}
	sortArtifacts(out)
	if len(out) > maxArtifacts {
		if t == nil {
			t = &code.Truncation{}
		}
		t.Artifacts, t.OfArtifacts = true, len(out)
		out = out[:maxArtifacts]
	}
	return out, t
}

func sortArtifacts(a []code.Artifact) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].Name < a[j-1].Name; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

var _ io.Writer = (*capture)(nil)

package local

import (
	"sync"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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

// outputs reads an execution's stdout and stderr pipes into captures,
// each on its own goroutine, until EOF.
type outputs struct {
	stdout, stderr *capture
	out, err       outputPipe
	done           chan struct{} // one token per finished reader
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

// read starts the readers; call it once the write ends are handed over.
func (o *outputs) read() {
	go func() { readAll(o.stdout, o.out.r); o.done <- struct{}{} }()
	go func() { readAll(o.stderr, o.err.r); o.done <- struct{}{} }()
}

// finish waits for the readers of a finished execution, giving the
// stragglers (a background process still holding the pipes) grace before
// cutting them off, and releases the pipes.
func (o *outputs) finish(grace time.Duration) {
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

// close releases whatever is still open (idempotent).
func (o *outputs) close() {
	o.out.close()
	o.err.close()
}

// outputPipe is a pipe whose read end the host polls and whose write end
// (a plain blocking descriptor, never registered with the poller) goes to
// the code.
type outputPipe struct {
	r   *os.File
	w   *os.File
	wfd int
}

func (p *outputPipe) closeWrite() {
	if p.w != nil {
		_ = p.w.Close()
		p.w = nil
	}
}

func (p *outputPipe) close() {
	p.closeWrite()
	if p.r != nil {
		_ = p.r.Close()
	}
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
// followed), up to maxScan entries.
func snapshot(dir string) map[string]fileStamp {
	m := make(map[string]fileStamp)
	seen := 0
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		seen++
		if seen > maxScan {
			return fs.SkipAll
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
	return m
}

// artifacts lists the files created or changed between two snapshots, as
// the code sees them (view maps a host path to the code's path). It is
// never nil: these runners report outputs.
func artifacts(before, after map[string]fileStamp, work string, view func(string) string) []code.Artifact {
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
		out = out[:maxArtifacts]
	}
	return out
}

func sortArtifacts(a []code.Artifact) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].Name < a[j-1].Name; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

var _ io.Writer = (*capture)(nil)

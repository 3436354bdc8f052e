package ndjson

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// Defaults for a zero [Options].
const (
	DefaultMaxBufferEvents = 100
	DefaultMaxBufferBytes  = 64 << 10
	DefaultFlushInterval   = time.Second
	DefaultMaxQueuedBytes  = 4 << 20
)

// Options configure a [Sink]. The zero value is usable.
type Options struct {
	// MaxBytes, when positive, is the rotation ceiling: before a line that
	// would take a non-empty file past it, the file is renamed to PATH.1
	// (replacing any previous PATH.1) and a fresh one started. Batches are
	// split at line boundaries, so the file stays within MaxBytes, or holds
	// one line when that line alone is larger. A batch larger than two
	// generations keeps its newest lines: the oldest are dropped, counted
	// in Stats.RotatedAway and reported with [ErrRotatedAway]. Zero never
	// renames anything — the right choice when logrotate or a shipper owns
	// the file.
	MaxBytes int64
	// MaxBufferEvents and MaxBufferBytes are the size triggers: when the
	// buffer reaches either, it is handed to the writer (defaults 100
	// events and 64 KiB).
	MaxBufferEvents, MaxBufferBytes int
	// FlushInterval is the timer trigger: the writer takes whatever is
	// buffered this often. Zero means the default, one second; a negative
	// value turns the timer off, so only the size triggers, Flush and Close
	// write.
	FlushInterval time.Duration
	// Types, when not empty, lists the event types the sink keeps; an entry
	// ending in ".*" names a whole domain ("agentry.tools.*"). Other events
	// are ignored, not counted as dropped.
	Types []event.Type
	// OnError hears about every event the sink could not keep: an event
	// that could not be serialised (called on the exporting goroutine),
	// batches the disk refused, batches dropped because the writer fell
	// behind, failed rotations and exports after Close (called from the
	// sink's own reporting goroutine, one at a time). It must be safe for
	// concurrent use and should return quickly. Default: log with
	// slog.Default. A panic in it is recovered.
	OnError func(error)
	// MaxQueuedBytes bounds the serialised events waiting in memory while
	// the writer is busy (default 4 MiB; never below twice MaxBufferBytes).
	// While the writer writes one batch, the next one fills; the writer then
	// takes all of it in one write, so a busy disk gets fewer, larger writes.
	// When the waiting batch reaches this bound, further events are dropped
	// and reported ("the writer is behind") until the writer catches up:
	// memory stays within about three times this bound (the batch filling,
	// the batch being written and its padded copy) plus the largest single
	// event, and Export never waits for the disk.
	MaxQueuedBytes int
}

// Errors carried by a [*DropError].
var (
	// ErrWriterBehind: MaxQueuedBytes were already waiting for the writer
	// when the event came.
	ErrWriterBehind = errors.New("the writer is behind: the disk is slower than the events (raise MaxQueuedBytes, or send fewer event types)")
	// ErrClosed: the event was exported after Close.
	ErrClosed = errors.New("the sink is closed")
	// ErrRotatedAway: a burst was larger than two generations of MaxBytes;
	// its oldest lines would have been rotated away within the same write,
	// so they were not written at all.
	ErrRotatedAway = errors.New("a burst was larger than two generations of MaxBytes (the file and PATH.1), " +
		"so rotation discarded its oldest lines unwritten (raise MaxBytes, or set it to 0 and let logrotate keep more generations)")
)

// DropError reports events the sink accepted or was given but did not
// write.
type DropError struct {
	N    int
	Path string
	Err  error
}

func (e *DropError) Error() string {
	return fmt.Sprintf("%d events dropped writing to %s: %v", e.N, e.Path, e.Err)
}

func (e *DropError) Unwrap() error { return e.Err }

// Problem names why a path cannot hold events.
type Problem string

// The problems [Open] tells apart.
const (
	ProblemDirectory  Problem = "the path is a directory"
	ProblemReadOnly   Problem = "the filesystem is mounted read-only"
	ProblemPermission Problem = "the process user lacks permission"
	ProblemNotDir     Problem = "a parent of the path is not a directory"
	ProblemFull       Problem = "the filesystem is full"
	ProblemOther      Problem = "the path cannot be opened for appending"
)

// OpenError is Open's refusal of an unusable path.
type OpenError struct {
	Path    string
	Problem Problem
	Err     error
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("ndjson: cannot write events to %s: %s (%v); fix the path or its permissions — "+
		"the sink refuses to start rather than drop every event", e.Path, e.Problem, e.Err)
}

func (e *OpenError) Unwrap() error { return e.Err }

// Stats counts what a sink did with the events it was given.
type Stats struct {
	Accepted       uint64 // serialised into the buffer
	Written        uint64 // on disk (handed to the kernel)
	Dropped        uint64 // serialised but lost: failed writes, a writer behind, RotatedAway
	Unserialisable uint64 // refused by Export: could not be serialised
	AfterClose     uint64 // refused by Export: the sink was closed
	Rotations      uint64 // renames to PATH.1
	RotatedAway    uint64 // of Dropped: the oldest lines of bursts larger than two generations
	Bytes          uint64 // bytes written
}

// Sink appends events to a file as NDJSON. It is safe for concurrent use.
type Sink struct {
	path    string
	opt     Options
	onError func(error)
	types   map[event.Type]struct{}
	domains []string

	mu        sync.Mutex
	cur       []byte // the batch being filled
	curEvents int
	spare     []byte // the writer's last buffer, for the next batch
	nudged    bool   // the writer was woken for cur
	closed    bool
	stats     Stats
	done      uint64 // events accepted and finished (written or dropped)
	progress  chan struct{}
	// reports waiting for the reporter, and the events dropped because the
	// writer was behind or rotated away, not yet reported.
	reports       []error
	suppressed    int
	behind        int
	rotatedAway   int
	reportsQueued uint64
	reportsSent   uint64

	wake, stop   chan struct{}
	reportKick   chan struct{}
	stopReporter chan struct{}
	writerDone   chan struct{}
	reporterDone chan struct{}
	closeOnce    sync.Once
	stopOnce     sync.Once
	closeErr     error
	closeErrSeen bool
	lastCause    error // of the latest drop

	// Owned by the writer goroutine.
	f       *os.File
	fi      os.FileInfo
	regular bool
	laid    []byte // layout's buffer
	spans   []span // split's buffer
}

const maxQueuedReports = 64

var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Open claims path for events and starts the sink's writer. See [Options]
// for the defaults.
func Open(path string, opt Options) (*Sink, error) {
	if strings.TrimSpace(path) == "" {
		return nil, errors.New("ndjson: Open needs the path of the events file, e.g. /var/log/agentry/events.ndjson")
	}
	switch {
	case opt.MaxBytes < 0:
		return nil, fmt.Errorf("ndjson: MaxBytes %d is negative; use 0 for no rotation or a ceiling in bytes", opt.MaxBytes)
	case opt.MaxBufferEvents < 0, opt.MaxBufferBytes < 0, opt.MaxQueuedBytes < 0:
		return nil, errors.New("ndjson: buffer limits must not be negative; use 0 for the defaults")
	}
	if opt.MaxBufferEvents == 0 {
		opt.MaxBufferEvents = DefaultMaxBufferEvents
	}
	if opt.MaxBufferBytes == 0 {
		opt.MaxBufferBytes = DefaultMaxBufferBytes
	}
	if opt.FlushInterval == 0 {
		opt.FlushInterval = DefaultFlushInterval
	}
	if opt.MaxQueuedBytes == 0 {
		opt.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	// The size triggers must fire before the bound drops anything.
	opt.MaxQueuedBytes = max(opt.MaxQueuedBytes, 2*opt.MaxBufferBytes)
	s := &Sink{
		path:         path,
		opt:          opt,
		onError:      opt.OnError,
		progress:     make(chan struct{}),
		wake:         make(chan struct{}, 1),
		stop:         make(chan struct{}),
		reportKick:   make(chan struct{}, 1),
		stopReporter: make(chan struct{}),
		writerDone:   make(chan struct{}),
		reporterDone: make(chan struct{}),
	}
	if s.onError == nil {
		s.onError = func(err error) { slog.Error("agentry ndjson sink", "err", err) }
	}
	for _, t := range opt.Types {
		if d, ok := strings.CutSuffix(string(t), "*"); ok {
			s.domains = append(s.domains, d)
			continue
		}
		if s.types == nil {
			s.types = make(map[event.Type]struct{})
		}
		s.types[t] = struct{}{}
	}
	if err := s.claim(); err != nil {
		return nil, err
	}
	go s.writer()
	go s.reporter()
	return s, nil
}

// Path returns the file the sink writes.
func (s *Sink) Path() string { return s.path }

// claim makes the parent directory, opens the file for appending and
// records what it is. O_APPEND matters beyond restarts: after logrotate's
// copytruncate empties the file, every write still lands at the new end,
// so the file never starts with a hole of NUL bytes.
func (s *Sink) claim() error {
	if dir := filepath.Dir(s.path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return s.refuse(err)
		}
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return s.refuse(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return s.refuse(err)
	}
	s.f, s.fi, s.regular = f, fi, fi.Mode().IsRegular()
	return nil
}

func (s *Sink) refuse(err error) error {
	p := ProblemOther
	switch {
	case errors.Is(err, syscall.EISDIR):
		p = ProblemDirectory
	case errors.Is(err, syscall.EROFS):
		p = ProblemReadOnly
	case errors.Is(err, fs.ErrPermission):
		p = ProblemPermission
	case errors.Is(err, syscall.ENOTDIR):
		p = ProblemNotDir
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		p = ProblemFull
	}
	if fi, serr := os.Stat(s.path); serr == nil && fi.IsDir() {
		p = ProblemDirectory
	}
	return &OpenError{Path: s.path, Problem: p, Err: err}
}

func (s *Sink) wants(t event.Type) bool {
	if s.types == nil && s.domains == nil {
		return true
	}
	if _, ok := s.types[t]; ok {
		return true
	}
	for _, d := range s.domains {
		if strings.HasPrefix(string(t), d) {
			return true
		}
	}
	return false
}

// Export serialises e into the buffer. It never blocks on I/O and never
// panics.
func (s *Sink) Export(e event.Event) {
	if !s.wants(e.Type) {
		return
	}
	bp := scratch.Get().(*[]byte)
	line, err := encode((*bp)[:0], e)
	if err != nil {
		scratch.Put(bp)
		s.mu.Lock()
		s.stats.Unserialisable++
		s.mu.Unlock()
		s.report(fmt.Errorf("ndjson: event %.100q could not be serialised and was skipped: %w", e.Type, err))
		return
	}
	s.mu.Lock()
	if s.closed {
		s.stats.AfterClose++
		first := s.stats.AfterClose == 1
		s.mu.Unlock()
		scratch.Put(bp)
		if first {
			s.report(&DropError{N: 1, Path: s.path, Err: fmt.Errorf("%w (later exports after Close are counted in Stats, not reported)", ErrClosed)})
		}
		return
	}
	if s.curEvents > 0 && len(s.cur)+len(line) > s.opt.MaxQueuedBytes {
		s.stats.Dropped++
		s.lastCause = ErrWriterBehind
		if s.behind == 0 {
			s.reportsQueued++
			nudge(s.reportKick)
		}
		s.behind++
		s.mu.Unlock()
		scratch.Put(bp)
		return
	}
	if s.cur == nil {
		s.cur = make([]byte, 0, s.opt.MaxBufferBytes+s.opt.MaxBufferBytes/4)
	}
	s.cur = append(s.cur, line...)
	s.curEvents++
	s.stats.Accepted++
	kick := !s.nudged && (s.curEvents >= s.opt.MaxBufferEvents || len(s.cur) >= s.opt.MaxBufferBytes)
	if kick {
		s.nudged = true
	}
	s.mu.Unlock()
	if cap(line) <= 64<<10 {
		*bp = line
		scratch.Put(bp)
	}
	if kick {
		nudge(s.wake)
	}
}

// encode guards against panics in payload marshalling (a MarshalJSON that
// panics) so that Export keeps its promise.
func encode(dst []byte, e event.Event) (out []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = dst, fmt.Errorf("serialising the payload panicked: %v", v)
		}
	}()
	return appendEvent(dst, e)
}

// notifyLocked wakes everyone waiting for progress.
func (s *Sink) notifyLocked() {
	close(s.progress)
	s.progress = make(chan struct{})
}

func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// writer is the one goroutine that touches the file.
func (s *Sink) writer() {
	defer close(s.writerDone)
	var tick <-chan time.Time
	if s.opt.FlushInterval > 0 {
		t := time.NewTicker(s.opt.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.wake:
		case <-tick:
		case <-s.stop:
			s.round()
			s.finish()
			return
		}
		s.round()
	}
}

// round writes everything buffered as one batch, when the size triggers
// woke the writer, the timer fired or someone flushes.
func (s *Sink) round() {
	s.mu.Lock()
	s.nudged = false
	data, n := s.cur, s.curEvents
	if n == 0 {
		s.mu.Unlock()
		return
	}
	s.cur, s.curEvents, s.spare = s.spare, 0, nil
	s.mu.Unlock()

	res := s.write(data, n)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.done += uint64(n)
	s.stats.Written += uint64(res.written)
	s.stats.Bytes += uint64(res.bytes)
	s.stats.Rotations += uint64(res.rotations)
	if res.rotatedAway > 0 {
		s.stats.Dropped += uint64(res.rotatedAway)
		s.stats.RotatedAway += uint64(res.rotatedAway)
		s.lastCause = ErrRotatedAway
		if s.rotatedAway == 0 {
			s.reportsQueued++
			nudge(s.reportKick)
		}
		s.rotatedAway += res.rotatedAway
	}
	if res.dropped > 0 {
		s.stats.Dropped += uint64(res.dropped)
		s.lastCause = res.err
		s.queueReportLocked(&DropError{N: res.dropped, Path: s.path, Err: res.err})
	}
	// Keep the buffer for the next batch: its size is bounded by
	// MaxQueuedBytes, and a burst is likely to come again.
	s.spare = data[:0]
	s.notifyLocked()
}

// outcome is what became of one batch's events.
type outcome struct {
	written, bytes int   // events and bytes handed to the kernel
	dropped        int   // events lost to err
	err            error // the failure that dropped them
	rotatedAway    int   // events of a burst over two generations, not written
	rotations      int   // renames to PATH.1
}

// write puts one batch of n events on disk: it follows the path if the
// file was moved or deleted, rotates at line boundaries when MaxBytes says
// so, and never leaves a partial line behind a failed write.
func (s *Sink) write(data []byte, n int) outcome {
	size, err := s.locate()
	if err != nil {
		return outcome{dropped: n, err: err}
	}
	ceiling := s.opt.MaxBytes
	if !s.regular || size < 0 || ceiling == 0 || size+int64(len(data)) <= ceiling {
		out := data
		if s.regular && size >= 0 && ceiling == 0 {
			out = s.layout(data, size)
		}
		if err := s.append(out, size); err != nil {
			return outcome{dropped: n, err: err}
		}
		return outcome{written: n, bytes: len(data)}
	}

	var res outcome
	s.spans = split(s.spans[:0], data, size, ceiling)
	pos := 0 // data[:pos] is written or rotated away
	for _, sp := range s.spans {
		// An empty file needs no rotation: it happens when the first of two
		// rotations meets a file that was empty before the batch.
		if sp.rotate && size != 0 {
			if err := os.Rename(s.path, s.path+".1"); err != nil {
				s.mu.Lock()
				s.queueReportLocked(fmt.Errorf("ndjson: rotating %s failed, writing on past MaxBytes: %w", s.path, err))
				s.mu.Unlock()
				// Nothing was rotated, so nothing needs to be lost: the rest
				// goes to the current file, past the ceiling.
				sp = span{from: pos, to: len(data)}
			} else {
				res.rotations++
				if err := s.reopen(); err != nil {
					res.dropped, res.err = lines(data[pos:]), err
					return res
				}
				size = s.fi.Size()
			}
		}
		res.rotatedAway += lines(data[pos:sp.from])
		chunk := data[sp.from:sp.to]
		if err := s.append(chunk, size); err != nil {
			res.dropped, res.err = lines(data[sp.from:]), err
			return res
		}
		res.written += lines(chunk)
		res.bytes += len(chunk)
		size += int64(len(chunk))
		pos = sp.to
		if pos == len(data) {
			break
		}
	}
	return res
}

// lines counts the events in a run of whole lines.
func lines(b []byte) int {
	n := bytes.Count(b, []byte{'\n'})
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// locate makes sure the sink holds the file at its path and returns the
// file's real size, or -1 when that cannot be known (no rotation, no
// repair then).
func (s *Sink) locate() (int64, error) {
	if s.f != nil && !s.regular {
		return -1, nil
	}
	fi, err := os.Stat(s.path)
	switch {
	case s.f != nil && err == nil && os.SameFile(fi, s.fi):
		return fi.Size(), nil // the real size: someone may have truncated it
	case s.f != nil && err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		// The path cannot be looked at right now; the open file can
		// still be written.
		return -1, nil
	default:
		// Moved away, deleted, or not reopened after a failure: continue
		// in a fresh file at the path.
		if err := s.reopen(); err != nil {
			return -1, err
		}
		if !s.regular {
			return -1, nil
		}
		return s.fi.Size(), nil
	}
}

// append writes data at the end of the file, which held size bytes (-1:
// unknown). A failed write that landed in part is taken back so that the
// next batch starts on a line of its own — but only if nobody else wrote
// meanwhile.
func (s *Sink) append(data []byte, size int64) error {
	n, err := s.f.Write(data)
	if err != nil && n > 0 && s.regular && size >= 0 {
		if fi, serr := s.f.Stat(); serr == nil && fi.Size() == size+int64(n) {
			_ = s.f.Truncate(size)
		}
	}
	return err
}

var pageSize = int64(os.Getpagesize())

// layout pads the batch about to land at offset so that no line shorter
// than a page crosses a page boundary.
//
// Why: logrotate's copytruncate copies the file while the sink may be
// writing, and the kernel makes a write visible to readers page by page.
// A copy taken mid-write therefore ends at a page boundary; when page
// boundaries fall between lines, the copy ends on a whole line. The
// padding is spaces before a line's newline (still valid JSON), or, for
// the first line of a batch, before its opening brace. It costs a few
// percent of file size and one copy of the batch; it is done only when
// the sink does not rotate by itself (MaxBytes 0), which is when an outside
// rotator may own the file.
func (s *Sink) layout(data []byte, offset int64) []byte {
	pos := offset % pageSize
	out := s.laid[:0]
	start := 0
	for i := 0; i < len(data); {
		j := bytes.IndexByte(data[i:], '\n') + i + 1
		if j <= i {
			j = len(data)
		}
		l := int64(j - i)
		if l <= pageSize && pos > 0 && pos+l > pageSize {
			pad := int(pageSize - pos)
			if i == 0 {
				out = append(out, spaces(pad)...)
			} else {
				out = append(out, data[start:i-1]...)
				out = append(out, spaces(pad)...)
				out = append(out, '\n')
				start = i
			}
			pos = 0
		}
		pos = (pos + l) % pageSize
		i = j
	}
	if start == 0 && len(out) == 0 {
		return data // nothing straddled
	}
	out = append(out, data[start:]...)
	s.laid = out
	return out
}

var blank = bytes.Repeat([]byte{' '}, 64<<10)

func spaces(n int) []byte {
	if n <= len(blank) {
		return blank[:n]
	}
	return bytes.Repeat([]byte{' '}, n)
}

func (s *Sink) reopen() error {
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	s.f, s.fi, s.regular = f, fi, fi.Mode().IsRegular()
	return nil
}

func (s *Sink) finish() {
	if s.f == nil {
		return
	}
	err := s.f.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		err = nil // a character device or pipe: nothing to sync
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	if err != nil {
		s.mu.Lock()
		s.closeErr = fmt.Errorf("ndjson: closing %s: %w", s.path, err)
		s.queueReportLocked(s.closeErr)
		s.mu.Unlock()
	}
}

// report hands err to OnError on the calling goroutine.
func (s *Sink) report(err error) {
	defer func() {
		if v := recover(); v != nil {
			slog.Error("agentry ndjson sink: OnError panicked (recovered)", "panic", v, "err", err)
		}
	}()
	s.onError(err)
}

func (s *Sink) queueReportLocked(err error) {
	if len(s.reports) >= maxQueuedReports {
		s.suppressed++
		return
	}
	s.reports = append(s.reports, err)
	s.reportsQueued++
	nudge(s.reportKick)
}

// reporter delivers queued reports to OnError, so that neither a slow
// handler nor a stuck disk holds up the other.
func (s *Sink) reporter() {
	defer close(s.reporterDone)
	for {
		select {
		case <-s.reportKick:
		case <-s.stopReporter:
			s.deliver()
			return
		}
		s.deliver()
	}
}

func (s *Sink) deliver() {
	for {
		s.mu.Lock()
		reports := s.reports
		s.reports = nil
		if s.behind > 0 {
			reports = append(reports, &DropError{N: s.behind, Path: s.path, Err: ErrWriterBehind})
			s.behind = 0
		}
		if s.rotatedAway > 0 {
			reports = append(reports, &DropError{N: s.rotatedAway, Path: s.path, Err: ErrRotatedAway})
			s.rotatedAway = 0
		}
		if s.suppressed > 0 {
			reports = append(reports, fmt.Errorf("ndjson: %d further error reports about %s were suppressed; Stats counts every drop", s.suppressed, s.path))
			s.suppressed = 0
			s.reportsQueued++
		}
		s.mu.Unlock()
		if len(reports) == 0 {
			return
		}
		for _, err := range reports {
			s.report(err)
		}
		s.mu.Lock()
		s.reportsSent += uint64(len(reports))
		s.notifyLocked()
		s.mu.Unlock()
	}
}

// Flush writes every event accepted before the call and waits until the
// failures among them have been reported. It is bounded: it returns when
// those events are written or dropped, or when ctx ends. The error joins
// the drops it saw.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	target := s.stats.Accepted
	dropped := s.stats.Dropped
	s.mu.Unlock()
	nudge(s.wake)
	if err := s.waitFor(ctx, func() bool { return s.done >= target }); err != nil {
		return err
	}
	s.mu.Lock()
	queued := s.reportsQueued
	lost, cause := s.stats.Dropped-dropped, s.lastCause
	s.mu.Unlock()
	if err := s.waitFor(ctx, func() bool { return s.reportsSent >= queued }); err != nil {
		return err
	}
	if lost > 0 {
		return &DropError{N: int(lost), Path: s.path, Err: cause}
	}
	return nil
}

// waitFor waits until cond, read under the lock, holds.
func (s *Sink) waitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		if cond() {
			s.mu.Unlock()
			return nil
		}
		ch := s.progress
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ndjson: %s: %w", s.path, context.Cause(ctx))
		}
	}
}

// Close stops accepting events, writes what was accepted, syncs and closes
// the file, bounded by ctx. Later exports are counted in Stats and
// dropped. Close is safe to call more than once; every call waits (within
// its ctx) for the same shutdown. If ctx ends first — a write stuck on a
// hung mount — Close returns, and the writer finishes and closes the file
// whenever that write returns.
func (s *Sink) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.stop)
	})
	if err := s.await(ctx, s.writerDone, "the writer is still busy"); err != nil {
		return err
	}
	s.stopOnce.Do(func() { close(s.stopReporter) })
	if err := s.await(ctx, s.reporterDone, "OnError is still busy"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeErrSeen {
		return nil
	}
	s.closeErrSeen = true
	return s.closeErr
}

func (s *Sink) await(ctx context.Context, done <-chan struct{}, what string) error {
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ndjson: closing %s: %s: %w", s.path, what, context.Cause(ctx))
	}
}

// Stats returns the sink's counters.
func (s *Sink) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

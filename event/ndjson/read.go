package ndjson

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/agentry-dev/agentry/event"
)

// MaxLineBytes is the longest line the readers decode. A longer line is
// counted as bad and skipped without being held in memory.
const MaxLineBytes = 16 << 20

// BadLine says which line could not be read as an event and why. It
// never quotes the line: a line may hold data that must not be echoed.
type BadLine struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// ScanStats describes one pass over a stream of lines.
type ScanStats struct {
	Lines  int `json:"lines"`
	Events int `json:"events"`
	// Blank counts empty or whitespace-only lines; they are not errors.
	Blank int `json:"blank,omitempty"`
	// Bad counts lines that are not events; BadLines lists the first
	// MaxBadLines of them.
	Bad      int       `json:"bad"`
	BadLines []BadLine `json:"badLines,omitempty"`
	// Unterminated is true when the stream ended in a line without its
	// newline (a write in progress, or a copy taken mid-write); that line
	// is decoded if it can be, and counted bad if it cannot.
	Unterminated bool `json:"unterminated,omitempty"`
}

// MaxBadLines bounds ScanStats.BadLines.
const MaxBadLines = 20

func (st *ScanStats) bad(line int, reason string) {
	st.Bad++
	if len(st.BadLines) < MaxBadLines {
		st.BadLines = append(st.BadLines, BadLine{Line: line, Reason: reason})
	}
}

// Scan reads NDJSON events from r and calls fn for each, in order. Lines
// that are not events are counted and skipped, never fatal; the error is
// only for a failing reader.
func Scan(r io.Reader, fn func(event.Event)) (ScanStats, error) {
	var st ScanStats
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // a line longer than the reader's buffer, being assembled
	skipping := false
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !skipping {
				long = append(long, chunk...)
				if len(long) > MaxLineBytes {
					long, skipping = nil, true
				}
			}
			continue
		}
		if len(chunk) > 0 || len(long) > 0 || skipping {
			terminated := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
			line := chunk
			if long != nil {
				long = append(long, chunk...)
				line = long
			}
			st.Lines++
			switch {
			case skipping || len(line) > MaxLineBytes:
				st.bad(st.Lines, fmt.Sprintf("longer than %d bytes", MaxLineBytes))
			default:
				if !terminated {
					st.Unterminated = true
				}
				decodeLine(&st, line, terminated, fn)
			}
			long, skipping = nil, false
		}
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, err
		}
	}
}

func decodeLine(st *ScanStats, line []byte, terminated bool, fn func(event.Event)) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		st.Blank++
		return
	}
	e, err := event.Decode(trimmed)
	if err == nil {
		st.Events++
		fn(e)
		return
	}
	reason := err.Error()
	switch {
	case bytes.IndexByte(line, 0) >= 0:
		reason = "NUL bytes (a hole left by a writer that did not append after a truncation)"
	case !terminated:
		reason = "cut short: the last line has no newline (" + reason + ")"
	}
	st.bad(st.Lines, reason)
}

// ScanFile is Scan over the file at path.
func ScanFile(path string, fn func(event.Event)) (ScanStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return ScanStats{}, err
	}
	defer f.Close()
	return Scan(f, fn)
}

// FollowOptions configure [Follow].
type FollowOptions struct {
	// Last is how many of the events already in the file to deliver before
	// following; 0 starts at the end, a negative value from the start.
	Last int
	// Poll is how often to look for new lines at the end of the file
	// (default 250ms).
	Poll time.Duration
	// OnBad hears about lines that are not events (optional).
	OnBad func(BadLine)
}

// Follow delivers the events in the file at path as they are appended,
// until ctx ends. It follows the path across a rename (the sink's
// one-generation rotation, or logrotate's create mode) by finishing the old
// file and starting the new one from its beginning, and across a
// truncation in place (logrotate's copytruncate) by starting over at the
// new beginning. When the file was rotated twice between two looks (the
// sink splitting a burst does that in one write), the generation in
// between is PATH.1 by then: Follow reads it whole before the new file.
// Generations rotated further away are not looked for. A partial last line
// waits for its newline. The file must exist when Follow starts; after a
// rotation it may briefly be missing.
func Follow(ctx context.Context, path string, opt FollowOptions, fn func(event.Event)) error {
	if opt.Poll <= 0 {
		opt.Poll = 250 * time.Millisecond
	}
	onBad := opt.OnBad
	if onBad == nil {
		onBad = func(BadLine) {}
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("ndjson: cannot follow %s: %w", path, err)
	}
	defer func() { f.Close() }()

	// The existing content is read either way; Last decides how much of it
	// is delivered.
	fl := &follower{fn: fn, onBad: onBad, keep: opt.Last, quiet: opt.Last >= 0}
	if err := fl.drain(f); err != nil {
		return err
	}
	fl.quiet = false
	fl.flushKept()

	ticker := time.NewTicker(opt.Poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		if err := fl.drain(f); err != nil {
			return err
		}
		cur, err := f.Stat()
		if err != nil {
			return err
		}
		at, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // between a rename and the new file
		case err != nil:
			return err
		case !os.SameFile(cur, at):
			// Rotated: finish the old file, then start the new one.
			if err := fl.drain(f); err != nil {
				return err
			}
			nf, err := os.Open(path)
			if err != nil {
				continue
			}
			if err := fl.between(path+".1", cur, nf); err != nil {
				nf.Close()
				return err
			}
			f.Close()
			f = nf
			fl.reset()
			if err := fl.drain(f); err != nil {
				return err
			}
		case at.Size() < fl.offset:
			// Truncated in place: start over.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			fl.reset()
			if err := fl.drain(f); err != nil {
				return err
			}
		}
	}
}

type follower struct {
	fn      func(event.Event)
	onBad   func(BadLine)
	offset  int64  // bytes consumed from the current file
	partial []byte // the start of a line still waiting for its newline
	tooLong bool   // the line being read is past MaxLineBytes: skip it
	line    int
	// Delivering the last few events of a file's existing content.
	quiet bool
	keep  int
	kept  []event.Event
	buf   []byte
}

// between reads the file at mid whole when it is the generation written
// after old and before next: neither of them, and last written no earlier
// than old was. (A PATH.1 left from before old began is older than old's
// last write, and is not read again.)
func (fl *follower) between(mid string, old os.FileInfo, next *os.File) error {
	m, err := os.Open(mid)
	if err != nil {
		return nil // no generation in between
	}
	defer m.Close()
	mfi, err := m.Stat()
	if err != nil {
		return nil
	}
	nfi, err := next.Stat()
	if err != nil {
		return err
	}
	if os.SameFile(mfi, old) || os.SameFile(mfi, nfi) || mfi.ModTime().Before(old.ModTime()) {
		return nil
	}
	fl.reset()
	return fl.drain(m)
}

func (fl *follower) reset() {
	fl.offset, fl.partial, fl.tooLong, fl.line = 0, nil, false, 0
}

// drain reads what is there and delivers every complete line.
func (fl *follower) drain(f *os.File) error {
	if fl.buf == nil {
		fl.buf = make([]byte, 64<<10)
	}
	for {
		n, err := f.Read(fl.buf)
		if n > 0 {
			fl.offset += int64(n)
			fl.consume(fl.buf[:n])
		}
		if err == io.EOF || n == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (fl *follower) consume(data []byte) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if fl.tooLong || len(fl.partial)+len(data) > MaxLineBytes {
				fl.partial, fl.tooLong = nil, true
			} else {
				fl.partial = append(fl.partial, data...)
			}
			return
		}
		line := data[:i+1]
		data = data[i+1:]
		fl.line++
		if fl.tooLong || len(fl.partial)+len(line) > MaxLineBytes {
			fl.partial, fl.tooLong = nil, false
			fl.onBad(BadLine{Line: fl.line, Reason: fmt.Sprintf("longer than %d bytes", MaxLineBytes)})
			continue
		}
		if len(fl.partial) > 0 {
			line = append(fl.partial, line...)
			fl.partial = nil
		}
		var st ScanStats
		decodeLine(&st, line, true, fl.deliver)
		for _, b := range st.BadLines {
			fl.onBad(BadLine{Line: fl.line, Reason: b.Reason})
		}
	}
}

func (fl *follower) deliver(e event.Event) {
	if !fl.quiet {
		fl.fn(e)
		return
	}
	if fl.keep < 0 {
		fl.fn(e)
		return
	}
	if fl.keep == 0 {
		return
	}
	if len(fl.kept) == fl.keep {
		fl.kept = append(fl.kept[:0], fl.kept[1:]...)
	}
	fl.kept = append(fl.kept, e)
}

func (fl *follower) flushKept() {
	for _, e := range fl.kept {
		fl.fn(e)
	}
	fl.kept = nil
}

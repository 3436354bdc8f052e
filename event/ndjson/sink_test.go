package ndjson_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/ndjson"
	"github.com/agentry-dev/agentry/tool"
)

// errs records what OnError hears.
type errs struct {
	mu   sync.Mutex
	list []error
}

func (r *errs) add(err error) { r.mu.Lock(); r.list = append(r.list, err); r.mu.Unlock() }

func (r *errs) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.list...)
}

func (r *errs) text() string {
	var b strings.Builder
	for _, err := range r.all() {
		b.WriteString(err.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

func toolEnd(seq uint64, name string) event.Event {
	return event.Event{
		Type:    tool.TypeCallEnd,
		Payload: &tool.CallEnd{Tool: name, ToolCallID: fmt.Sprintf("call-%d", seq), DurationMs: float64(seq) / 4},
		Meta:    event.Meta{RunID: "run-1", Seq: seq, Time: time.Date(2026, 11, 30, 9, 0, 0, int(seq), time.UTC)},
	}
}

// fixed is an event whose line length does not depend on seq (for seq
// of three digits).
func fixed(seq uint64) event.Event {
	return event.Event{
		Type:    tool.TypeCallEnd,
		Payload: &tool.CallEnd{Tool: "t", ToolCallID: "call", DurationMs: 1},
		Meta:    event.Meta{RunID: "run-1", Seq: seq, Time: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)},
	}
}

// lines returns the file's lines and fails on a last line without its
// newline.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	if b[len(b)-1] != '\n' {
		t.Fatalf("%s ends in a partial line: %q", path, b[max(0, len(b)-80):])
	}
	return strings.Split(string(b[:len(b)-1]), "\n")
}

// decoded reads the file and fails unless every line is a whole event.
func decoded(t *testing.T, path string) []event.Event {
	t.Helper()
	var out []event.Event
	for i, l := range lines(t, path) {
		e, err := event.Decode([]byte(l))
		if err != nil {
			t.Fatalf("%s line %d is not a whole event (%v): %q", path, i+1, err, l)
		}
		out = append(out, e)
	}
	return out
}

func open(t *testing.T, path string, opt ndjson.Options) *ndjson.Sink {
	t.Helper()
	s, err := ndjson.Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestOpenClaimsTheFileAndItsDirectory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a", "b", "events.ndjson")
	s := open(t, path, ndjson.Options{})
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 0 || !fi.Mode().IsRegular() {
		t.Fatalf("after Open: %v, %v", fi, err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		t.Fatalf("the file is open to everyone: %v", fi.Mode())
	}
	if s.Path() != path {
		t.Fatalf("Path = %q", s.Path())
	}
}

func TestOpenRefusesUnusablePaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want ndjson.Problem
	}{
		{"a directory", dir, ndjson.ProblemDirectory},
		{"under a file", filepath.Join(file, "events.ndjson"), ndjson.ProblemNotDir},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ndjson.Open(tc.path, ndjson.Options{})
			if err == nil {
				_ = s.Close(context.Background())
				t.Fatal("Open succeeded")
			}
			assertRefusal(t, err, tc.path, tc.want)
		})
	}
	for _, opt := range []ndjson.Options{{MaxBytes: -1}, {MaxBufferEvents: -1}, {MaxBufferBytes: -5}, {MaxQueuedBytes: -1}} {
		if _, err := ndjson.Open(filepath.Join(dir, "x"), opt); err == nil {
			t.Errorf("Open accepted %+v", opt)
		}
	}
	if _, err := ndjson.Open(" ", ndjson.Options{}); err == nil {
		t.Error("Open accepted an empty path")
	}
}

func assertRefusal(t *testing.T, err error, path string, want ndjson.Problem) {
	t.Helper()
	var oe *ndjson.OpenError
	if !errors.As(err, &oe) || oe.Problem != want || oe.Path != path {
		t.Fatalf("err = %#v, want an *OpenError with %q", err, want)
	}
	for _, part := range []string{path, string(want), "refuses to start rather than drop every event"} {
		if !strings.Contains(err.Error(), part) {
			t.Fatalf("%q does not say %q", err, part)
		}
	}
}

func TestExportNeverTouchesTheDiskFlushWritesInOrder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	s := open(t, path, ndjson.Options{FlushInterval: -1})
	var want bytes.Buffer
	for i := range uint64(5) {
		e := toolEnd(i+1, "run_code")
		s.Export(e)
		b, _ := json.Marshal(e)
		want.Write(b)
		want.WriteByte('\n')
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Fatalf("Export wrote %d bytes; it must only buffer", fi.Size())
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != want.String() {
		t.Fatalf("file:\n%s\nwant (json.Marshal of each event):\n%s", got, want.String())
	}
	if st := s.Stats(); st.Accepted != 5 || st.Written != 5 || st.Bytes != uint64(want.Len()) || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSizeTriggers(t *testing.T) {
	t.Parallel()
	size := func(path string) int64 { fi, _ := os.Stat(path); return fi.Size() }
	t.Run("events", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.ndjson")
			s := open(t, path, ndjson.Options{MaxBufferEvents: 3, FlushInterval: -1})
			s.Export(toolEnd(1, "a"))
			s.Export(toolEnd(2, "a"))
			synctest.Wait()
			if size(path) != 0 {
				t.Fatal("two events were written; the trigger is three")
			}
			s.Export(toolEnd(3, "a"))
			synctest.Wait()
			if n := len(decoded(t, path)); n != 3 {
				t.Fatalf("%d lines after the third event, want 3", n)
			}
		})
	})
	t.Run("bytes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.ndjson")
			s := open(t, path, ndjson.Options{MaxBufferBytes: 600, FlushInterval: -1})
			line, _ := json.Marshal(toolEnd(1, "a"))
			n := 600/(len(line)+1) + 1 // the first count that reaches 600 bytes
			for i := range n - 1 {
				s.Export(toolEnd(uint64(i+1), "a"))
			}
			synctest.Wait()
			if size(path) != 0 {
				t.Fatalf("%d events under 600 bytes were written", n-1)
			}
			s.Export(toolEnd(uint64(n), "a"))
			synctest.Wait()
			if got := len(decoded(t, path)); got != n {
				t.Fatalf("%d lines, want %d", got, n)
			}
		})
	})
}

func TestTimerTrigger(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		def := open(t, filepath.Join(dir, "default.ndjson"), ndjson.Options{}) // 1s
		off := open(t, filepath.Join(dir, "off.ndjson"), ndjson.Options{FlushInterval: -1})
		def.Export(toolEnd(1, "a"))
		off.Export(toolEnd(1, "a"))
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if n := len(lines(t, def.Path())); n != 0 {
			t.Fatal("written before the interval")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := len(decoded(t, def.Path())); n != 1 {
			t.Fatalf("%d lines one second after the export, want 1", n)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(lines(t, off.Path())); n != 0 {
			t.Fatal("a sink with the timer off wrote without a trigger")
		}
	})
}

func TestConcurrentExportersNeverInterleave(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	s := open(t, path, ndjson.Options{MaxBufferEvents: 7, MaxBufferBytes: 4 << 10, MaxQueuedBytes: 64 << 20})
	const writers, each = 8, 400
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				// Sizes vary from a few bytes to larger than the buffer.
				name := fmt.Sprintf("w%d-%s", w, strings.Repeat("x", (i*37)%(9<<10)))
				s.Export(toolEnd(uint64(i), name))
			}
		})
	}
	wg.Wait()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	evs := decoded(t, path)
	for _, e := range evs {
		p := e.Payload.(*tool.CallEnd)
		w, _, _ := strings.Cut(p.Tool, "-")
		seq := int(e.Meta.Seq)
		if prev, ok := last[w]; ok && seq <= prev {
			t.Fatalf("writer %s: seq %d after %d; one writer's events must keep their order", w, seq, prev)
		}
		last[w] = seq
	}
	if len(evs) != writers*each {
		t.Fatalf("%d events on disk, want %d", len(evs), writers*each)
	}
}

func TestOneWriterKeepsDispatchOrder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	s := open(t, path, ndjson.Options{MaxBufferEvents: 3})
	for i := range uint64(1000) {
		s.Export(toolEnd(i, "t"))
		if i%97 == 0 {
			_ = s.Flush(context.Background())
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, e := range decoded(t, path) {
		if e.Meta.Seq != uint64(i) {
			t.Fatalf("line %d has seq %d", i, e.Meta.Seq)
		}
	}
}

// panicky fails the way a broken payload type can.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("payload on fire") }

func TestUnserialisableEventsAreReportedAndSkipped(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	var heard errs
	s := open(t, path, ndjson.Options{OnError: heard.add})
	bad := []event.Event{
		{Type: tool.TypeCallEnd, Payload: &tool.CallEnd{Tool: "t", DurationMs: math.Inf(1)}}, // not a JSON number
		{Type: "vendor.channel", Payload: make(chan int)},
		{Type: "vendor.panics", Payload: panicky{}},
		{Type: "vendor.old", Meta: event.Meta{Time: time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	s.Export(toolEnd(1, "before"))
	for _, e := range bad {
		s.Export(e) // must not panic
	}
	// Reported on the exporting goroutine, before Export returns.
	if got := heard.all(); len(got) != len(bad) {
		t.Fatalf("OnError heard %d reports, want %d: %v", len(got), len(bad), got)
	}
	for i, want := range []string{"agentry.tool.end", "vendor.channel", "vendor.panics", "vendor.old"} {
		if msg := heard.all()[i].Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "could not be serialised") {
			t.Errorf("report %d = %q, want it to name %s", i, msg, want)
		}
	}
	s.Export(toolEnd(2, "after"))
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if evs := decoded(t, path); len(evs) != 2 {
		t.Fatalf("%d events on disk, want the 2 good ones", len(evs))
	}
	if st := s.Stats(); st.Unserialisable != 4 || st.Written != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPanickingOnErrorIsContained(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "e.ndjson"), ndjson.Options{OnError: func(error) { panic("handler on fire") }})
	s.Export(event.Event{Type: "x", Payload: make(chan int)}) // must not panic
	s.Export(toolEnd(1, "fine"))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCloseStopsAcceptingDrainsAndIsSafeTwice(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	var heard errs
	s, err := ndjson.Open(path, ndjson.Options{OnError: heard.add, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(10) {
		s.Export(toolEnd(i, "t"))
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(decoded(t, path)); n != 10 {
		t.Fatalf("Close left %d of 10 events on disk", n)
	}
	for i := range uint64(3) {
		s.Export(toolEnd(100+i, "late"))
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("Flush after Close: %v", err)
	}
	if n := len(decoded(t, path)); n != 10 {
		t.Fatalf("%d lines: events after Close were written", n)
	}
	st := s.Stats()
	if st.AfterClose != 3 || st.Written != 10 {
		t.Fatalf("stats %+v, want 3 exports after Close counted", st)
	}
	got := heard.all()
	if len(got) != 1 || !errors.Is(got[0], ndjson.ErrClosed) || !strings.Contains(got[0].Error(), "events dropped writing to "+path) {
		t.Fatalf("OnError heard %v, want one report of events after Close", got)
	}
}

func TestRestartAppendsAndCountsTheRealSize(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	first := open(t, path, ndjson.Options{})
	for i := range uint64(4) {
		first.Export(toolEnd(i, "first"))
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	// The second life's ceiling fits what is there plus a little: only a
	// sink that counted the existing bytes rotates before its first batch.
	second := open(t, path, ndjson.Options{MaxBytes: fi.Size() + 10})
	second.Export(toolEnd(4, "second"))
	if err := second.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	old, cur := decoded(t, path+".1"), decoded(t, path)
	if len(old) != 4 || len(cur) != 1 || cur[0].Meta.Seq != 4 {
		t.Fatalf(".1 has %d events and the file %d; want the first life's 4 rotated away", len(old), len(cur))
	}

	// Without a ceiling a restart simply appends.
	third := open(t, path, ndjson.Options{})
	third.Export(toolEnd(5, "third"))
	if err := third.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cur := decoded(t, path); len(cur) != 2 || cur[1].Meta.Seq != 5 {
		t.Fatalf("after an appending restart the file holds %d events", len(cur))
	}
}

func TestRotationKeepsExactlyOneGeneration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	line, _ := json.Marshal(fixed(100))
	ceiling := int64(4 * (len(line) + 1)) // four events per file
	s := open(t, path, ndjson.Options{MaxBytes: ceiling, MaxBufferEvents: 1, FlushInterval: -1})
	for i := range uint64(30) {
		s.Export(fixed(100 + i))
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(names) != 2 || names[0] != path || names[1] != path+".1" {
		t.Fatalf("files %v, want exactly the file and one .1", names)
	}
	old, cur := decoded(t, path+".1"), decoded(t, path)
	all := append(old, cur...)
	if len(old) != 4 || len(cur) != 2 {
		t.Fatalf(".1 has %d events, the file %d; want 4 and 2", len(old), len(cur))
	}
	for i, e := range all {
		if e.Meta.Seq != uint64(124+i) {
			t.Fatalf("event %d has seq %d: the two generations are not the newest events in order", i, e.Meta.Seq)
		}
	}
	for _, p := range []string{path, path + ".1"} {
		if fi, _ := os.Stat(p); fi.Size() > ceiling {
			t.Fatalf("%s is %d bytes, over the %d ceiling", p, fi.Size(), ceiling)
		}
	}
	if st := s.Stats(); st.Rotations != 7 {
		t.Fatalf("%d rotations, want 7", st.Rotations)
	}
}

func TestWithoutMaxBytesNothingIsRenamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	s := open(t, path, ndjson.Options{MaxBufferEvents: 1})
	for i := range uint64(2000) {
		s.Export(toolEnd(i, strings.Repeat("y", 500)))
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Fatalf("files %v", names)
	}
	if n := len(decoded(t, path)); n != 2000 {
		t.Fatalf("%d events", n)
	}
}

func TestTheSinkFollowsItsPathWhenTheFileIsMoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	s := open(t, path, ndjson.Options{FlushInterval: -1})
	s.Export(toolEnd(1, "t"))
	_ = s.Flush(context.Background())
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	s.Export(toolEnd(2, "t"))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a, b := decoded(t, path+".moved"), decoded(t, path); len(a) != 1 || len(b) != 1 || b[0].Meta.Seq != 2 {
		t.Fatalf("moved file %d events, new file %d; want the next batch in a fresh file at the path", len(a), len(b))
	}
}

func TestTheDirectoryReplacedMidRunReportsDrops(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "logs")
	path := filepath.Join(dir, "events.ndjson")
	var heard errs
	s := open(t, path, ndjson.Options{OnError: heard.add, FlushInterval: -1})
	s.Export(toolEnd(1, "t"))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Someone replaces the directory with a file.
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(3) {
		s.Export(toolEnd(2+i, "t"))
	}
	err := s.Flush(context.Background())
	var de *ndjson.DropError
	if !errors.As(err, &de) || de.N != 3 {
		t.Fatalf("Flush = %v, want 3 events dropped", err)
	}
	if want := "3 events dropped writing to " + path; !strings.Contains(heard.text(), want) || !strings.Contains(heard.text(), "not a directory") {
		t.Fatalf("OnError heard %q, want %q and the cause", heard.text(), want)
	}
	// Put it back: the next batch finds the path again.
	_ = os.Remove(dir)
	if err := os.Rename(dir+".old", dir); err != nil {
		t.Fatal(err)
	}
	s.Export(toolEnd(9, "t"))
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs := decoded(t, path)
	if len(evs) != 2 || evs[0].Meta.Seq != 1 || evs[1].Meta.Seq != 9 {
		t.Fatalf("events %v", evs)
	}
	if st := s.Stats(); st.Dropped != 3 || st.Written != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTypesFilter(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	s := open(t, path, ndjson.Options{Types: []event.Type{event.TypeTurnEnd, "agentry.tools.*"}})
	for _, typ := range event.Types() {
		s.Export(event.Event{Type: typ, Payload: event.NewPayload(typ)})
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range decoded(t, path) {
		got = append(got, string(e.Type))
	}
	want := "agentry.agent.turn_end agentry.tools.code_run agentry.tools.session_capacity agentry.tools.session_close_failed agentry.tools.session_closed agentry.tools.session_reused agentry.tools.session_started" // event.Types is sorted
	if strings.Join(got, " ") != want {
		t.Fatalf("kept %v", got)
	}
}

// The sink works as a Bus sink, with the bus's numbering and stamping.
func TestThroughABus(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	s := open(t, path, ndjson.Options{})
	bus := event.NewBus(event.BusOptions{})
	if err := bus.Add(s, event.Filter{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		bus.Export(event.Event{Type: event.TypeTurnStart, Payload: &event.TurnStart{}})
	}
	if err := bus.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs := decoded(t, path)
	if len(evs) != 3 || evs[2].Meta.Seq != 3 || evs[0].Meta.Time.IsZero() {
		t.Fatalf("events %+v", evs)
	}
}

func scanLines(t *testing.T, data []byte) int {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if !json.Valid(sc.Bytes()) {
			t.Fatalf("line %d is not whole JSON: %q", n+1, sc.Bytes())
		}
		n++
	}
	return n
}

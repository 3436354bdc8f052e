package ndjson_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/ndjson"
)

func line(e event.Event) string {
	b, _ := json.Marshal(e)
	return string(b) + "\n"
}

func TestScanCountsBadLinesAndKeepsGoing(t *testing.T) {
	t.Parallel()
	input := line(toolEnd(1, "a")) +
		"not json\n" +
		"\n" +
		"   \n" +
		"\x00\x00\x00" + line(toolEnd(2, "a")) +
		`{"payload":{}}` + "\n" +
		`{"type":"agentry.tool.end","payload":{"durationMs":"slow"}}` + "\n" +
		"      " + strings.TrimSuffix(line(toolEnd(3, "a")), "\n") + "      \n" + // padding is fine
		`{"type":"vendor.thing","payload":[1,2]}` + "\n" +
		strings.Repeat("x", ndjson.MaxLineBytes+10) + "\n" +
		line(toolEnd(4, "a")) +
		`{"type":"agentry.tool.end","payl`
	var seqs []uint64
	st, err := ndjson.Scan(strings.NewReader(input), func(e event.Event) { seqs = append(seqs, e.Meta.Seq) })
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 4 || seqs[0] != 1 || seqs[1] != 3 || seqs[2] != 0 || seqs[3] != 4 {
		t.Fatalf("events %v, want 1, 3, the vendor event and 4", seqs)
	}
	if st.Lines != 12 || st.Events != 4 || st.Blank != 2 || st.Bad != 6 || !st.Unterminated {
		t.Fatalf("stats %+v", st)
	}
	wantBad := []int{2, 5, 6, 7, 10, 12}
	for i, b := range st.BadLines {
		if b.Line != wantBad[i] {
			t.Fatalf("bad lines %+v, want lines %v", st.BadLines, wantBad)
		}
	}
	reasons := ""
	for _, b := range st.BadLines {
		reasons += b.Reason + "\n"
		if strings.Contains(b.Reason, "xxxx") || strings.Contains(b.Reason, "not json") {
			t.Fatalf("a reason quotes the line: %q", b.Reason)
		}
	}
	for _, want := range []string{"NUL bytes", "longer than", "cut short"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("no reason says %q:\n%s", want, reasons)
		}
	}
}

// FuzzScan: any input is counted line by line and never crashes the
// reader.
func FuzzScan(f *testing.F) {
	f.Add([]byte(line(toolEnd(1, "a")) + "junk\n"))
	f.Add([]byte("\x00\n\n{\"type\":\"agentry.tools.session_closed\",\"payload\":{\"heldMs\":1e999}}"))
	f.Add([]byte(`{"type":"agentry.agent.turn_end","payload":null,"meta":{"seq":-1}}` + "\n"))
	f.Add([]byte(`{"type":"x","meta":{"time":"not a time"}}` + "\n   \r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		events := 0
		st, err := ndjson.Scan(bytes.NewReader(data), func(event.Event) { events++ })
		if err != nil {
			t.Fatal(err)
		}
		if st.Events != events || st.Lines != st.Events+st.Blank+st.Bad {
			t.Fatalf("stats %+v do not add up (%d events delivered)", st, events)
		}
		if want := bytes.Count(data, []byte("\n")); st.Lines != want && st.Lines != want+1 {
			t.Fatalf("%d lines counted in input with %d newlines", st.Lines, want)
		}
		if len(st.BadLines) > ndjson.MaxBadLines {
			t.Fatal("BadLines is unbounded")
		}
	})
}

// follow runs Follow in the background and hands its events to the test.
func follow(t *testing.T, path string, opt ndjson.FollowOptions) (next func() event.Event, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan event.Event, 1024)
	done := make(chan error, 1)
	if opt.Poll == 0 {
		opt.Poll = 2 * time.Millisecond
	}
	go func() { done <- ndjson.Follow(ctx, path, opt, func(e event.Event) { got <- e }) }()
	next = func() event.Event {
		t.Helper()
		select {
		case e := <-got:
			return e
		case err := <-done:
			t.Fatalf("Follow ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("Follow delivered nothing for 10s")
		}
		return event.Event{}
	}
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Follow: %v", err)
		}
		select {
		case e := <-got:
			t.Fatalf("an extra event %+v", e)
		default:
		}
	}
	return next, stop
}

func TestFollowAcrossTheSinksRotation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	s := open(t, path, ndjson.Options{MaxBytes: 600, FlushInterval: -1})
	for i := range uint64(3) {
		s.Export(fixed(100 + i))
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	next, stop := follow(t, path, ndjson.FollowOptions{Last: 2})
	for _, want := range []uint64{101, 102} {
		if e := next(); e.Meta.Seq != want {
			t.Fatalf("got seq %d, want %d", e.Meta.Seq, want)
		}
	}
	for i := range uint64(20) { // several rotations
		s.Export(fixed(103 + i))
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if e := next(); e.Meta.Seq != 103+i {
			t.Fatalf("got seq %d, want %d", e.Meta.Seq, 103+i)
		}
	}
	if s.Stats().Rotations < 5 {
		t.Fatalf("only %d rotations: the test did not test rotation", s.Stats().Rotations)
	}
	stop()
}

// One burst larger than two generations renames the file twice in one
// write: the generation in between is PATH.1 before the follower looks
// again. It is read, in order, and nothing is delivered twice.
func TestFollowReadsTheGenerationBetweenTwoRotations(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	l := fixedLine(t)
	s := open(t, path, ndjson.Options{MaxBytes: int64(10 * l), MaxBufferEvents: 1000, FlushInterval: -1})
	for i := range uint64(3) {
		s.Export(fixed(100 + i))
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	next, stop := follow(t, path, ndjson.FollowOptions{Last: -1})
	for i := range uint64(3) {
		if e := next(); e.Meta.Seq != 100+i {
			t.Fatalf("got seq %d, want %d", e.Meta.Seq, 100+i)
		}
	}
	// 3 + 35 lines of ten per file: the burst's first 17 are rotated away,
	// 120–129 end in .1 and 130–137 in the file.
	for i := range uint64(35) {
		s.Export(fixed(103 + i))
	}
	if err := s.Flush(context.Background()); !errors.Is(err, ndjson.ErrRotatedAway) {
		t.Fatalf("Flush = %v, want the burst's oldest lines rotated away", err)
	}
	for want := uint64(120); want < 138; want++ {
		if e := next(); e.Meta.Seq != want {
			t.Fatalf("got seq %d, want %d: every line on disk, in order", e.Meta.Seq, want)
		}
	}
	stop()
}

// A PATH.1 older than the followed file is not read again when the file
// is deleted and a new one takes its place.
func TestFollowDoesNotReplayAnOlderGeneration(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	if err := os.WriteFile(path+".1", []byte(line(fixed(100))), 0o600); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path+".1", hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(line(fixed(101))), 0o600); err != nil {
		t.Fatal(err)
	}
	next, stop := follow(t, path, ndjson.FollowOptions{Last: -1})
	if e := next(); e.Meta.Seq != 101 {
		t.Fatalf("got seq %d, want 101", e.Meta.Seq)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(line(fixed(102))), 0o600); err != nil {
		t.Fatal(err)
	}
	if e := next(); e.Meta.Seq != 102 {
		t.Fatalf("got seq %d, want 102: the older .1 must not be replayed", e.Meta.Seq)
	}
	stop()
}

func TestFollowAcrossATruncationAndPartialLines(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	var old strings.Builder
	for i := range uint64(10) {
		old.WriteString(line(fixed(100 + i)))
	}
	if err := os.WriteFile(path, []byte(old.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	next, stop := follow(t, path, ndjson.FollowOptions{Last: -1})
	for i := range uint64(10) {
		if e := next(); e.Meta.Seq != 100+i {
			t.Fatalf("got %d", e.Meta.Seq)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A line written in two pieces is delivered once, whole.
	l := line(fixed(200))
	_, _ = f.WriteString(l[:40])
	_, _ = f.WriteString(l[40:])
	if e := next(); e.Meta.Seq != 200 {
		t.Fatalf("got %d", e.Meta.Seq)
	}
	// copytruncate empties the file; the writer carries on at the start.
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(line(fixed(201)))
	if e := next(); e.Meta.Seq != 201 {
		t.Fatalf("after the truncation got %d, want 201", e.Meta.Seq)
	}
	stop()
}

func TestFollowFromTheStartAndAMissingFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := ndjson.Follow(context.Background(), filepath.Join(dir, "none"), ndjson.FollowOptions{}, func(event.Event) {}); err == nil {
		t.Fatal("following a missing file succeeded")
	}
	path := filepath.Join(dir, "events.ndjson")
	_ = os.WriteFile(path, []byte(line(fixed(100))+"junk\n"+line(fixed(101))), 0o600)
	var bad []ndjson.BadLine
	badc := make(chan ndjson.BadLine, 1)
	next, stop := follow(t, path, ndjson.FollowOptions{Last: -1, OnBad: func(b ndjson.BadLine) { badc <- b }})
	if a, b := next(), next(); a.Meta.Seq != 100 || b.Meta.Seq != 101 {
		t.Fatalf("got %d, %d", a.Meta.Seq, b.Meta.Seq)
	}
	bad = append(bad, <-badc)
	if bad[0].Line != 2 {
		t.Fatalf("bad %+v", bad)
	}
	stop()
}

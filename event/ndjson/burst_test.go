package ndjson_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/ndjson"
)

// lineAtATime is the rotation rule written the slow, obvious way: each
// line in turn, rotating before a line that would take a non-empty file
// past ceiling. It returns the seqs the file and PATH.1 hold at the end
// and how many of the given lines are in neither. before is the size of
// the file before the first line (its lines are not in the result).
func lineAtATime(sizes []int, seqs []uint64, before, ceiling int64) (cur, old []uint64, gone int) {
	var gens [][]uint64
	var open []uint64
	size := before
	for i, n := range sizes {
		if size > 0 && size+int64(n) > ceiling {
			gens = append(gens, open)
			open, size = nil, 0
		}
		open = append(open, seqs[i])
		size += int64(n)
	}
	gens = append(gens, open)
	cur = gens[len(gens)-1]
	if len(gens) > 1 {
		old = gens[len(gens)-2]
	}
	return cur, old, len(sizes) - len(cur) - len(old)
}

func seqsOf(evs []event.Event) []uint64 {
	out := make([]uint64, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Meta.Seq)
	}
	return out
}

// decodedOrNone is decoded for a file that may not exist.
func decodedOrNone(t *testing.T, path string) []event.Event {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return decoded(t, path)
}

// assertBound fails unless the file is within ceiling, or holds one line.
func assertBound(t *testing.T, path string, ceiling int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > ceiling {
		if n := len(lines(t, path)); n != 1 {
			t.Fatalf("%s is %d bytes in %d lines: past MaxBytes %d by more than one line", filepath.Base(path), fi.Size(), n, ceiling)
		}
	}
}

// rotatedAway sums the rotated-away drops OnError heard, and fails on any
// other report.
func rotatedAway(t *testing.T, heard *errs, path string) int {
	t.Helper()
	n := 0
	for _, err := range heard.all() {
		var de *ndjson.DropError
		if !errors.As(err, &de) || !errors.Is(err, ndjson.ErrRotatedAway) {
			t.Fatalf("OnError heard %v, want only rotated-away drops", err)
		}
		for _, part := range []string{" events dropped writing to " + path + ": ", "larger than two generations of MaxBytes", "raise MaxBytes"} {
			if !strings.Contains(err.Error(), part) {
				t.Fatalf("report %q does not say %q", err, part)
			}
		}
		n += de.N
	}
	return n
}

// The repro: MaxBytes 4096 and a burst of 2,000 events exported
// as fast as one goroutine can, so that batches queue up while the writer
// is busy. On every run the file and PATH.1 stay within the ceiling, hold
// exactly what line-at-a-time rotation would leave (however the burst was
// batched), and every event is either written or counted and reported as
// rotated away.
func TestABurstStaysWithinMaxBytes(t *testing.T) {
	t.Parallel()
	const ceiling, burst = 4096, 2000
	evs := make([]event.Event, burst)
	sizes := make([]int, burst)
	seqs := make([]uint64, burst)
	for i := range evs {
		evs[i] = toolEnd(uint64(i), "run_code")
		b, _ := json.Marshal(evs[i])
		sizes[i], seqs[i] = len(b)+1, uint64(i)
	}
	wantCur, wantOld, _ := lineAtATime(sizes, seqs, 0, ceiling)
	for run := range 10 {
		path := filepath.Join(t.TempDir(), "events.ndjson")
		var heard errs
		// No timer: every batch but the last holds at least the 100 events
		// of the size trigger (≈ 19 KB), more than two generations.
		s, err := ndjson.Open(path, ndjson.Options{MaxBytes: ceiling, FlushInterval: -1, OnError: heard.add})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			s.Export(e)
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		assertBound(t, path, ceiling)
		assertBound(t, path+".1", ceiling)
		cur, old := seqsOf(decoded(t, path)), seqsOf(decodedOrNone(t, path+".1"))
		if !slices.Equal(cur, wantCur) || !slices.Equal(old, wantOld) {
			t.Fatalf("run %d: the file holds seqs %v and .1 %v; line-at-a-time rotation leaves %v and %v", run, cur, old, wantCur, wantOld)
		}
		st := s.Stats()
		if st.Accepted != burst || st.Written+st.Dropped != burst || st.Dropped != st.RotatedAway || st.RotatedAway == 0 {
			t.Fatalf("run %d: stats %+v; want every event written or rotated away, and some rotated away", run, st)
		}
		if got := rotatedAway(t, &heard, path); uint64(got) != st.RotatedAway {
			t.Fatalf("run %d: OnError heard %d events rotated away, Stats counts %d", run, got, st.RotatedAway)
		}
		t.Logf("run %d: file %d and .1 %d events; %d written, %d rotated away unwritten, %d renames",
			run, len(cur), len(old), st.Written, st.RotatedAway, st.Rotations)
	}
}

// One batch larger than two generations: what is lost is exact, counted,
// reported through OnError and returned by Flush, as a typed error.
func TestABurstInOneBatchLosesItsOldestLinesCountedAndReported(t *testing.T) {
	t.Parallel()
	const ceiling, burst = 4096, 2000
	path := filepath.Join(t.TempDir(), "events.ndjson")
	var heard errs
	s := open(t, path, ndjson.Options{MaxBytes: ceiling, FlushInterval: -1, OnError: heard.add,
		MaxBufferEvents: 1 << 20, MaxBufferBytes: 64 << 20, MaxQueuedBytes: 128 << 20})
	sizes := make([]int, burst)
	seqs := make([]uint64, burst)
	for i := range burst {
		e := toolEnd(uint64(i), "run_code")
		b, _ := json.Marshal(e)
		sizes[i], seqs[i] = len(b)+1, uint64(i)
		s.Export(e)
	}
	wantCur, wantOld, wantGone := lineAtATime(sizes, seqs, 0, ceiling)
	err := s.Flush(context.Background())
	var de *ndjson.DropError
	if !errors.As(err, &de) || !errors.Is(err, ndjson.ErrRotatedAway) || de.N != wantGone || de.Path != path {
		t.Fatalf("Flush = %v, want %d events rotated away from %s", err, wantGone, path)
	}
	cur, old := seqsOf(decoded(t, path)), seqsOf(decoded(t, path+".1"))
	if !slices.Equal(cur, wantCur) || !slices.Equal(old, wantOld) {
		t.Fatalf("the file holds %v and .1 %v, want %v and %v", cur, old, wantCur, wantOld)
	}
	if old[0] != uint64(wantGone) || cur[len(cur)-1] != burst-1 {
		t.Fatal("the lines kept are not the newest")
	}
	st := s.Stats()
	want := ndjson.Stats{Accepted: burst, Written: uint64(len(cur) + len(old)), Dropped: uint64(wantGone),
		RotatedAway: uint64(wantGone), Rotations: 1, Bytes: st.Bytes}
	if st != want {
		t.Fatalf("stats %+v, want %+v (one rename: the file was empty before the burst)", st, want)
	}
	if fi1, fi := mustStat(t, path+".1"), mustStat(t, path); st.Bytes != uint64(fi1.Size()+fi.Size()) {
		t.Fatalf("Stats.Bytes %d, but the two files hold %d: rotated-away lines must not be written", st.Bytes, fi1.Size()+fi.Size())
	}
	if got := rotatedAway(t, &heard, path); got != wantGone || len(heard.all()) != 1 {
		t.Fatalf("OnError heard %v, want one report of %d", heard.all(), wantGone)
	}
}

func mustStat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// fixedLine is the length of a fixed(seq) line for three-digit seqs.
func fixedLine(t *testing.T) int {
	t.Helper()
	b, err := json.Marshal(fixed(100))
	if err != nil {
		t.Fatal(err)
	}
	return len(b) + 1
}

// A burst that fits in two generations loses nothing, however it is
// batched and whatever the file held before.
func TestNothingIsLostWithinTwoGenerations(t *testing.T) {
	t.Parallel()
	l := fixedLine(t)
	ceiling := int64(10 * l) // ten lines per file
	tests := []struct {
		name             string
		before, burst    int // lines in the file before; lines in the burst
		batch            int // MaxBufferEvents
		wantOld, wantCur int
	}{
		{"twenty lines in one batch", 0, 20, 1000, 10, 10},
		{"twenty lines in batches of three", 0, 20, 3, 10, 10},
		{"twenty lines one by one", 0, 20, 1, 10, 10},
		{"three lines before, seventeen in one batch", 3, 17, 1000, 10, 10},
		{"three lines before, seventeen in batches of four", 3, 17, 4, 10, 10},
		{"ten lines before, ten in one batch", 10, 10, 1000, 10, 10},
		{"nine lines in one batch", 0, 9, 1000, 0, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "events.ndjson")
			var heard errs
			s := open(t, path, ndjson.Options{MaxBytes: ceiling, MaxBufferEvents: tc.batch, FlushInterval: -1, OnError: heard.add})
			seq := uint64(100)
			for range tc.before {
				s.Export(fixed(seq))
				seq++
			}
			if err := s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			for range tc.burst {
				s.Export(fixed(seq))
				seq++
			}
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			cur, old := seqsOf(decoded(t, path)), seqsOf(decodedOrNone(t, path+".1"))
			if len(old) != tc.wantOld || len(cur) != tc.wantCur {
				t.Fatalf(".1 has %d events and the file %d, want %d and %d", len(old), len(cur), tc.wantOld, tc.wantCur)
			}
			if all := append(old, cur...); !slices.Equal(all, seqRange(seq-uint64(len(all)), seq)) {
				t.Fatalf("the two generations hold %v, not the newest events in order", all)
			}
			if st := s.Stats(); st.Dropped != 0 || st.Written != uint64(tc.before+tc.burst) {
				t.Fatalf("stats %+v: nothing may be lost within two generations", st)
			}
			if len(heard.all()) != 0 {
				t.Fatalf("OnError heard %v", heard.all())
			}
		})
	}
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for q := from; q < to; q++ {
		out = append(out, q)
	}
	return out
}

// Whatever the batching — random line lengths, random flush points — the
// two files hold exactly what line-at-a-time rotation would leave, stay
// within the bound, and every event is accounted for.
func TestRotationDoesNotDependOnBatching(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ceiling := int64(200 + rng.IntN(3000))
		path := filepath.Join(t.TempDir(), "events.ndjson")
		var heard errs
		s := open(t, path, ndjson.Options{MaxBytes: ceiling, MaxBufferEvents: 1 + rng.IntN(50), FlushInterval: -1, OnError: heard.add})
		n := 50 + rng.IntN(400)
		sizes := make([]int, n)
		seqs := make([]uint64, n)
		for i := range n {
			name := strings.Repeat("t", rng.IntN(int(ceiling))) // now and then a line longer than the ceiling
			if rng.IntN(3) > 0 {
				name = name[:len(name)/20]
			}
			e := toolEnd(uint64(i), name)
			b, _ := json.Marshal(e)
			sizes[i], seqs[i] = len(b)+1, uint64(i)
			s.Export(e)
			if rng.IntN(40) == 0 {
				if err := s.Flush(context.Background()); err != nil && !errors.Is(err, ndjson.ErrRotatedAway) {
					t.Fatal(err)
				}
			}
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantCur, wantOld, _ := lineAtATime(sizes, seqs, 0, ceiling)
		cur, old := seqsOf(decoded(t, path)), seqsOf(decodedOrNone(t, path+".1"))
		if !slices.Equal(cur, wantCur) || !slices.Equal(old, wantOld) {
			t.Fatalf("seed %d: the file holds %v and .1 %v, want %v and %v", seed, cur, old, wantCur, wantOld)
		}
		assertBound(t, path, ceiling)
		assertBound(t, path+".1", ceiling)
		st := s.Stats()
		if st.Written+st.Dropped != uint64(n) || st.Dropped != st.RotatedAway {
			t.Fatalf("seed %d: stats %+v for %d events", seed, st, n)
		}
		if got := rotatedAway(t, &heard, path); uint64(got) != st.RotatedAway {
			t.Fatalf("seed %d: OnError heard %d rotated away, Stats %d", seed, got, st.RotatedAway)
		}
	}
}

// A line larger than the ceiling is written whole, in a file of its own:
// one per batch, and in one batch of three such lines, the newest two while
// the oldest is rotated away.
func TestALineLargerThanTheCeilingIsWrittenWhole(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.ndjson")
	var heard errs
	s := open(t, path, ndjson.Options{MaxBytes: 100, FlushInterval: -1, OnError: heard.add})
	for i := range uint64(2) {
		s.Export(toolEnd(i, strings.Repeat("big", 100)))
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if cur, old := seqsOf(decoded(t, path)), seqsOf(decoded(t, path+".1")); !slices.Equal(old, []uint64{0}) || !slices.Equal(cur, []uint64{1}) {
		t.Fatalf(".1 holds %v and the file %v, want [0] and [1], each whole", old, cur)
	}
	for i := range uint64(3) {
		s.Export(toolEnd(i, strings.Repeat("big", 100)))
	}
	err := s.Flush(context.Background())
	var de *ndjson.DropError
	if !errors.As(err, &de) || de.N != 1 || !errors.Is(err, ndjson.ErrRotatedAway) {
		t.Fatalf("Flush = %v, want the oldest line rotated away", err)
	}
	cur, old := seqsOf(decoded(t, path)), seqsOf(decoded(t, path+".1"))
	if !slices.Equal(old, []uint64{1}) || !slices.Equal(cur, []uint64{2}) {
		t.Fatalf(".1 holds %v and the file %v, want [1] and [2], each whole", old, cur)
	}
	assertBound(t, path, 100)
	assertBound(t, path+".1", 100)
}

// When the rename fails, nothing was rotated, so nothing is rotated away:
// the whole burst goes to the file, past the ceiling, and the failure is
// reported.
func TestAFailedRotationLosesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "events.ndjson")
	// A directory that is not empty cannot be replaced by a rename.
	if err := os.MkdirAll(filepath.Join(path+".1", "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	var heard errs
	l := fixedLine(t)
	s := open(t, path, ndjson.Options{MaxBytes: int64(10 * l), MaxBufferEvents: 1000, FlushInterval: -1, OnError: heard.add})
	s.Export(fixed(100))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(50) {
		s.Export(fixed(101 + i))
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("Flush = %v: a failed rotation must not drop events", err)
	}
	if got := seqsOf(decoded(t, path)); !slices.Equal(got, seqRange(100, 151)) {
		t.Fatalf("the file holds %v, want all 51 events", got)
	}
	if st := s.Stats(); st.Dropped != 0 || st.Written != 51 || st.Rotations != 0 {
		t.Fatalf("stats %+v", st)
	}
	if txt := heard.text(); !strings.Contains(txt, "rotating "+path+" failed, writing on past MaxBytes") {
		t.Fatalf("OnError heard %q, want the failed rotation", txt)
	}
}

// Rotation reads the file's real size before each batch: after an outside
// copytruncate the burst starts a fresh generation in the emptied file,
// and after an outside rename it starts one in a new file at the path.
func TestRotationAfterAnOutsideRotation(t *testing.T) {
	t.Parallel()
	l := fixedLine(t)
	ceiling := int64(10 * l)
	for _, outside := range []string{"truncate", "rename"} {
		t.Run(outside, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "events.ndjson")
			var heard errs
			s := open(t, path, ndjson.Options{MaxBytes: ceiling, MaxBufferEvents: 1000, FlushInterval: -1, OnError: heard.add})
			for i := range uint64(8) {
				s.Export(fixed(100 + i))
			}
			if err := s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			switch outside {
			case "truncate":
				if err := os.Truncate(path, 0); err != nil {
					t.Fatal(err)
				}
			case "rename":
				if err := os.Rename(path, path+".moved"); err != nil {
					t.Fatal(err)
				}
			}
			for i := range uint64(20) {
				s.Export(fixed(200 + i))
			}
			if err := s.Close(context.Background()); err != nil {
				t.Fatalf("Close = %v: a burst of two generations into an emptied file loses nothing", err)
			}
			cur, old := seqsOf(decoded(t, path)), seqsOf(decoded(t, path+".1"))
			if !slices.Equal(old, seqRange(200, 210)) || !slices.Equal(cur, seqRange(210, 220)) {
				t.Fatalf(".1 holds %v and the file %v; want the burst's two generations, counted from the real size", old, cur)
			}
			if len(heard.all()) != 0 {
				t.Fatalf("OnError heard %v", heard.all())
			}
		})
	}
}

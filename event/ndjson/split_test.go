package ndjson

import (
	"bytes"
	"slices"
	"testing"
)

// generations is the rotation rule the slow way: the batch's lines
// appended one at a time to a file that held size bytes, rotating before a
// line that would take a non-empty file past ceiling. It returns, for each
// generation the batch touches, the batch's bytes in it.
func generations(data []byte, size, ceiling int64) [][]byte {
	gens := [][]byte{nil}
	cur := size
	for _, l := range bytes.SplitAfter(data, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		if cur > 0 && cur+int64(len(l)) > ceiling {
			gens = append(gens, nil)
			cur = 0
		}
		gens[len(gens)-1] = append(gens[len(gens)-1], l...)
		cur += int64(len(l))
	}
	return gens
}

// checkSplit fails unless split's spans write exactly the last two
// generations the slow rule produces, on line boundaries, and rotate
// exactly where it does.
func checkSplit(t *testing.T, data []byte, size, ceiling int64) {
	t.Helper()
	spans := split(nil, data, size, ceiling)
	gens := generations(data, size, ceiling)
	if len(spans) == 0 || len(spans) > 2 {
		t.Fatalf("%d spans", len(spans))
	}
	pos := spans[0].from
	if pos > 0 && data[pos-1] != '\n' {
		t.Fatalf("the first span starts at %d, inside a line", pos)
	}
	for i, sp := range spans {
		if sp.from != pos || sp.to < sp.from || sp.to > len(data) {
			t.Fatalf("span %d is [%d,%d) after %d: not contiguous", i, sp.from, sp.to, pos)
		}
		if sp.to < len(data) && (sp.to == 0 || data[sp.to-1] != '\n') {
			t.Fatalf("span %d ends at %d, inside a line", i, sp.to)
		}
		pos = sp.to
	}
	if pos != len(data) {
		t.Fatalf("the spans end at %d of %d", pos, len(data))
	}
	if last := spans[len(spans)-1]; !bytes.Equal(data[last.from:last.to], gens[len(gens)-1]) || last.rotate != (len(gens) > 1) {
		t.Fatalf("the last span %+v is not the last generation of %d", last, len(gens))
	}
	if len(spans) == 2 {
		first := spans[0]
		if !bytes.Equal(data[first.from:first.to], gens[len(gens)-2]) || first.rotate != (len(gens) > 2) {
			t.Fatalf("the first span %+v is not the second-last generation of %d", first, len(gens))
		}
	} else if len(gens) > 1 && len(gens[len(gens)-2]) != 0 {
		t.Fatalf("one span, but the batch also fills the generation before the last")
	}
	var lost int
	for _, g := range gens[:max(0, len(gens)-2)] {
		lost += len(g)
	}
	if spans[0].from != lost {
		t.Fatalf("%d bytes rotated away unwritten, want %d", spans[0].from, lost)
	}
	// The bound: each generation the batch ends in is within the ceiling,
	// or is one line.
	for i, g := range gens {
		have := int64(len(g))
		if i == 0 {
			have += size
		}
		if have > ceiling && bytes.Count(g, []byte("\n")) > 1 && !(i == 0 && size > ceiling) {
			t.Fatalf("generation %d is %d bytes of several lines, past %d", i, have, ceiling)
		}
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	line := func(n int) []byte { return append(bytes.Repeat([]byte("x"), n-1), '\n') }
	cat := func(ls ...[]byte) []byte { return slices.Concat(ls...) }
	tests := []struct {
		name          string
		data          []byte
		size, ceiling int64
		want          []span
	}{
		{"fits", cat(line(10), line(10)), 0, 20, []span{{0, 20, false}}},
		{"one rotation", cat(line(10), line(10), line(10)), 0, 20, []span{{0, 20, false}, {20, 30, true}}},
		{"rotation first", cat(line(10), line(10)), 15, 20, []span{{0, 20, true}}},
		{"two rotations, the first of an empty file", cat(line(10), line(10), line(10), line(10), line(10)), 0, 20,
			[]span{{20, 40, true}, {40, 50, true}}},
		{"two rotations from a non-empty file", cat(line(10), line(10), line(10)), 15, 10,
			[]span{{10, 20, true}, {20, 30, true}}},
		{"a line longer than the ceiling", cat(line(5), line(50), line(5)), 0, 20,
			[]span{{5, 55, true}, {55, 60, true}}},
		{"a file already past the ceiling", cat(line(5)), 100, 20, []span{{0, 5, true}}},
		{"a last line without its newline", cat(line(10), line(10), []byte("xxxxx")), 0, 20,
			[]span{{0, 20, false}, {20, 25, true}}},
	}
	for _, tc := range tests {
		got := split(nil, tc.data, tc.size, tc.ceiling)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: split = %+v, want %+v", tc.name, got, tc.want)
		}
		checkSplit(t, tc.data, tc.size, tc.ceiling)
	}
}

// FuzzSplit checks split against the line-at-a-time rule. The input's
// bytes are line lengths (each byte 1–256), so that the fuzzer explores
// shapes of batches rather than their contents.
func FuzzSplit(f *testing.F) {
	f.Add([]byte{10, 10, 10, 10, 10}, int64(0), int64(20))
	f.Add([]byte{200, 3, 3, 3, 200}, int64(7), int64(64))
	f.Add([]byte{1}, int64(5000), int64(100))
	f.Add([]byte{}, int64(0), int64(1))
	f.Fuzz(func(t *testing.T, shape []byte, size, ceiling int64) {
		if ceiling <= 0 || size < 0 || len(shape) > 4096 {
			t.Skip() // MaxBytes is positive; sizes are not negative
		}
		var data []byte
		for _, b := range shape {
			data = append(data, bytes.Repeat([]byte("x"), int(b))...)
			data = append(data, '\n')
		}
		if len(data) == 0 {
			return // the writer never splits an empty batch
		}
		checkSplit(t, data, size, ceiling)
	})
}

package ndjson

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// Lines shorter than a page never cross a page boundary once laid out, and
// every line stays valid JSON.
func TestLayoutKeepsLinesWithinPages(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	s := &Sink{}
	for round := range 200 {
		var batch bytes.Buffer
		for range 1 + rng.IntN(60) {
			n := rng.IntN(600)
			if rng.IntN(40) == 0 {
				n = int(pageSize) + rng.IntN(3000) // longer than a page
			}
			b, _ := json.Marshal(map[string]string{"x": strings.Repeat("a", n)})
			batch.Write(b)
			batch.WriteByte('\n')
		}
		offset := int64(rng.IntN(5 * int(pageSize)))
		in := append([]byte(nil), batch.Bytes()...)
		out := s.layout(batch.Bytes(), offset)
		if !bytes.Equal(batch.Bytes(), in) {
			t.Fatal("layout changed its input")
		}
		pos := offset
		lines := bytes.SplitAfter(out, []byte("\n"))
		if len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		var compact []byte
		for _, l := range lines {
			if !json.Valid(l) {
				t.Fatalf("round %d: %q is not valid JSON", round, l)
			}
			// A batch's first line may be moved to the next page by
			// leading spaces; the line itself starts after them.
			lead := int64(len(l) - len(bytes.TrimLeft(l, " ")))
			body := int64(len(l)) - lead
			if body <= pageSize && (pos+lead)/pageSize != (pos+lead+body-1)/pageSize {
				t.Fatalf("round %d: a %d-byte line at %d crosses a page boundary", round, body, pos+lead)
			}
			pos += int64(len(l))
			compact = append(compact, bytes.TrimSpace(l)...)
			compact = append(compact, '\n')
		}
		if !bytes.Equal(compact, in) {
			t.Fatalf("round %d: layout changed more than whitespace", round)
		}
	}
}

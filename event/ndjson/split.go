package ndjson

import "bytes"

// A span is a run of whole lines of a batch, bound for one generation of
// the file.
type span struct {
	from, to int  // byte offsets in the batch
	rotate   bool // rename the file to PATH.1 before writing the span
}

// split lays a batch out over the file's generations the way writing it
// one line at a time would: before a line that would take a non-empty
// file past ceiling, the file is rotated. size is the file's current size.
//
// One-generation rotation keeps only the last two generations, so split
// returns at most two spans, for the generations that survive the batch.
// The lines before the first span, data[:spans[0].from], would be rotated
// away within this same batch: the caller never writes them.
//
// Because the rule is per line, where a line lands does not depend on how
// the lines were batched: a burst that queued while the writer was busy
// leaves the file no larger than ceiling, or one line when that line alone
// is larger than ceiling.
func split(dst []span, data []byte, size, ceiling int64) []span {
	var (
		cur       = size // bytes in the generation being filled
		start     = 0    // where the batch's part of that generation begins
		prevStart = 0    // the same for the generation before it
		rotations = 0
	)
	for i := 0; i < len(data); {
		j := i + bytes.IndexByte(data[i:], '\n') + 1
		if j <= i {
			j = len(data) // a last line without its newline
		}
		if l := int64(j - i); cur > 0 && cur+l > ceiling {
			prevStart, start = start, i
			rotations++
			cur = 0
		}
		cur += int64(j - i)
		i = j
	}
	switch rotations {
	case 0:
		return append(dst, span{0, len(data), false})
	case 1:
		if start > 0 {
			dst = append(dst, span{0, start, false})
		}
		return append(dst, span{start, len(data), true})
	default:
		return append(dst, span{prevStart, start, true}, span{start, len(data), true})
	}
}

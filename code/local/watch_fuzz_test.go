//go:build linux

package local

import (
	"encoding/binary"
	"testing"
)

func FuzzParseEvents(f *testing.F) {
	rec := func(wd int32, mask uint32, name string) []byte {
		n := (len(name) + 15) / 16 * 16
		b := make([]byte, 16+n)
		binary.NativeEndian.PutUint32(b[0:], uint32(wd))
		binary.NativeEndian.PutUint32(b[4:], mask)
		binary.NativeEndian.PutUint32(b[12:], uint32(n))
		copy(b[16:], name)
		return b
	}
	f.Add(append(rec(1, 2, "a.txt"), rec(3, 0x8000, "")...))
	f.Add([]byte{1, 2, 3})
	f.Add(rec(-1, 0x4000, "abc")[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		evs := parseEvents(b)
		if len(evs) > len(b)/16 {
			t.Fatalf("%d events from %d bytes", len(evs), len(b))
		}
	})
}

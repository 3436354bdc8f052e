//go:build linux

package jail

import "testing"

func FuzzParseSegment(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1, 0x4e, 0x20, 0x9c, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x14, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x4f})
	f.Fuzz(func(t *testing.T, b []byte) {
		parseSegment(b) // must not panic on any packet
	})
}

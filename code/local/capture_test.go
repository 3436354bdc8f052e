package local

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCapture: however the stream is split into writes, the capture keeps
// exactly the first max characters and counts them all as
// utf8.RuneCount counts the whole stream.
func FuzzCapture(f *testing.F) {
	f.Add([]byte("héllo wörld"), uint8(3), uint16(4))
	f.Add([]byte("\xe2\x82\xac\xe2\x82"), uint8(1), uint16(1))
	f.Add([]byte("\xf0\x9f\x98\x80\xf0"), uint8(2), uint16(0))
	f.Add([]byte("\xff\x80\x80abc"), uint8(5), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8, max uint16) {
		size := int(chunk%7) + 1
		c := newCapture(int(max % 64))
		for i := 0; i < len(data); i += size {
			c.Write(data[i:min(i+size, len(data))])
		}
		c.finish()
		whole := string(data)
		if c.total != utf8.RuneCountInString(whole) {
			t.Fatalf("counted %d characters, utf8 counts %d in %q", c.total, utf8.RuneCountInString(whole), whole)
		}
		want := whole
		if n := int(max % 64); utf8.RuneCountInString(whole) > n {
			want = cutBytes(whole, n)
		}
		if c.String() != want {
			t.Fatalf("kept %q, want %q", c.String(), want)
		}
		if c.cut() != (c.total > int(max%64)) {
			t.Fatal("cut() disagrees with the counts")
		}
	})
}

func cutBytes(s string, n int) string {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

func TestTruncationNamesTheCutStreams(t *testing.T) {
	out, errs := newCapture(3), newCapture(3)
	out.Write([]byte("abcdef"))
	errs.Write([]byte("ab"))
	tr := truncation(out, errs)
	if tr == nil || !tr.Stdout || tr.Stderr || tr.OfChars != 6 {
		t.Fatalf("%+v", tr)
	}
	errs.Write([]byte("cdefghij"))
	tr = truncation(out, errs)
	if !tr.Stdout || !tr.Stderr || tr.OfChars != 10 {
		t.Fatalf("%+v", tr)
	}
	if truncation(newCapture(3), newCapture(3)) != nil {
		t.Fatal("nothing cut must be nil")
	}
}

// FuzzReadFrame: a hostile or broken interpreter cannot make the host
// panic or allocate past the reply limit.
func FuzzReadFrame(f *testing.F) {
	frame := func(body string) []byte {
		b := make([]byte, 4+len(body))
		binary.BigEndian.PutUint32(b, uint32(len(body)))
		copy(b[4:], body)
		return b
	}
	f.Add(frame(`{"id":1,"ok":true,"exit":0}`))
	f.Add(frame(`{"ready":true}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(frame(`{"id":"x"}`))
	f.Add(frame(""))
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var reply replyFrame
		err := readFrame(bytes.NewReader(data), &reply)
		if len(data) >= 4 && binary.BigEndian.Uint32(data) > maxReply && err == nil {
			t.Fatal("an oversized frame was accepted")
		}
		if err != nil && strings.Contains(err.Error(), "\x00") {
			t.Fatal("an error carries raw frame bytes")
		}
	})
}

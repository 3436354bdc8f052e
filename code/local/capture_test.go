package local

import (
	"bytes"
	"encoding/binary"
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
// panic or allocate past the reply limit, and only a well-formed reply
// decodes.
func FuzzReadFrame(f *testing.F) {
	frame := func(body []byte) []byte {
		b := make([]byte, 4+len(body))
		binary.BigEndian.PutUint32(b, uint32(len(body)))
		copy(b[4:], body)
		return b
	}
	good := make([]byte, replySize)
	binary.BigEndian.PutUint64(good, 7)
	good[12] = 1
	f.Add(frame(good))
	f.Add(frame([]byte("R3.11.7")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(frame([]byte(`{"id":"x"}`)))
	f.Add(frame(nil))
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := readFrame(bytes.NewReader(data))
		if len(data) >= 4 && binary.BigEndian.Uint32(data) > maxReply && err == nil {
			t.Fatal("an oversized frame was accepted")
		}
		if err != nil {
			return
		}
		rep, err := decodeReply(body)
		if (err == nil) != (len(body) == replySize) {
			t.Fatalf("a %d-byte body decoded: %v", len(body), err)
		}
		if err == nil && rep.ok != (body[12] == 1) {
			t.Fatal("ok misread")
		}
	})
}

func TestRequestEncoding(t *testing.T) {
	b := encodeRequest(9, `{"a":"/work/inputs/a"}`, "print('é')")
	if int(binary.BigEndian.Uint32(b)) != len(b)-4 || binary.BigEndian.Uint64(b[4:]) != 9 ||
		binary.BigEndian.Uint32(b[12:]) != 22 || string(b[16:38]) != `{"a":"/work/inputs/a"}` || string(b[38:]) != "print('é')" {
		t.Fatalf("%q", b)
	}
}

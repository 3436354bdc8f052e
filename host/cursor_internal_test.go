package host

import (
	"testing"
	"time"
)

// ParseCursor takes back exactly what EncodeCursor made, and refuses
// everything else without panicking.
func FuzzParseCursor(f *testing.F) {
	f.Add(EncodeCursor(ListCursor{CreatedAt: time.UnixMicro(1764579600000000), ID: "ses_0123456789abcdef0123456789abcdef"}))
	f.Add("")
	f.Add("YzEuLjE")
	f.Add("YzEuMDEuc2VzXzAxMjM0NTY3ODlhYmNkZWYwMTIzNDU2Nzg5YWJjZGVm")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			if c != (ListCursor{}) {
				t.Fatalf("a refused cursor gave %+v", c)
			}
			return
		}
		if !validSessionID(c.ID) || c.CreatedAt.Before(time.UnixMicro(0)) {
			t.Fatalf("accepted %q as %+v", s, c)
		}
		if again := EncodeCursor(c); again != s {
			t.Fatalf("%q parsed to %+v, which encodes as %q", s, c, again)
		}
	})
}

package host

import (
	"encoding/hex"
	"net/http/httptest"
	"strings"
	"testing"
)

// A forwarded request's id comes from a header anyone can send: only the
// shape the host makes is taken, only from a request that says it was
// forwarded, and it cannot carry anything the store's LIKE would read as
// a pattern.
func FuzzForwardID(f *testing.F) {
	for _, s := range []string{newForwardID(), "fwd-", "fwd-%", "fwd-" + strings.Repeat("A", 32), "fwd-" + strings.Repeat("0", 31) + "_", ""} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, id string, forwarded bool) {
		req := httptest.NewRequest("POST", "/v1/sessions/x/turns", nil)
		req.Header.Set(ForwardIDHeader, id)
		if forwarded {
			req.Header.Set(ForwardedHeader, "rep-1")
		}
		got, _ := withForwardID(req).Context().Value(forwardIDKey{}).(string)
		if got == "" {
			return
		}
		if !forwarded || got != id || len(got) != 36 || !strings.HasPrefix(got, "fwd-") || strings.ContainsAny(got, " %_\\") {
			t.Fatalf("took %q (forwarded %v)", got, forwarded)
		}
		if b, err := hex.DecodeString(got[4:]); err != nil || len(b) != 16 || hex.EncodeToString(b) != got[4:] {
			t.Fatalf("took %q, not 32 lower-case hex digits", got)
		}
	})
}

package host_test

import (
	"net/http"
	"testing"
)

// The host's own checks of a clone at open, before any cloner is asked
// (cmd/agentry's TestServeClonesAtOpen clones for real, jailed).
func TestCreateCloneChecks(t *testing.T) {
	f := newFixture(t, config{kind: onFake})
	for _, c := range []struct {
		body   any
		status int
		code   string
	}{
		{map[string]any{"clone": map[string]string{}}, http.StatusBadRequest, "missing_field"},
		{map[string]any{"clone": map[string]string{"url": "file:///etc"}}, http.StatusBadRequest, "clone_refused"},
		{map[string]any{"clone": map[string]string{"url": "ext::sh -c id"}}, http.StatusBadRequest, "clone_refused"},
		{map[string]any{"clone": map[string]string{"url": "--upload-pack=id"}}, http.StatusBadRequest, "clone_refused"},
		{map[string]any{"clone": map[string]string{"url": "https://u:p@example.com/r.git"}}, http.StatusBadRequest, "clone_refused"},
		{map[string]any{"clone": map[string]string{"url": "https://example.com/r.git", "ref": "-x"}}, http.StatusBadRequest, "invalid_field"},
		{map[string]any{"clone": map[string]string{"url": "https://example.com/r.git", "ref": "a/../b"}}, http.StatusBadRequest, "invalid_field"},
		{map[string]any{"clone": map[string]string{"url": "https://example.com/r.git", "credential": "Bad Name"}}, http.StatusBadRequest, "invalid_field"},
		{map[string]any{"clone": map[string]string{"url": "https://example.com/r.git", "depth": "1"}}, http.StatusBadRequest, "unknown_field"},
		// A well-formed clone on a host that clones nothing.
		{map[string]any{"clone": map[string]string{"url": "https://example.com/r.git", "ref": "main"}}, http.StatusNotImplemented, "clone_unsupported"},
	} {
		want(t, f.do("POST", "/v1/sessions", "alice", c.body), c.status, c.code)
	}
	r := f.do("GET", "/v1/sessions", "alice", nil)
	if n := len(r.json(t)["sessions"].([]any)); n != 0 {
		t.Fatalf("%d conversations opened by refused clones", n)
	}
}

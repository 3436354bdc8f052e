package host_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/host"
)

// GET /v1/sessions and GET /v1/tenants/{t}/sessions answer pages of
// `limit`, with `next` (an opaque cursor) until the last: a walk sees each
// conversation once. A cursor or limit the host did not give is 400.
func TestListPages(t *testing.T) {
	f := newFixture(t, config{opt: host.Options{MaxCreatesPerMinute: -1}})
	made := map[string]bool{}
	for range 5 {
		made[f.open("alice")] = true
	}
	f.open("bob")

	walk := func(who, path string, limit int) []string {
		var got []string
		next := ""
		for pages := 0; ; pages++ {
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if next != "" {
				q.Set("cursor", next)
			}
			r := f.do("GET", path+"?"+q.Encode(), who, nil)
			want(t, r, http.StatusOK, "")
			m := r.json(t)
			for _, s := range m["sessions"].([]any) {
				got = append(got, s.(map[string]any)["sessionId"].(string))
			}
			n, _ := m["next"].(string)
			if n == "" {
				return got
			}
			if pages > 10 {
				t.Fatal("the walk does not end")
			}
			next = n
		}
	}
	got := walk("alice", "/v1/sessions", 2)
	if len(got) != 5 {
		t.Fatalf("walked %d conversations, want 5: %v", len(got), got)
	}
	for _, id := range got {
		if !made[id] {
			t.Fatalf("%s is not alice's, or seen twice", id)
		}
		delete(made, id)
	}
	if all := walk("root", "/v1/tenants/acme/sessions", 4); len(all) != 6 {
		t.Fatalf("the tenant's walk: %d, want 6", len(all))
	}
	if one := f.do("GET", "/v1/sessions?limit=5", "alice", nil).json(t); one["next"] != nil {
		t.Fatalf("a page holding everything has a next: %v", one["next"])
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=nope", "cursor=" + host.EncodeCursor(host.ListCursor{CreatedAt: time.Now(), ID: "../x"})} {
		r := f.do("GET", "/v1/sessions?"+q, "alice", nil)
		want(t, r, http.StatusBadRequest, "invalid_field")
	}
}

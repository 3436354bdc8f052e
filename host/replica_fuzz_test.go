package host_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
)

func TestParseReplicaURL(t *testing.T) {
	for _, ok := range []string{"http://10.0.0.5:8080", "https://agentry-1.internal", "http://[::1]:9000/prefix", "http://host"} {
		if _, err := host.ParseReplicaURL(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "10.0.0.5:8080", "ftp://x", "http://", "http://u:p@x", "http://x?a=1", "http://x#f", "http://x:99999", "http:opaque", "http://:80"} {
		if _, err := host.ParseReplicaURL(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// Whatever ParseReplicaURL accepts is an http(s) URL with a host and
// nothing that could smuggle credentials or a query to another replica.
func FuzzParseReplicaURL(f *testing.F) {
	for _, s := range []string{"http://10.0.0.5:8080", "https://a.b/c", "http://u@x", "http://x?q", "http://[::1]:0", "http://x:65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := host.ParseReplicaURL(s)
		if err != nil {
			// An error may quote the address, never one carrying a user
			// or password.
			if strings.Contains(err.Error(), strconv.Quote(s)) {
				if pu, perr := url.Parse(s); strings.Contains(s, "@") && (perr != nil || pu.User != nil) {
					t.Fatalf("the error quotes an address with credentials: %v", err)
				}
			}
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("accepted %q as %#v", s, u)
		}
	})
}

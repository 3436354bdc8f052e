package jail

import (
	"strings"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	good := map[string]string{
		"api.anthropic.com:443": "api.anthropic.com:443",
		"API.Example.COM.:80":   "api.example.com:80",
		"127.0.0.1:8080":        "127.0.0.1:8080",
		"[::1]:9":               "[::1]:9",
		"[::ffff:10.0.0.1]:1":   "10.0.0.1:1",
		"my_host-1:65535":       "my_host-1:65535",
	}
	for in, want := range good {
		e, err := parseEndpoint(in)
		if err != nil || e.String() != want {
			t.Errorf("parseEndpoint(%q) = %v, %v; want %s", in, e, err, want)
		}
	}
	for _, in := range []string{"", "host", "host:", ":80", "host:0", "host:65536", "host:+80", "host:8o", "0.0.0.0:80", "[::]:80",
		"224.0.0.1:80", "[fe80::1%eth0]:80", "-bad.com:80", "a..b:80", "exa mple.com:80", "x/y:80", strings.Repeat("a", 64) + ".com:80"} {
		if e, err := parseEndpoint(in); err == nil {
			t.Errorf("parseEndpoint(%q) = %v; want an error", in, e)
		}
	}
}

func TestPlanNetwork(t *testing.T) {
	a, err := newAllowlist([]string{"127.0.0.1:3128", "api.example.com:443", "api.example.com:80", "other.example:443", "10.1.2.3:8443", "localhost:9000"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := planNetwork(a)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range p.forwards {
		got[listenAddr(f.listen)] = f.dial
	}
	want := map[string]string{
		"127.0.0.1:3128":  "127.0.0.1:3128",
		"127.0.100.1:443": "api.example.com:443",
		"127.0.100.1:80":  "api.example.com:80",
		"127.0.100.2:443": "other.example:443",
		"10.1.2.3:8443":   "10.1.2.3:8443",
		"127.0.0.1:9000":  "localhost:9000",
		"[::1]:9000":      "localhost:9000",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("forward %s → %q; want %q (all: %v)", k, got[k], v, got)
		}
	}
	if len(p.aliases) != 1 || p.aliases[0].String() != "10.1.2.3" {
		t.Errorf("aliases = %v", p.aliases)
	}
	if !strings.Contains(p.hosts, "127.0.100.1\tapi.example.com\n") || !strings.Contains(p.hosts, "127.0.100.2\tother.example\n") {
		t.Errorf("hosts = %q", p.hosts)
	}
	proxy, exposed := p.ports(2)
	if proxy != 3129 || len(exposed) != 2 || exposed[0] != 39000 || exposed[1] != 39001 {
		t.Errorf("ports = %d %v; the proxy must step past the allowed 127.0.0.1:3128", proxy, exposed)
	}
}

// FuzzParseEndpoint: whatever parses round-trips to itself, and is
// always a host and a port in range.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"api.anthropic.com:443", "127.0.0.1:8080", "[::1]:9", "a:1", "host:0", "[fe80::1%lo]:1", "x..y:2", "ÄÖ:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := parseEndpoint(s)
		if err != nil {
			return
		}
		if e.host == "" || e.port == 0 {
			t.Fatalf("parseEndpoint(%q) = %#v", s, e)
		}
		again, err := parseEndpoint(e.String())
		if err != nil || again != e {
			t.Fatalf("%q → %s → %v, %v", s, e, again, err)
		}
		a, _ := newAllowlist([]string{s})
		if a != nil {
			if _, ok := a.allows(e.String()); !ok {
				t.Fatalf("%q is allowed but not its own normal form %s", s, e)
			}
		}
	})
}

//go:build linux

package jail_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/jail"
)

func server(t testing.TB, body string) (*httptest.Server, string) {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	return s, u.Host
}

// pyGet fetches url directly (urllib ignores the proxy for loopback:
// NO_PROXY), or sends it to the jail's proxy as an absolute-URI request.
func pyGet(url string, viaProxy bool) string {
	if !viaProxy {
		return `import urllib.request
o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
result = o.open(` + pyStr(url) + `, timeout=10).read().decode()`
	}
	return `import urllib.parse
p = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
s = socket.create_connection((p.hostname, p.port), timeout=10)
s.sendall(b"GET ` + url + ` HTTP/1.0\r\n\r\n")
data = b""
while True:
    b = s.recv(4096)
    if not b: break
    data += b
head, body = data.decode().split("\r\n\r\n", 1)
if head.split()[1] != "200":
    raise OSError("proxy said " + head.splitlines()[0])
result = body`
}

// pyConnect tunnels through the proxy with CONNECT and sends a GET.
func pyConnect(hostport string) string {
	return `import urllib.parse
p = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
s = socket.create_connection((p.hostname, p.port), timeout=10)
s.sendall(b"CONNECT ` + hostport + ` HTTP/1.1\r\nHost: ` + hostport + `\r\n\r\n")
head = s.recv(4096).decode()
if not head.startswith("HTTP/1.1 200"):
    raise OSError("proxy said " + head.splitlines()[0])
s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
data = b""
while True:
    b = s.recv(4096)
    if not b: break
    data += b
result = data.decode().split("\r\n\r\n", 1)[1]`
}

func pyDial(hostport string) string {
	host, port, _ := net.SplitHostPort(hostport)
	return fmt.Sprintf(`socket.create_connection((%s, %s), timeout=5).close()`, pyStr(host), port)
}

// The allowed host port works directly and through the proxy; the host's
// other ports do not, and each refusal is an event.
func TestNetworkOnlyTheAllowlist(t *testing.T) {
	needJail(t)
	_, allowed := server(t, "model server")
	_, denied := server(t, "host's own port")
	_, named := server(t, "by name")
	tools, _ := server(t, "host tools")

	spec := jail.Spec{AllowHosts: []string{allowed}, Expose: []jail.Exposed{{Name: "tools", Listener: tools.Listener}}}
	// A host name, when this machine's own resolves to loopback, goes
	// through the jail's /etc/hosts and a forwarder of its own.
	host, _ := os.Hostname()
	_, namedPort, _ := net.SplitHostPort(named)
	byName := ""
	if addrs, err := net.LookupHost(host); err == nil && len(addrs) > 0 && net.ParseIP(addrs[0]).IsLoopback() {
		byName = net.JoinHostPort(host, namedPort)
		spec.AllowHosts = append(spec.AllowHosts, byName)
	}
	pr := launchProbe(t, newAgent(t, jail.AgentOptions{}), spec)

	if got := pr.must(t, pyGet("http://"+allowed+"/", false)); got != "model server" {
		t.Errorf("direct to the allowed port: %v", got)
	}
	if got := pr.must(t, pyGet("http://"+allowed+"/", true)); got != "model server" {
		t.Errorf("through the proxy to the allowed port: %v", got)
	}
	if got := pr.must(t, pyConnect(allowed)); got != "model server" {
		t.Errorf("CONNECT to the allowed port: %v", got)
	}
	if byName != "" {
		if got := pr.must(t, pyGet("http://"+byName+"/", false)); got != "by name" {
			t.Errorf("direct to the allowed name: %v", got)
		}
		if got := pr.must(t, pyConnect(byName)); got != "by name" {
			t.Errorf("CONNECT to the allowed name: %v", got)
		}
	}
	addr := pr.p.Addr("tools")
	if addr == "" {
		t.Fatal(`Addr("tools") is empty`)
	}
	if got := pr.must(t, pyGet("http://"+addr+"/", false)); got != "host tools" {
		t.Errorf("the exposed listener at %s: %v", addr, got)
	}

	// Refused: the host's other port, directly (connection refused) and
	// through the proxy (403), by plain HTTP and by CONNECT.
	if err := pr.mustFail(t, pyDial(denied)); !strings.Contains(err.Error(), "ConnectionRefused") {
		t.Errorf("direct dial to a port not allowed: %v", err)
	}
	pr.ev.waitFor(t, "direct refusal", refused(denied, "direct"))
	if err := pr.mustFail(t, pyGet("http://"+denied+"/", true)); !strings.Contains(err.Error(), "403") {
		t.Errorf("proxy to a port not allowed: %v", err)
	}
	if err := pr.mustFail(t, pyConnect(denied)); !strings.Contains(err.Error(), "403") {
		t.Errorf("CONNECT to a port not allowed: %v", err)
	}
	if n := countRefused(pr.ev, denied, "proxy"); n != 2 {
		t.Errorf("%d proxy refusals of %s reported; want 2", n, denied)
	}
	// The exposed listener is not reachable at its host address, nor is
	// anything outside loopback.
	pr.mustFail(t, pyDial(tools.Listener.Addr().String()))
	pr.mustFail(t, pyDial("1.1.1.1:443"))
	pr.mustFail(t, `socket.getaddrinfo("example.com", 443)`)
	if err := pr.mustFail(t, pyGet("http://example.com/", true)); !strings.Contains(err.Error(), "403") {
		t.Errorf("proxy to an outside host: %v", err)
	}
	pr.ev.waitFor(t, "proxy refusal", refused("example.com:80", "proxy"))
}

func countRefused(ev *events, target, via string) int {
	n := 0
	for _, e := range ev.all() {
		if refused(target, via)(e) {
			n++
		}
	}
	return n
}

// One session cannot reach another: each has its own namespace.
func TestNetworkSessionsApart(t *testing.T) {
	needJail(t)
	j := newAgent(t, jail.AgentOptions{})
	a := launchProbe(t, j, jail.Spec{})
	b := launchProbe(t, j, jail.Spec{})
	port := a.must(t, `s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); import builtins; builtins.keep = s; result = s.getsockname()[1]`)
	hp := fmt.Sprintf("127.0.0.1:%v", port)
	a.must(t, pyDial(hp)) // it is listening, in its own jail
	b.mustFail(t, pyDial(hp))
	b.ev.waitFor(t, "direct refusal", refused(hp, "direct"))
}

// A port scan is reported in full: events up to a bound, the rest counted.
func TestNetworkRefusalsBounded(t *testing.T) {
	needJail(t)
	pr := launchProbe(t, newAgent(t, jail.AgentOptions{}), jail.Spec{})
	const ports = 400
	pr.must(t, fmt.Sprintf(`n = 0
for port in range(20000, 20000 + %d):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        n += 1
result = n`, ports))
	pr.p.Stop(t.Context())
	total := 0
	for _, e := range pr.ev.all() {
		if r, ok := e.Payload.(*jail.Refused); ok {
			total += r.Suppressed
			if r.Target != "" {
				total++
			}
		}
	}
	if total != ports {
		t.Errorf("refusals reported (events + suppressed) = %d; want %d", total, ports)
	}
}

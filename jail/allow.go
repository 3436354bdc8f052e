package jail

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// endpoint is one host:port an agent may reach, normalised: a host name
// in lower case without a trailing dot, or an IP address in canonical
// form.
type endpoint struct {
	host string
	port uint16
	ip   netip.Addr // valid when host is an IP literal
}

func (e endpoint) String() string { return net.JoinHostPort(e.host, strconv.Itoa(int(e.port))) }

// parseEndpoint parses one AllowHosts entry, or the target of a proxy
// request, as host:port. It accepts host names, IPv4 and bracketed IPv6
// literals and ports 1–65535, and nothing else.
func parseEndpoint(s string) (endpoint, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		return endpoint{}, fmt.Errorf("%q is not host:port (e.g. api.anthropic.com:443 or 127.0.0.1:8080)", s)
	}
	port, err := parsePort(portText)
	if err != nil {
		return endpoint{}, fmt.Errorf("%q: %v", s, err)
	}
	host, err = normaliseHost(host)
	if err != nil {
		return endpoint{}, fmt.Errorf("%q: %v", s, err)
	}
	e := endpoint{host: host, port: port}
	if ip, err := netip.ParseAddr(host); err == nil {
		e.ip = ip
	}
	return e, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// normaliseHost returns the canonical form of a host: an IP address as
// netip prints it (IPv4-mapped IPv6 unmapped), or a DNS name in lower case.
func normaliseHost(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("the host is empty")
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("an IPv6 zone (%%%s) cannot be allowed; name the address without it", ip.Zone())
		}
		ip = ip.Unmap()
		if ip.IsUnspecified() || ip.IsMulticast() {
			return "", fmt.Errorf("%s is not an address one can connect to", ip)
		}
		return ip.String(), nil
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if len(h) == 0 || len(h) > 253 {
		return "", fmt.Errorf("host name %q is not 1 to 253 characters", h)
	}
	for _, label := range strings.Split(h, ".") {
		if len(label) == 0 || len(label) > 63 {
			return "", fmt.Errorf("host name %q has an empty or over-long label", h)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("host name %q has a label that starts or ends with '-'", h)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("host name %q holds %q; use letters, digits, '-' and '_'", h, c)
			}
		}
	}
	return h, nil
}

// allowlist is the set of endpoints a jail lets through.
type allowlist struct {
	list []endpoint
	set  map[endpoint]struct{}
}

func newAllowlist(entries []string) (*allowlist, error) {
	a := &allowlist{set: make(map[endpoint]struct{}, len(entries))}
	for _, s := range entries {
		e, err := parseEndpoint(s)
		if err != nil {
			return nil, fmt.Errorf("jail: Spec.AllowHosts entry %v", err)
		}
		if e.ip.IsValid() && e.ip.Is6() && !e.ip.IsLoopback() {
			return nil, fmt.Errorf("jail: Spec.AllowHosts entry %q: of IPv6 addresses only ::1 can be allowed; name the host instead, and it is reached by name", s)
		}
		if _, dup := a.set[e]; dup {
			continue
		}
		a.set[e] = struct{}{}
		a.list = append(a.list, e)
	}
	return a, nil
}

// allows reports whether target (host:port as a client asked for it) is
// on the list, and its normal form.
func (a *allowlist) allows(target string) (endpoint, bool) {
	e, err := parseEndpoint(target)
	if err != nil {
		return endpoint{}, false
	}
	_, ok := a.set[e]
	return e, ok
}

func (a *allowlist) strings() []string {
	out := make([]string, len(a.list))
	for i, e := range a.list {
		out[i] = e.String()
	}
	return out
}

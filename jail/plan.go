package jail

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// forward is one listener inside the jail's network namespace and what a
// connection to it is tunnelled to on the host.
type forward struct {
	listen netip.AddrPort
	// dial is the host-side address (host:port); for an exposed listener
	// it is empty and expose is set.
	dial   string
	expose *Exposed
	// optional: an IPv6 twin that a netns without IPv6 may lack.
	optional bool
}

// netPlan is the layout of a jail's network: the forwarders, the IPv4
// addresses to add to its loopback, and its /etc/hosts.
type netPlan struct {
	forwards []forward
	aliases  []netip.Addr
	hosts    string
}

// firstNameAddr is where the loopback addresses handed to allowed host
// names begin (127.0.100.1, 127.0.100.2, …).
var firstNameAddr = netip.AddrFrom4([4]byte{127, 0, 100, 1})

const maxNames = 1000

var (
	loopback4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	loopback6 = netip.IPv6Loopback()
)

// planNetwork lays out the jail's network for the allowlist: each allowed
// endpoint is dialled inside the jail at the address the agent would
// dial on the host.
func planNetwork(a *allowlist) (netPlan, error) {
	var p netPlan
	used := map[netip.AddrPort]bool{}
	taken := map[netip.Addr]bool{}
	for _, e := range a.list {
		if e.ip.IsValid() {
			taken[e.ip] = true
		}
	}
	names := map[string]netip.Addr{}
	var order []string
	next := firstNameAddr
	add := func(f forward) {
		if used[f.listen] {
			return
		}
		used[f.listen] = true
		p.forwards = append(p.forwards, f)
	}
	aliased := map[netip.Addr]bool{}
	for _, e := range a.list {
		dial := e.String()
		switch {
		case e.ip.IsValid():
			if e.ip.Is4() && !e.ip.IsLoopback() && !aliased[e.ip] {
				aliased[e.ip] = true
				p.aliases = append(p.aliases, e.ip)
			}
			add(forward{listen: netip.AddrPortFrom(e.ip, e.port), dial: dial})
		case e.host == "localhost":
			add(forward{listen: netip.AddrPortFrom(loopback4, e.port), dial: dial})
			add(forward{listen: netip.AddrPortFrom(loopback6, e.port), dial: dial, optional: true})
		default:
			addr, ok := names[e.host]
			if !ok {
				for taken[next] {
					next = next.Next()
				}
				if len(names) >= maxNames {
					return netPlan{}, fmt.Errorf("jail: Spec.AllowHosts names more than %d hosts", maxNames)
				}
				addr = next
				next = next.Next()
				names[e.host] = addr
				order = append(order, e.host)
			}
			add(forward{listen: netip.AddrPortFrom(addr, e.port), dial: dial})
		}
	}
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, h := range order {
		fmt.Fprintf(&b, "%s\t%s\n", names[h], h)
	}
	p.hosts = b.String()
	return p, nil
}

// listenAddr is how a forward's address is written for net.Listen.
func listenAddr(ap netip.AddrPort) string {
	return net.JoinHostPort(ap.Addr().String(), strconv.Itoa(int(ap.Port())))
}

// Ports inside the jail for the egress proxy and the exposed listeners:
// fixed before the agent starts (its environment names the proxy), and
// clear of the allowed endpoints on 127.0.0.1.
const (
	proxyPortBase  = 3128
	exposePortBase = 39000
)

func (p netPlan) ports(expose int) (proxy uint16, exposed []uint16) {
	used := map[uint16]bool{}
	for _, f := range p.forwards {
		if f.listen.Addr() == loopback4 {
			used[f.listen.Port()] = true
		}
	}
	pick := func(from uint16) uint16 {
		for used[from] {
			from++
		}
		used[from] = true
		return from
	}
	proxy = pick(proxyPortBase)
	for range expose {
		exposed = append(exposed, pick(exposePortBase))
	}
	return proxy, exposed
}

//go:build linux

package jail

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on an OS thread that joined the network namespace ns,
// then moves the thread back to the host's namespace and returns it to
// the runtime. Sockets fn creates stay in ns, wherever they are used from.
//
// The thread must not die: a child started from it (bwrap, a Command)
// has a parent-death signal tied to the thread that forked it, and Go may
// have forked one from this very thread. Only when the way back fails
// does the goroutine end locked, so that the thread is discarded rather
// than reused in the wrong namespace.
func inNetns(ns *os.File, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("jail: opening this thread's network namespace: %w", err)
			return
		}
		defer home.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("jail: joining the agent's network namespace: %w", err)
			return
		}
		err = fn()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// jailListeners is what setupNetns made inside the namespace.
type jailListeners struct {
	forwards []net.Listener // parallel to plan.forwards (nil for a skipped optional one)
	proxy    net.Listener
	exposed  []net.Listener
	raw      *os.File
}

func (l *jailListeners) close() {
	for _, x := range l.forwards {
		if x != nil {
			x.Close()
		}
	}
	for _, x := range l.exposed {
		x.Close()
	}
	if l.proxy != nil {
		l.proxy.Close()
	}
	if l.raw != nil {
		l.raw.Close()
	}
}

// setupNetns runs on a thread inside the jail's namespace: it brings its
// loopback up, adds the aliased addresses, and opens every listener and
// the raw socket that watches for refused dials.
func setupNetns(p netPlan, proxyPort uint16, exposePorts []uint16, deadline time.Time) (*jailListeners, error) {
	out := &jailListeners{}
	fail := func(err error) (*jailListeners, error) {
		out.close()
		return nil, err
	}
	if err := loopbackUp(p.aliases, deadline); err != nil {
		return fail(err)
	}
	for _, f := range p.forwards {
		l, err := net.Listen("tcp", listenAddr(f.listen))
		if err != nil {
			if f.optional && (errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.EAFNOSUPPORT)) {
				out.forwards = append(out.forwards, nil)
				continue
			}
			return fail(fmt.Errorf("jail: listening at %s inside the jail: %w", listenAddr(f.listen), err))
		}
		out.forwards = append(out.forwards, l)
	}
	l, err := net.Listen("tcp", listenAddr(netip.AddrPortFrom(loopback4, proxyPort)))
	if err != nil {
		return fail(fmt.Errorf("jail: placing the egress proxy inside the jail: %w", err))
	}
	out.proxy = l
	for _, port := range exposePorts {
		l, err := net.Listen("tcp", listenAddr(netip.AddrPortFrom(loopback4, port)))
		if err != nil {
			return fail(fmt.Errorf("jail: placing an exposed listener inside the jail: %w", err))
		}
		out.exposed = append(out.exposed, l)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP)
	if err != nil {
		return fail(fmt.Errorf("jail: opening the socket that watches the jail's refused dials: %w", err))
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	out.raw = os.NewFile(uintptr(fd), "jail-watch")
	return out, nil
}

// loopbackUp waits until bubblewrap has brought the namespace's lo up
// (it does so in the jail's first process, racing this thread, and fails
// if the address is already there), then adds each alias to it as a /32
// (lo:1, lo:2, …), so dials to those addresses stay local. There is no
// notification to wait on that works everywhere, so it looks again at
// growing intervals until deadline.
func loopbackUp(aliases []netip.Addr, deadline time.Time) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("jail: configuring the jail's loopback: %w", err)
	}
	defer unix.Close(fd)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return fmt.Errorf("jail: configuring the jail's loopback: %w", err)
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return fmt.Errorf("jail: reading the jail's loopback flags: %w", err)
		}
		if ifr.Uint16()&unix.IFF_UP != 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jail: bubblewrap did not bring the jail's loopback up within the start bound")
		}
		time.Sleep(wait)
	}
	for i, a := range aliases {
		name := fmt.Sprintf("lo:%d", i+1)
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return fmt.Errorf("jail: configuring %s: %w", name, err)
		}
		ip := a.As4()
		if err := ifr.SetInet4Addr(ip[:]); err != nil {
			return fmt.Errorf("jail: configuring %s: %w", name, err)
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
			return fmt.Errorf("jail: adding %s to the jail's loopback: %w", a, err)
		}
		mask := [4]byte{255, 255, 255, 255}
		if err := ifr.SetInet4Addr(mask[:]); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, ifr); err != nil {
			return fmt.Errorf("jail: narrowing %s on the jail's loopback to /32: %w", a, err)
		}
	}
	return nil
}

// flow is a TCP connection as the raw socket sees it.
type flow struct {
	src, dst [4]byte
	sp, dp   uint16
}

func (f flow) reverse() flow { return flow{src: f.dst, dst: f.src, sp: f.dp, dp: f.sp} }

const maxPending = 4096

// watch reads every TCP segment on the jail's loopback (IPv4) and reports
// each dial the kernel answered with a reset: a SYN to a port nothing
// listens on. It ends when raw is closed.
func (n *network) watch(raw *os.File) {
	buf := make([]byte, 1<<16)
	pending := map[flow]struct{}{}
	for {
		k, err := raw.Read(buf)
		if err != nil {
			return
		}
		f, flags, ok := parseSegment(buf[:k])
		if !ok {
			continue
		}
		const fin, syn, rst, ack = 0x01, 0x02, 0x04, 0x10
		switch {
		case flags&syn != 0 && flags&ack == 0:
			if len(pending) >= maxPending {
				clear(pending)
			}
			pending[f] = struct{}{}
		case flags&syn != 0 && flags&ack != 0:
			delete(pending, f.reverse())
		case flags&rst != 0:
			if _, ok := pending[f.reverse()]; ok {
				delete(pending, f.reverse())
				target := netip.AddrPortFrom(netip.AddrFrom4(f.src), f.sp).String()
				n.refuse(target, "direct", "nothing the jail allows listens there")
			}
		}
	}
}

// parseSegment reads the addresses, ports and flags of an IPv4 TCP
// segment as a raw socket delivers it (IP header first).
func parseSegment(b []byte) (flow, byte, bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != unix.IPPROTO_TCP {
		return flow{}, 0, false
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 || len(b) < ihl+14 {
		return flow{}, 0, false
	}
	var f flow
	copy(f.src[:], b[12:16])
	copy(f.dst[:], b[16:20])
	t := b[ihl:]
	f.sp = binary.BigEndian.Uint16(t[0:2])
	f.dp = binary.BigEndian.Uint16(t[2:4])
	return f, t[13], true
}

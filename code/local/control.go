package local

import (
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// control is the host's end of an interpreter's control socket: a blocking
// descriptor read and written with plain system calls. Waiting for a reply
// then parks one thread in the kernel, which the reply wakes directly,
// instead of going through the runtime's poller; on a small machine that
// hop is a good part of a warm execute. Timeouts are the socket's own
// (SO_RCVTIMEO, SO_SNDTIMEO); cancellation shuts the socket down.
type control struct {
	fd      int
	timeout time.Duration // in force on the socket; used by one execute at a time

	once sync.Once
}

func newControl(fd int) *control { return &control{fd: fd, timeout: -1} }

// setTimeout bounds every later read and write (0: no bound).
func (c *control) setTimeout(d time.Duration) error {
	if d == c.timeout {
		return nil
	}
	tv := syscall.NsecToTimeval(d.Nanoseconds())
	if d > 0 && tv.Sec == 0 && tv.Usec == 0 {
		tv.Usec = 1
	}
	if err := syscall.SetsockoptTimeval(c.fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	if err := syscall.SetsockoptTimeval(c.fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err != nil {
		return err
	}
	c.timeout = d
	return nil
}

// send writes frame with rights attached to its first byte.
func (c *control) send(frame, rights []byte) error {
	var n int
	for {
		m, err := syscall.SendmsgN(c.fd, frame, rights, nil, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return sockErr(err)
		}
		n = m
		break
	}
	for n < len(frame) {
		m, err := syscall.Write(c.fd, frame[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return sockErr(err)
		}
		n += m
	}
	return nil
}

// Read reads what the interpreter sent; a timeout is
// os.ErrDeadlineExceeded and a closed or shut-down socket is io.EOF.
func (c *control) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(c.fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, sockErr(err)
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func sockErr(err error) error {
	if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
		return os.ErrDeadlineExceeded
	}
	return err
}

// interrupt ends the conversation for good: a blocked read or write
// returns, and the interpreter sees EOF.
func (c *control) interrupt() { _ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR) }

// close releases the descriptor, once nothing can still be using it.
func (c *control) close() { c.once.Do(func() { _ = syscall.Close(c.fd) }) }

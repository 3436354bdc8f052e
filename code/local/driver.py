# agentry's persistent-interpreter driver. Run as `python3 -u -c <this>`
# with fd 3 a Unix stream socket to the host.
#
# Protocol. Every frame is a 4-byte big-endian length, then that many bytes:
#   driver -> host, once:  b"R" + the Python version ("3.11.7")
#   host -> driver:        request id (8 bytes) + inputs length (4 bytes) +
#                          AGENTRY_INPUTS (UTF-8 JSON) + the code (UTF-8),
#                          with two descriptors attached (SCM_RIGHTS): the
#                          write ends of this execution's stdout and stderr
#                          pipes
#   driver -> host:        request id (8 bytes) + exit status (4 bytes,
#                          signed) + ok (1 byte)
# The code's output never travels on the socket: it goes to the pipes, which
# the host reads to EOF, so nothing the code prints can be mistaken for a
# frame. EOF on the socket means "stop".
#
# Imports are kept to what the interpreter has already loaded or what costs
# nothing (_socket, struct): `socket`, `json` and `traceback` would add tens
# of milliseconds to every session's start. traceback is loaded on the first
# error.

import builtins
import io
import os
import struct
import sys
import _socket

_MAX_FRAME = 64 << 20
_INT = struct.calcsize("i")
_ANCILLARY = _socket.CMSG_SPACE(2 * _INT)
_REQUEST = struct.Struct(">QI")
_REPLY = struct.Struct(">IQiB")


def _recv_request(sock):
    """Read one request: (id, inputs, code, [fds]), or None at EOF.

    The host sends a frame in one message with the fds attached, so the
    first read usually holds all of it."""
    data, anc, _flags, _addr = sock.recvmsg(1 << 16, _ANCILLARY)
    fds = []
    for level, kind, blob in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(blob) - len(blob) % _INT
            fds.extend(struct.unpack("%di" % (usable // _INT), blob[:usable]))
    buf = bytearray(data)
    while True:
        if len(buf) >= 4:
            (n,) = struct.unpack_from(">I", buf)
            if n > _MAX_FRAME or n < _REQUEST.size:
                raise ValueError("bad request frame")
            if len(buf) >= 4 + n:
                break
        chunk = sock.recv(1 << 16) if buf else b""
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None
        buf += chunk
    if len(buf) != 4 + n:
        raise ValueError("bytes after the request frame")
    rid, ninputs = _REQUEST.unpack_from(buf, 4)
    start = 4 + _REQUEST.size
    inputs = bytes(buf[start : start + ninputs]).decode("utf-8")
    code = bytes(buf[start + ninputs :]).decode("utf-8", "surrogateescape")
    return rid, inputs, code, fds


def _reply(sock, rid, status):
    sock.sendall(_REPLY.pack(_REPLY.size - 4, rid, status, status == 0))


def _fresh_stream(fd):
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def _flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


def _print_exception(exc, skip_driver=True):
    import traceback

    tb = exc.__traceback__
    if skip_driver:
        # Drop the driver's own frames so the model sees only its code.
        while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
            tb = tb.tb_next
    try:
        traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
    except Exception:
        os.write(2, ("%s: %s\n" % (type(exc).__name__, exc)).encode("utf-8", "backslashreplace"))


def _run(ns, src):
    """Run src in ns as a script's body; returns the exit status (0 when it
    completed). Like a script, and unlike a notebook, a trailing expression
    is not echoed: the code prints what it wants seen."""
    try:
        compiled = compile(src, "<cell>", "exec")
    except (SyntaxError, ValueError) as exc:
        _print_exception(exc, skip_driver=False)
        return 1
    try:
        exec(compiled, ns)
        return 0
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        print(code, file=sys.stderr)
        return 1
    except BaseException as exc:  # the model's code may raise anything
        _print_exception(exc)
        return 1


def main():
    sock = _socket.socket(fileno=3)
    os.set_inheritable(3, False)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    inputs = None
    hello = ("R%d.%d.%d" % sys.version_info[:3]).encode()
    sock.sendall(struct.pack(">I", len(hello)) + hello)
    # Started: from here on stderr outside an execute (a background thread
    # of the code, say) goes nowhere rather than into the start-up log,
    # which nobody reads any more and which must not grow. Between
    # executes fds 1 and 2 point at /dev/null; keep copies to point them
    # back.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    idle_out, idle_err = os.dup(1), os.dup(2)
    while True:
        req = _recv_request(sock)
        if req is None:
            return
        rid, want_inputs, src, fds = req
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            _reply(sock, rid, 125)
            continue
        if want_inputs != inputs:
            inputs = want_inputs
            os.environ["AGENTRY_INPUTS"] = inputs
        _flush()
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.close(fds[0])
        os.close(fds[1])
        # The code may have closed or replaced the streams last time.
        if sys.stdout is not sys.__stdout__ or getattr(sys.stdout, "closed", True):
            sys.stdout = sys.__stdout__ = _fresh_stream(1)
        if sys.stderr is not sys.__stderr__ or getattr(sys.stderr, "closed", True):
            sys.stderr = sys.__stderr__ = _fresh_stream(2)
        try:
            status = _run(ns, src)
        finally:
            _flush()
            # Dropping the last references to the pipes is what tells the
            # host the output is complete (EOF).
            os.dup2(idle_out, 1)
            os.dup2(idle_err, 2)
        _reply(sock, rid, status)


main()

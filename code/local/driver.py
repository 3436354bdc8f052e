# agentry's persistent-interpreter driver. Run as `python3 -u -c <this>`
# with fd 3 a Unix stream socket to the Go side.
#
# Protocol (every frame: 4-byte big-endian length, then that many bytes of
# UTF-8 JSON):
#   driver → host, once:  {"ready": true, "python": "3.11.7"}
#   host → driver:        {"id": n, "code": "...", "inputs": "{...}"} with two file
#                         descriptors attached (SCM_RIGHTS): the write ends
#                         of this execution's stdout and stderr pipes
#   driver → host:        {"id": n, "ok": bool, "exit": int}
# The code's output never travels on the socket: it goes to the pipes, which
# the host reads to EOF, so nothing the code prints can be mistaken for a
# frame. EOF on the socket means "stop".

import builtins
import io
import json
import os
import socket
import struct
import sys
import traceback

_MAX_FRAME = 64 << 20
_INT = struct.calcsize("i")
_ANCILLARY = socket.CMSG_SPACE(2 * _INT)


def _recv_request(sock):
    """Read one request: returns (payload, [fds]) or (None, []) at EOF.

    The host sends a frame in one message with the fds attached, so the
    first read usually holds all of it."""
    data, anc, _flags, _addr = sock.recvmsg(1 << 16, _ANCILLARY)
    fds = []
    for level, kind, blob in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(blob) - len(blob) % _INT
            fds.extend(struct.unpack("%di" % (usable // _INT), blob[:usable]))
    buf = bytearray(data)
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", bytes(buf[:4]))[0]:
        if len(buf) >= 4 and struct.unpack(">I", bytes(buf[:4]))[0] > _MAX_FRAME:
            raise ValueError("request frame too large")
        chunk = sock.recv(1 << 16) if buf else b""
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        buf += chunk
    (n,) = struct.unpack(">I", bytes(buf[:4]))
    if len(buf) != 4 + n:
        raise ValueError("bytes after the request frame")
    return json.loads(bytes(buf[4:]).decode("utf-8")), fds


def _send(sock, obj):
    body = json.dumps(obj).encode("utf-8")
    sock.sendall(struct.pack(">I", len(body)) + body)


def _fresh_stream(fd):
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def _flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


def _print_exception(exc):
    # Drop the driver's own frames so the model sees only its code.
    tb = exc.__traceback__
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
        traceback.print_exception(type(exc), exc, None, file=sys.stderr)
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
    sock = socket.socket(fileno=3)
    os.set_inheritable(3, False)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    # Between executes fds 1 and 2 point where they pointed at start
    # (/dev/null and the driver's log); keep copies to point them back.
    idle_out, idle_err = os.dup(1), os.dup(2)
    inputs = None
    _send(sock, {"ready": True, "python": "%d.%d.%d" % sys.version_info[:3]})
    while True:
        req, fds = _recv_request(sock)
        import time as _t; _t0=_t.perf_counter_ns()
        if req is None:
            return
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            _send(sock, {"id": req.get("id"), "ok": False, "exit": 1, "error": "request without its two output descriptors"})
            continue
        if req.get("inputs") != inputs:
            inputs = req.get("inputs") or "{}"
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
            status = _run(ns, req.get("code", ""))
        finally:
            _flush()
            # Dropping the last references to the pipes is what tells the
            # host the output is complete (EOF).
            os.dup2(idle_out, 1)
            os.dup2(idle_err, 2)
        _send(sock, {"id": req.get("id"), "ok": status == 0, "exit": status})
        os.write(idle_err, b"%d\n" % ((_t.perf_counter_ns()-_t0)//1000))


main()

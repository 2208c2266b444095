"""Connections of a local page (the control page, the preview), counted per purpose, so that
strangers without the token cannot starve the owner.

A thread and a slot per connection from the moment of accept let 40 idle connections (slowloris),
no token needed, take every slot of the control page: each request answered 503 while the
control socket still worked. Here:

- an accepted connection waits in one selector thread (`page-heads`) until its request head (the
  request line and the headers) has arrived: no thread, a deadline of `head_timeout_s`, at most
  `max_pending` waiting (a new one closes the longest-waiting one: a real request's head comes in
  one packet, so it is never the longest-waiting for long);
- the complete head is classified (`classify`: does it carry the token?) and the connection goes
  to the pool of its purpose, each with its own bound and read timeout: OWNER (the token holder)
  or GUEST (everything else: a 401, a login with a one-time code), so a flood of guests fills only
  the guests' pool; a full pool is answered 503 from the selector thread;
- the handler reads the head from what the selector buffered (no second wait on the client).

And before any of it, a connection from another local user's process is refused (403): the page
listens on 127.0.0.1, where every user can connect, so the kernel's socket table says whose the
client socket is, found by the whole connection (`vcamd.common.peers.loopback_peer_uid`: both addresses
and ports, IPv4 and IPv6) — as the control socket's SO_PEERCRED does. A connection the table does
not list is refused too. Then neither a token nor a one-time code read elsewhere lets another user in.
"""

from __future__ import annotations

import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from io import BufferedIOBase
from socketserver import StreamRequestHandler, ThreadingMixIn
from typing import TYPE_CHECKING, Any

from vcamd.common.peers import PeerUnknown, loopback_peer_uid

OWNER = "owner"
GUEST = "guest"
MAX_HEAD_BYTES = 64 * 1024
"""A request line and headers longer than this are refused (431): no page needs more."""

Classify = Callable[[str, str, dict[str, str]], str]
"""(method, target, lower-cased headers) → OWNER or GUEST."""


@dataclass(eq=False)
class _Waiting:
    sock: socket.socket
    address: Any
    deadline: float
    head: bytearray = field(default_factory=bytearray)


class GatedHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer whose connections get a thread only once their head has arrived, in
    the bounded pool of their purpose. `limits` and `read_timeouts` are per purpose (OWNER, GUEST)."""

    daemon_threads = True  # a stuck client must never keep the daemon from exiting
    block_on_close = False
    request_queue_size = 64
    timeout = 0.5
    """handle_request()'s wait for a connection, which serve_forever() calls once one is there: if it
    went away in between, the loop is back in its own wait (the one shutdown() wakes) within this."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type,
        *,
        classify: Classify,
        limits: dict[str, int],
        read_timeouts: dict[str, float],
        head_timeout_s: float = 5.0,
        max_pending: int = 128,
        on_refused: Callable[[int], None] = lambda status: None,
    ) -> None:
        self._classify = classify
        self._slots = {purpose: threading.BoundedSemaphore(n) for purpose, n in limits.items()}
        self.read_timeouts = dict(read_timeouts)
        self.head_timeout_s = head_timeout_s
        self.max_pending = max_pending
        self._on_refused = on_refused
        self._arrivals: queue.SimpleQueue[tuple[socket.socket, Any]] = queue.SimpleQueue()
        self._waiting: dict[socket.socket, _Waiting] = {}  # touched by the heads thread only
        self._admitted: dict[socket.socket, tuple[bytes, str]] = {}  # → (what was read, purpose)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._heads = threading.Thread(target=self._read_heads, name="page-heads", daemon=True)
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()  # not serving yet: a shutdown() before serve_forever() has nothing to wait for
        self._stop_r, self._stop_w = socket.socketpair()
        self._stop_w.setblocking(False)
        super().__init__(address, handler)  # binds (a failure calls server_close)
        self._heads.start()

    @property
    def waiting(self) -> int:
        """Connections whose head has not arrived yet."""
        return len(self._waiting)

    # ---- the accept loop: ended by shutdown() at once ----------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """socketserver's accept loop, but `shutdown()` wakes it at once instead of at its next poll
        (every closed page and every quit of the daemon waited up to `poll_interval` for it); the
        argument is kept for socketserver's signature and not needed."""
        self._stopped.clear()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._stop_r, selectors.EVENT_READ)
                while not self._stopping.is_set():
                    ready = [key.fileobj for key, _ in selector.select()]
                    if self in ready and not self._stopping.is_set():
                        self.handle_request()  # accept (ready now), then process_request; `timeout` bounds a lost one
                    self.service_actions()
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """End `serve_forever()` (from another thread) and wait until it has."""
        self._stopping.set()
        try:
            self._stop_w.send(b"x")
        except OSError:
            pass  # full: the loop is woken already
        self._stopped.wait()

    # ---- accept: hand over, never block ----------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        request.setblocking(False)
        self._arrivals.put((request, client_address))
        self._wake()

    def server_close(self) -> None:
        self._closing.set()
        self._wake()
        if self._heads.is_alive():
            self._heads.join(timeout=5)
        elif self._heads.ident is None:  # never started (the bind failed): its end does not run
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()
        super().server_close()
        self._stop_r.close()
        self._stop_w.close()

    # ---- the heads thread ------------------------------------------------------------------------

    def _read_heads(self) -> None:
        try:
            while not self._closing.is_set():
                events = self._selector.select(timeout=0.2)
                self._take_arrivals()
                for key, _ in events:
                    if key.fileobj is self._wake_r:
                        self._drain_wake()
                    elif key.fileobj in self._waiting:
                        self._read(self._waiting[key.fileobj])
                self._expire(time.monotonic())
        finally:
            for waiting in list(self._waiting.values()):
                self._drop(waiting)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _take_arrivals(self) -> None:
        while True:
            try:
                sock, address = self._arrivals.get_nowait()
            except queue.Empty:
                return
            if len(self._waiting) >= self.max_pending:
                # The longest-waiting one makes room: it had its chance; the new one may be the owner.
                self._drop(min(self._waiting.values(), key=lambda w: w.deadline))
            refusal = stranger(sock)
            if refusal is not None:
                self._say_and_close(sock, 403, "Forbidden", refusal)
                continue
            waiting = _Waiting(sock, address, time.monotonic() + self.head_timeout_s)
            try:
                self._selector.register(sock, selectors.EVENT_READ, None)
            except (ValueError, OSError):
                _close(sock)
                continue
            self._waiting[sock] = waiting

    def _read(self, waiting: _Waiting) -> None:
        try:
            data = waiting.sock.recv(MAX_HEAD_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self._drop(waiting)
        if not data:
            return self._drop(waiting)  # the client gave up
        waiting.head += data
        end = _head_end(waiting.head)
        if end < 0:
            if len(waiting.head) > MAX_HEAD_BYTES:
                self._forget(waiting)
                self._say_and_close(waiting.sock, 431, "Request Header Fields Too Large", "the request head is too large")
            return
        self._forget(waiting)
        purpose = self._purpose(bytes(waiting.head[:end]))
        slots = self._slots[purpose]
        if not slots.acquire(blocking=False):
            self._say_and_close(waiting.sock, 503, "Service Unavailable",
                                "too many connections to this page; close other tabs or try again")
            return
        with self._lock:
            self._admitted[waiting.sock] = (bytes(waiting.head), purpose)
        try:
            waiting.sock.setblocking(True)
            ThreadingMixIn.process_request(self, waiting.sock, waiting.address)  # a handler thread
        except BaseException:
            self._release(waiting.sock)
            _close(waiting.sock)
            raise

    def _purpose(self, head: bytes) -> str:
        lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
        method, _, rest = lines[0].partition(" ")
        target = rest.partition(" ")[0]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        try:
            return self._classify(method, target, headers)
        except Exception:  # a head that confuses the classifier is no owner's
            return GUEST

    def _expire(self, now: float) -> None:
        for waiting in [w for w in self._waiting.values() if w.deadline < now]:
            if not waiting.head:  # it never said a word: nothing to answer
                self._drop(waiting)
                continue
            self._forget(waiting)
            self._say_and_close(waiting.sock, 408, "Request Timeout",
                                f"no complete request head within {self.head_timeout_s:g} s")

    def _forget(self, waiting: _Waiting) -> None:
        self._waiting.pop(waiting.sock, None)
        try:
            self._selector.unregister(waiting.sock)
        except (KeyError, ValueError):
            pass

    def _drop(self, waiting: _Waiting) -> None:
        self._forget(waiting)
        _close(waiting.sock)

    def _say_and_close(self, sock: socket.socket, status: int, reason: str, message: str) -> None:
        """A short answer without a thread: sent if the socket takes it now, then closed."""
        self._on_refused(status)
        body = (message + "\n").encode("utf-8")
        head = (f"HTTP/1.0 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                + ("Retry-After: 1\r\n" if status == 503 else "") + "\r\n").encode("ascii")
        try:
            sock.setblocking(False)
            sock.send(head + body)
        except OSError:
            pass
        _close(sock)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # closed, or the pipe is full: the selector wakes either way

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    # ---- handler threads -------------------------------------------------------------------------

    def admitted(self, sock: socket.socket) -> tuple[bytes, str]:
        """For the handler: what the heads thread read of this connection, and its purpose."""
        with self._lock:
            return self._admitted.get(sock, (b"", GUEST))

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, sock: socket.socket) -> None:
        with self._lock:
            admitted = self._admitted.pop(sock, None)
        if admitted is not None:
            self._slots[admitted[1]].release()


class BufferedHead:
    """The handler's rfile: first what the heads thread already read, then the socket."""

    def __init__(self, head: bytes, rest: BufferedIOBase) -> None:
        self._head = memoryview(head)
        self._at = 0
        self._rest = rest

    def readline(self, limit: int = -1) -> bytes:
        left = self._head[self._at:]
        end = bytes(left).find(b"\n") + 1 if left else 0
        take = end if end > 0 else len(left)
        if limit >= 0:
            take = min(take, limit)
        line = bytes(left[:take])
        self._at += take
        if line.endswith(b"\n") or (limit >= 0 and len(line) >= limit):
            return line
        return line + self._rest.readline(-1 if limit < 0 else limit - len(line))

    def read(self, size: int = -1) -> bytes:
        left = self._head[self._at:]
        take = len(left) if size < 0 else min(size, len(left))
        data = bytes(left[:take])
        self._at += take
        if size < 0:
            return data + self._rest.read()
        if len(data) < size:
            data += self._rest.read(size - len(data))
        return data

    def close(self) -> None:
        self._rest.close()


if TYPE_CHECKING:  # the mixin's partner, for the type checker: what `setup` and `self.server` are
    _Handler = StreamRequestHandler
else:
    _Handler = object


class GatedHandler(_Handler):
    """Mixed into the handler of a GatedHTTPServer (before BaseHTTPRequestHandler): the read
    timeout of the connection's purpose, and an rfile that starts with the head already read."""

    purpose = GUEST
    server: GatedHTTPServer
    request: socket.socket

    def setup(self) -> None:
        head, self.purpose = self.server.admitted(self.request)
        # Per connection on purpose (StreamRequestHandler.setup reads self.timeout); typeshed
        # declares it a class variable, as most handlers set it once for all.
        self.timeout = self.server.read_timeouts[self.purpose]  # type: ignore[misc]
        super().setup()
        # BufferedHead reads what http.server reads of an rfile (readline, read) and is not a whole
        # BufferedIOBase (nor needs to be): the one place the two types meet.
        self.rfile = BufferedHead(head, self.rfile)  # type: ignore[assignment]


def stranger(sock: socket.socket) -> str | None:
    """Why a connection must be refused before a byte of it is read (another user's, or one whose
    owner the kernel cannot name), else None. Where no socket table exists (not Linux), None."""
    try:
        uid = loopback_peer_uid(sock)
    except PeerUnknown as exc:
        return f"refused: whose connection this is cannot be told ({exc})"
    except Exception as exc:  # noqa: BLE001 — an unreadable table refuses; it never ends the heads thread
        return f"refused: whose connection this is cannot be told ({type(exc).__name__})"
    if uid is not None and uid != os.geteuid():
        return f"refused: uid {uid} is not this page's user"
    return None


def _head_end(data: bytearray) -> int:
    """Where the request head ends (the blank line), or -1 while it has not arrived."""
    crlf = data.find(b"\r\n\r\n")
    lf = data.find(b"\n\n")
    ends = [i for i in (crlf, lf) if i >= 0]
    return min(ends) if ends else -1


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass

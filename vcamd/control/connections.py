"""How the control server holds its connections: one selector thread, a few workers, bounded.

A thread per connection let 500 idle clients hold 395 threads, and 200 status clients at once
compete with the camera loop for the GIL. Here:

- one thread (`vcamd-control`) accepts and waits on every open connection with a selector; an
  idle connection costs a file descriptor and a small buffer, no thread;
- a complete request line is handed to a small fixed pool of workers, which answer it and give
  the connection back to the selector (a client may send several requests on one connection);
- heavy requests (loading a source-face photo: a decode of up to 64 megapixels) go to one lane
  of their own, one at a time with a short queue; beyond it the answer is "busy, try again", so
  eight concurrent set-face requests never hold eight decoded photos in memory (and the engine's
  `vcamd.files.photo_lane` answers "busy" while the control page or the tray reads a photo);
- at most `max_connections` are open. Past the bound a new client makes room by closing the
  longest-idle connection (told why); when none has been idle for a moment, new clients wait in
  the kernel's listen queue, and if that lasts `refuse_after_s` they are refused with one line.
  A connection that sends no complete line within `request_timeout_s` is closed (with an error
  line if it never got an answer).

A malformed, oversized or slow request gets an error line or a closed connection, never a crash
of the server or a blocked worker.
"""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from vcamd.common.threads import lower_thread_priority
from vcamd.control.protocol import MAX_REQUEST_BYTES, encode_error
from vcamd.files.photo_lane import PHOTO_BUSY

log = logging.getLogger(__name__)

MAX_DISCARD_BYTES = 16 * 1024 * 1024
"""How much of an oversized request is read and thrown away before the connection is dropped."""

EVICT_IDLE_S = 0.25
"""A connection idle this long may be closed to make room (a fresh one is about to send its request)."""

REFUSE_AFTER_S = 2.0
"""Full for this long with nothing to evict: waiting clients are refused with one line."""

SEND_TIMEOUT_S = 10.0
"""A client that does not read its answer (a snapshot is megabytes) for this long is dropped."""

TOO_LARGE = (f"request too large (over {MAX_REQUEST_BYTES} bytes) — "
             "a request is a command and its arguments, never data")

Answer = tuple[bytes, bool, Callable[[], None] | None]
"""(response line, keep the connection open, action to run after the response is sent)."""


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    refusal: bytes | None  # the answer to every line from a peer we do not serve (another uid)
    deadline: float  # a complete request line must arrive before this (monotonic)
    idle_since: float
    buffer: bytearray = field(default_factory=bytearray)
    discarding: int = 0  # bytes of an oversized line thrown away so far; 0 = reading normally
    answered: int = 0

    def next_item(self) -> tuple[str, bytes] | None:
        """The next complete thing to answer: ("line", request) or ("too_large", b"") — or
        ("too_large_close", b"") when an endless line outgrew the discard bound; None: need more."""
        newline = self.buffer.find(b"\n")
        if self.discarding:
            if newline < 0:
                self.discarding += len(self.buffer)
                self.buffer.clear()
                return ("too_large_close", b"") if self.discarding > MAX_DISCARD_BYTES else None
            del self.buffer[: newline + 1]
            self.discarding = 0
            return ("too_large", b"")  # back in step: the next line can be served
        if newline >= 0:
            line = bytes(self.buffer[: newline + 1])
            del self.buffer[: newline + 1]
            if len(line.rstrip(b"\r\n")) > MAX_REQUEST_BYTES:
                return ("too_large", b"")
            return ("line", line)
        if len(self.buffer) > MAX_REQUEST_BYTES + 2:
            self.discarding = len(self.buffer)
            self.buffer.clear()
        return None


class ConnectionLoop:
    """Serves request lines arriving on `listener` with `answer(line) -> Answer`.

    `refuse(sock)`: a refusal line for a connection that must not be served (checked at accept),
    or None. `is_heavy(line)`: whether the request goes to the one-at-a-time lane.
    """

    def __init__(
        self,
        listener: socket.socket,
        answer: Callable[[bytes], Answer],
        *,
        refuse: Callable[[socket.socket], bytes | None],
        is_heavy: Callable[[bytes], bool],
        request_timeout_s: float,
        max_connections: int = 64,
        workers: int = 3,
        heavy_queue: int = 2,
        busy_message: str = PHOTO_BUSY,
    ) -> None:
        self._listener = listener
        self._answer = answer
        self._refuse = refuse
        self._is_heavy = is_heavy
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self._busy_message = busy_message
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._returned: queue.SimpleQueue[_Connection] = queue.SimpleQueue()  # from workers, back to the selector
        self._jobs: queue.SimpleQueue[tuple[_Connection, tuple[str, bytes]] | None] = queue.SimpleQueue()
        self._heavy: queue.Queue[tuple[_Connection, bytes] | None] = queue.Queue(maxsize=heavy_queue)
        self._open: set[_Connection] = set()  # every open connection (touched by the selector thread only)
        self._waiting: set[_Connection] = set()  # those in the selector, not being answered
        self._closing = threading.Event()
        self._accepting = True
        self._full_since: float | None = None
        self._threads = [threading.Thread(target=self._select_loop, name="vcamd-control", daemon=True)]
        self._threads += [threading.Thread(target=self._work_loop, name=f"vcamd-control-{n}", daemon=True)
                          for n in range(workers)]
        self._threads.append(threading.Thread(target=self._heavy_loop, name="vcamd-control-heavy", daemon=True))
        self.refused = 0  # connections turned away at the bound
        self.evicted = 0  # idle connections closed to make room

    @property
    def thread_count(self) -> int:
        return len(self._threads)

    def start(self) -> None:
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        for thread in self._threads:
            thread.start()

    def close(self, timeout: float = 2.0) -> None:
        """Stop serving: no new connections, every open one closed. Safe from a worker (quit)."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._wake()
        for _ in range(len(self._threads)):
            self._jobs.put(None)
        try:
            self._heavy.put_nowait(None)
        except queue.Full:
            pass  # the heavy thread sees _closing after its current job
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread() and thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))

    # ---- the selector thread -------------------------------------------------------------------

    def _select_loop(self) -> None:
        lower_thread_priority()  # control requests never outrank the camera
        try:
            while not self._closing.is_set():
                events = self._selector.select(timeout=0.2)
                # Answered connections first: they are progress, and may free room for new clients.
                self._take_back_returned()
                for key, _ in events:
                    if key.data == "listener":
                        self._accept_all()
                    elif key.data == "wake":
                        self._drain_wake()
                    elif key.data in self._waiting:  # not dropped or evicted earlier in this round
                        self._read_guarded(key.data)
                now = time.monotonic()
                self._expire(now)
                self._resume_accepting_when_due(now)
        except Exception:  # a bug here must not leave the daemon without a control endpoint silently
            log.exception("the control connection loop failed")
        finally:
            for conn in list(self._open):
                self._drop(conn)
            self._selector.close()
            self._listener.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept_all(self) -> None:
        refused_any = False
        while True:
            now = time.monotonic()
            refuse = False
            if len(self._open) >= self.max_connections and self._evict_one(now):
                self._full_since = None  # room was made: the clock for refusing starts again
            elif len(self._open) >= self.max_connections:
                if self._full_since is None:
                    self._full_since = now
                if now - self._full_since < REFUSE_AFTER_S:
                    self._pause_accepting()  # the kernel queues them a moment; room comes fast
                    return
                refuse = True
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                if refused_any:
                    self._full_since = now  # those who waited were told; later arrivals get their own wait
                return
            except OSError as exc:  # EMFILE and the like: leave it queued, try again next round
                log.warning("control socket: cannot accept a connection (%s)", exc)
                return
            if refuse:
                refused_any = True
                self.refused += 1
                _say_and_close(sock, encode_error(f"busy: {len(self._open)} control connections are open and "
                                                  "active (the most allowed) — try again in a moment"))
            else:
                self._admit(sock, now)

    def _pause_accepting(self) -> None:
        if self._accepting:
            self._selector.unregister(self._listener)
            self._accepting = False

    def _resume_accepting_when_due(self, now: float) -> None:
        if len(self._open) < self.max_connections:
            self._full_since = None
        if self._accepting:
            return
        room = len(self._open) < self.max_connections or any(self._evictable(c, now) for c in self._waiting)
        if room or (self._full_since is not None and now - self._full_since >= REFUSE_AFTER_S):
            self._selector.register(self._listener, selectors.EVENT_READ, "listener")
            self._accepting = True

    def _admit(self, sock: socket.socket, now: float) -> None:
        try:
            refusal = self._refuse(sock)
        except Exception:  # noqa: BLE001 — who is at the other end cannot be told: not served
            log.warning("control socket: cannot tell who connected; the connection is closed", exc_info=True)
            sock.close()
            return
        sock.settimeout(SEND_TIMEOUT_S)  # reads happen only when the selector says data is there
        conn = _Connection(sock, refusal, deadline=now + self.request_timeout_s, idle_since=now)
        self._open.add(conn)
        self._wait_for_data(conn)

    @staticmethod
    def _evictable(conn: _Connection, now: float) -> bool:
        return not conn.buffer and not conn.discarding and now - conn.idle_since >= EVICT_IDLE_S

    def _evict_one(self, now: float) -> bool:
        """Close the connection idle for longest (nothing half-sent, not being answered) to make room."""
        idle = [c for c in self._waiting if self._evictable(c, now)]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.idle_since)
        self.evicted += 1
        _say_and_close(oldest.sock, encode_error("closed: too many control connections; this idle one made room"),
                       read_first=False)
        self._forget(oldest)
        return True

    def _wait_for_data(self, conn: _Connection) -> None:
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        except (ValueError, OSError):  # closed meanwhile
            self._drop(conn)
            return
        self._waiting.add(conn)

    def _read_guarded(self, conn: _Connection) -> None:
        """`_read`; a fault in one connection drops that connection, never the selector thread."""
        try:
            self._read(conn)
        except Exception:  # noqa: BLE001
            log.exception("control: reading a request failed unexpectedly")
            _say_and_close(conn.sock, encode_error("internal error while reading the request"), read_first=False)
            self._forget(conn)

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(256 * 1024)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            self._drop(conn)  # the client closed the connection
            return
        conn.buffer += data
        self._dispatch_if_complete(conn)

    def _dispatch_if_complete(self, conn: _Connection) -> None:
        item = conn.next_item()
        if item is None:
            return
        self._selector.unregister(conn.sock)
        self._waiting.discard(conn)
        self._jobs.put((conn, item))

    def _take_back_returned(self) -> None:
        while True:
            try:
                conn = self._returned.get_nowait()
            except queue.Empty:
                return
            self._full_since = None  # an answer went out: progress, waiting clients are not refused yet
            if conn.sock.fileno() < 0:  # answered and closed by its worker
                self._forget(conn)
                continue
            now = time.monotonic()
            conn.deadline = now + self.request_timeout_s
            conn.idle_since = now
            item = conn.next_item()  # pipelined requests already in the buffer
            if item is not None:
                self._jobs.put((conn, item))
            else:
                self._wait_for_data(conn)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._waiting if c.deadline < now]:
            message = None if conn.answered else encode_error(f"no complete request line within {self.request_timeout_s:g} s")
            _say_and_close(conn.sock, message, read_first=False)
            self._forget(conn)

    def _drop(self, conn: _Connection) -> None:
        try:
            conn.sock.close()
        finally:
            self._forget(conn)

    def _forget(self, conn: _Connection) -> None:
        if conn in self._waiting:
            self._waiting.discard(conn)
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        self._open.discard(conn)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # already closed, or the pipe is full: the selector wakes either way

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    # ---- workers -------------------------------------------------------------------------------

    def _work_loop(self) -> None:
        lower_thread_priority()  # control requests never outrank the camera
        while True:
            job = self._jobs.get()
            if job is None or self._closing.is_set():
                return
            conn, (kind, line) = job
            self._guarded(conn, lambda: self._serve(conn, kind, line))

    def _guarded(self, conn: _Connection, work: Callable[[], None]) -> None:
        """Run one request's work on a worker; whatever it raises is answered with one error line
        and the connection closed — the worker itself never dies (three that did, on three
        malformed lines, left the socket answering nobody while the daemon ran on)."""
        try:
            work()
        except Exception as exc:  # noqa: BLE001 — the class of fault is "anything", by design
            log.exception("control request failed unexpectedly")
            self._finish(conn, encode_error(f"internal error: {type(exc).__name__}: {exc}"), keep_open=False)

    def _serve(self, conn: _Connection, kind: str, line: bytes) -> None:
        if kind != "line":
            keep = kind == "too_large"
            self._finish(conn, encode_error(TOO_LARGE), keep_open=keep)
            return
        if conn.refusal is not None:
            self._finish(conn, conn.refusal, keep_open=False)
            return
        if not line.strip():
            self._finish(conn, None, keep_open=True)
            return
        if self._is_heavy(line):
            try:
                self._heavy.put_nowait((conn, line))
            except queue.Full:
                self._finish(conn, encode_error(self._busy_message), keep_open=True)
            return
        self._answer_and_finish(conn, line)

    def _heavy_loop(self) -> None:
        lower_thread_priority()  # control requests never outrank the camera
        while True:
            job = self._heavy.get()
            if job is None or self._closing.is_set():
                return
            conn, line = job
            self._guarded(conn, lambda: self._answer_and_finish(conn, line))

    def _answer_and_finish(self, conn: _Connection, line: bytes) -> None:
        response, keep_open, after = self._answer(line)
        self._finish(conn, response, keep_open=keep_open, after=after)

    def _finish(self, conn: _Connection, response: bytes | None, *, keep_open: bool,
                after: Callable[[], None] | None = None) -> None:
        delivered = True
        if response is not None:
            try:
                conn.sock.sendall(response)
                conn.answered += 1
            except OSError:
                delivered = False  # the client went away (or did not read for SEND_TIMEOUT_S)
        if after is not None:
            try:
                after()  # even when the client hung up without reading: `vcamd quit; exit` must still stop it
            except Exception:  # noqa: BLE001 — answered already; the connection still goes back
                log.exception("control: the action after an answer failed")
        if delivered and keep_open and not self._closing.is_set():
            self._returned.put(conn)
        else:
            _close_quietly(conn.sock)
            self._returned.put(conn)  # the selector thread forgets it (a closed socket is dropped there)
        self._wake()


def _say_and_close(sock: socket.socket, message: bytes | None, *, read_first: bool = True) -> None:
    """Send one line without blocking and close. What the client already sent is read first, so
    the answer is not lost to a connection reset."""
    try:
        sock.setblocking(False)
        if read_first:
            try:
                sock.recv(MAX_REQUEST_BYTES)
            except (BlockingIOError, InterruptedError):
                pass
        if message is not None:
            sock.send(message)
    except OSError:
        pass
    _close_quietly(sock)


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass

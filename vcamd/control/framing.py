"""One connection of the control socket, as bytes: its request lines framed one by one from what
arrives, an oversized line thrown away up to a bound, and a last line said before closing. The
selector and the workers that answer (`vcamd.control.connections`) hold many of these."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from vcamd.control.protocol import MAX_REQUEST_BYTES

MAX_DISCARD_BYTES = 16 * 1024 * 1024
"""How much of an oversized request is read and thrown away before the connection is dropped."""

TOO_LARGE = (f"request too large (over {MAX_REQUEST_BYTES} bytes) — "
             "a request is a command and its arguments, never data")


@dataclass(eq=False)
class Connection:
    """One open connection: its socket, what it sent that is not yet a line, and when it must send one."""

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


def say_and_close(sock: socket.socket, message: bytes | None, *, read_first: bool = True) -> None:
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
    close_quietly(sock)


def close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass

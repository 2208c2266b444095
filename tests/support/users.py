"""Acting as another local user (the machine is shared: no other user reaches what is the daemon's)."""

from __future__ import annotations

import os
import socket

import pytest


def as_another_user(port: int, request: bytes, uid: int = 65534) -> bytes:
    """Send `request` to 127.0.0.1:`port` from a child process running as `uid`; its answer's first line."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # only system calls here: the parent has threads
        answer = b"no answer"
        try:
            os.setgid(uid)
            os.setuid(uid)
            with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
                sock.sendall(request)
                answer = sock.recv(4096) or b"closed"
        except BaseException as exc:  # noqa: BLE001 (anything goes back to the parent as text)
            answer = repr(exc).encode()
        finally:
            os.write(write_end, answer.split(b"\r\n")[0][:200])
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(child, 0)
    return answer


needs_root = pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0,
                                reason="switching to another uid needs root")

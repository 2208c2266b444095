"""Acting as another local user (the machine is shared: no other user reaches what is the daemon's)."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

NOBODY = 65534


def in_child_as(uid: int, work: Callable[[], bytes]) -> bytes:
    """Run `work` in a forked child process switched to `uid` (its gid, no other groups); what it
    returns, or b"EXC <type>: <message>" for what it raised. Only system calls in `work`: the
    parent has threads."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        answer = b""
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            answer = work()
        except BaseException as exc:  # noqa: BLE001 (anything goes back to the parent as text)
            answer = f"EXC {type(exc).__name__}: {exc}".encode()
        finally:
            os.write(write_end, answer)
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(child, 0)
    return answer


def as_another_user(port: int, request: bytes, uid: int = NOBODY, *, bind: tuple[str, int] | None = None) -> bytes:
    """Send `request` to 127.0.0.1:`port` from a child process running as `uid`; its answer's first line.

    `bind`: the client's own address and port, chosen before connecting (another loopback address,
    or an IPv6 socket's IPv4-mapped one, e.g. ("::ffff:127.0.0.2", PORT)): an IPv6 address connects
    to the page's IPv4-mapped address."""

    def ask() -> bytes:
        ipv6 = bind is not None and ":" in bind[0]
        with socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(20)
            if bind is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # over an earlier try's TIME_WAIT
                sock.bind(bind)
            sock.connect(("::ffff:127.0.0.1" if ipv6 else "127.0.0.1", port))
            sock.sendall(request)
            return sock.recv(4096) or b"closed"

    return in_child_as(uid, ask).split(b"\r\n")[0][:200]


def read_as_another_user(path: str, uid: int = NOBODY) -> bytes:
    """What a child process running as `uid` gets when it reads `path`: its bytes, or b"EXC <error>"."""

    def read() -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.read(fd, 65536)
        finally:
            os.close(fd)

    return in_child_as(uid, read)


needs_root = pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0,
                                reason="switching to another uid needs root")


@functools.cache
def can_run_as(uid: int = NOBODY) -> str | None:
    """Why this test's Python cannot run vcamd as `uid` (not root, or the checkout is not readable
    by that user), else None."""
    from support.cli import as_user

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "switching to another uid needs root"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = subprocess.run([*as_user(uid), sys.executable, "-c", "import vcamd.cli"], capture_output=True, text=True,
                           timeout=60, cwd="/")
    if probe.returncode != 0:
        return f"uid {uid} cannot run this checkout's Python and vcamd: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def skip_unless_runs_as(uid: int = NOBODY) -> None:
    """pytest.skip (with its one reason) unless vcamd can be run as `uid` here."""
    reason = can_run_as(uid)
    if reason is not None:
        pytest.skip(reason)

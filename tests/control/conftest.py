"""Fixtures for the control API tests: a small real `Controllable`, short runtime dirs, raw sockets."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from support.fakes import FakeEngine

from vcamd.common.errors import ConfigError, FaceError
from vcamd.control.server import ControlServer


class SmallEngine(FakeEngine):
    """The control API tests' `Controllable` (tests/support/fakes.py, thread-safe).

    It reads face photos with cv2 (its own error text) and encodes its output frame as PNG, so the
    server's answers carry real data; it counts reloads, and a test can make its status fail or
    its reload find a problem.
    """

    def __init__(self, output_frame: np.ndarray) -> None:
        super().__init__(output_frame)
        self.reloads = 0
        self.reload_problem: str | None = None
        self.fail_status_with: Exception | None = None
        self.latency_ms: float | dict[str, float] = 41.5
        self.extra: dict[str, Any] = {}  # more status keys, as a real engine may add

    def status(self) -> dict[str, Any]:
        with self._lock:
            if self.fail_status_with is not None:
                raise self.fail_status_with
            return {
                "enabled": self.enabled,
                "state": "running",
                "level": self.level if self.quality is None else self.quality,
                "quality": "auto" if self.quality is None else self.quality.name,
                "fps": 29.97,
                "latency_ms": self.latency_ms,
                "source_face": self.source_face,
                "providers": {"scrfd_500m_kps.onnx": "CPUExecutionProvider"},
                "config_error": self.config_error,
                **self.extra,
            }

    def set_source_face(self, path: Path) -> None:
        image = cv2.imread(str(path))
        if image is None:
            raise FaceError(f"source face {path} is not a readable image", fix="use a PNG or JPEG photo")
        with self._lock:
            self.source_face = path

    def reload_config(self) -> None:
        with self._lock:
            self.reloads += 1
            if self.reload_problem:
                self.config_error = self.reload_problem
                raise ConfigError("/tmp/config.toml", [self.reload_problem])
            self.config_error = None


@pytest.fixture
def engine(newton: np.ndarray) -> SmallEngine:
    return SmallEngine(newton)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh directory with a short path (a Unix socket path must fit in 108 bytes)."""
    base = Path(tempfile.mkdtemp(prefix="vc-", dir="/tmp"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def runtime(short_dir: Path) -> Path:
    """A runtime dir that does not exist yet: the server must create it (0700)."""
    return short_dir / "rt"


@pytest.fixture(params=["unix", "tcp"])
def server(request: pytest.FixtureRequest, engine: SmallEngine, runtime: Path) -> Iterator[ControlServer]:
    """A started control server on each transport (TCP is the Windows path, forced here)."""
    srv = ControlServer(engine, runtime, transport=request.param, request_timeout_s=1.0).start()
    try:
        yield srv
    finally:
        srv.close()


def connect_raw(srv: ControlServer, timeout_s: float = 5.0) -> socket.socket:
    if srv.transport == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.connect(srv.address)
    return sock


@pytest.fixture
def connect() -> Callable[..., socket.socket]:
    """Open a raw client socket to a started server."""
    return connect_raw


@pytest.fixture
def raw() -> Callable[..., list[dict[str, Any]]]:
    """Send raw bytes to a server, read `answers` response lines (JSON-decoded)."""

    def send(srv: ControlServer, data: bytes, answers: int = 1, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        with connect_raw(srv, timeout_s) as sock, sock.makefile("rb") as reader:
            sock.sendall(data)
            lines = [reader.readline() for _ in range(answers)]
        return [json.loads(line) for line in lines if line]

    return send


@pytest.fixture
def request_line() -> Callable[..., bytes]:
    """A well-formed request line for a server, with its token when it speaks TCP."""

    def make(srv: ControlServer, cmd: str, args: dict[str, Any] | None = None) -> bytes:
        message: dict[str, Any] = {"cmd": cmd, "args": args or {}}
        if srv.token is not None:
            message["token"] = srv.token
        return json.dumps(message).encode() + b"\n"

    return make


@pytest.fixture
def as_nobody() -> Callable[[Callable[[], bytes]], bytes]:
    """Run `fn` in a forked child that has dropped to uid/gid 65534 (nobody); return its bytes.

    Needs root (to setuid); the child reports an exception as b"EXC <type>: <message>".
    """
    import os

    from support.users import NOBODY, in_child_as

    if os.geteuid() != 0:
        pytest.skip("needs root to impersonate another user (setuid to nobody)")
    return lambda fn: in_child_as(NOBODY, fn)

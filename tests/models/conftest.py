"""A real HTTP file server on 127.0.0.1 for the model-store tests.

It serves byte strings at paths, answers Range requests with 206, and can misbehave on purpose:
reset the connection after N bytes (once), advertise the full length and close early, or send
no Content-Length at all (the body then ends when the connection closes, cleanly).

`enhancer_onnx` builds real ONNX models with the GFPGAN signature (vcamd.bench.standins) for the tests of
models whose hash is not published, where the store must load the file to accept it.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    data: bytes
    reset_after: int | None = None
    """Send this many bytes, pause, then reset the connection (RST) — only `resets` times."""
    resets: int = 1
    truncate_after: int | None = None
    """Advertise the full length, send this many bytes, close cleanly — every time."""
    honour_range: bool = True
    send_length: bool = True
    """False: no Content-Length (nor Content-Range); the body ends with a clean close."""


@dataclass
class Hit:
    path: str
    range: str | None
    status: int
    body_bytes: int


@dataclass
class FileServer:
    base: str
    files: dict[str, Served] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)

    def serve(self, path: str, data: bytes, **behaviour: object) -> str:
        """Serve `data` at `path`; returns its full URL."""
        self.files[path] = Served(data, **behaviour)  # type: ignore[arg-type]
        return self.base + path


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the resets and early closes are on purpose


def _make_handler(state: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            # Each hit is recorded before its response goes out: a client that has the response
            # then sees the hit (recorded after, a test on a busy machine read `hits` first).
            range_header = self.headers.get("Range")
            served = state.files.get(self.path)
            if served is None:
                body = b"not found\n"
                state.hits.append(Hit(self.path, range_header, 404, 0))
                self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            data, start, status = served.data, 0, 200
            match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
            if match and served.honour_range:
                start = int(match.group(1))
                if start >= len(data):
                    state.hits.append(Hit(self.path, range_header, 416, 0))
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            body = data[start:]
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            if served.send_length:
                self.send_header("Content-Length", str(len(body)))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_header("Connection", "close")  # HTTP/1.1 without a length: the close ends the body
                self.close_connection = True
            self.end_headers()
            if served.reset_after is not None and served.resets > 0:
                served.resets -= 1
                sent = body[: served.reset_after]
                state.hits.append(Hit(self.path, range_header, status, len(sent)))
                self.wfile.write(sent)
                self.wfile.flush()
                time.sleep(0.3)  # let the client read what was sent before the reset
                # SO_LINGER 0 makes close() send RST: a dropped connection, not a clean end.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
                return
            if served.truncate_after is not None:
                sent = body[: served.truncate_after]
                state.hits.append(Hit(self.path, range_header, status, len(sent)))
                self.wfile.write(sent)
                self.wfile.flush()
                self.close_connection = True
                return
            state.hits.append(Hit(self.path, range_header, status, len(body)))
            self.wfile.write(body)

    return Handler


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    state = FileServer(base="")
    server = _QuietServer(("127.0.0.1", 0), _make_handler(state))
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    # serve_forever looks for shutdown() every poll_interval (0.5 s by default): each test's teardown waited that.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="test-file-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def blob() -> "BlobFactory":
    return BlobFactory()


class BlobFactory:
    """Random bytes with their SHA-256 — stand-ins for model files."""

    def __call__(self, size: int) -> tuple[bytes, str]:
        data = os.urandom(size)
        return data, hashlib.sha256(data).hexdigest()


@pytest.fixture
def enhancer_onnx(tmp_path_factory) -> "EnhancerFactory":
    return EnhancerFactory(tmp_path_factory.mktemp("standins"))


class EnhancerFactory:
    """Bytes of a real ONNX model with GFPGAN 1.4's signature, padded with an unused random
    initializer to about `size` bytes (so a cut lands inside the graph, as in a real 340 MB file);
    each call gives different bytes. Returns (bytes, sha256)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0

    def __call__(self, size: int = 300_000) -> tuple[bytes, str]:
        import numpy as np
        import onnx
        from onnx import numpy_helper

        from vcamd.bench.standins import build_enhancer

        self.count += 1
        path = build_enhancer(self.folder / f"enhancer{self.count}.onnx")
        model = onnx.load_model(str(path))
        padding = np.frombuffer(os.urandom(max(4, size // 4 * 4)), dtype=np.float32).copy()
        model.graph.initializer.append(numpy_helper.from_array(padding, "unused_padding"))
        data = model.SerializeToString()
        return data, hashlib.sha256(data).hexdigest()


@pytest.fixture
def manifest_entry() -> "EntryFactory":
    return EntryFactory()


class EntryFactory:
    def __call__(self, url: str, file: str, sha256: str, size: int | None = None, role: str = "swapper", **extra: object) -> dict:
        entry: dict = {"role": role, "file": file, "sha256": sha256, "url": url, "license": "test"}
        if size is not None:
            entry["size"] = size
        entry.update(extra)
        return entry


@pytest.fixture(scope="session")
def vcamd_cli() -> "CliRunner":
    return CliRunner()


class CliRunner:
    """Runs `.venv/bin/python -m vcamd ...` (or the current interpreter) as a real subprocess."""

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> "subprocess.CompletedProcess[str]":

        python = REPO / ".venv" / "bin" / "python"
        exe = str(python) if python.exists() else sys.executable
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [exe, "-m", "vcamd", *args], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout
        )

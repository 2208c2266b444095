"""A real Triton Inference Server (`vcamd serve`, PyTriton) for the tests, in its own environment.

PyTriton's Python backend needs numpy 1 while the daemon's environment has numpy 2, so the server
runs from `.venv-serve` (the README's test command makes it: `pip install -e '.[serve]'`), or the
environment `$VCAMD_SERVE_VENV` names — as it would on a GPU box of its own. Without one the tests
that need a server skip; with `VCAMD_REQUIRE_TRITON=1` (`.ci/run`) they fail instead.

The server runs in a session of its own so that "killed" means all of it: `vcamd serve`, its
`tritonserver` and the Python backend stubs (SIGKILL to the process group).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
READY_LINE = "vcamd serve: ready"
START_S = 120.0
"""How long a start may take on a busy 2-core machine (it copies and starts tritonserver, then loads each model)."""


def serve_venv() -> Path | None:
    folder = Path(os.environ.get("VCAMD_SERVE_VENV") or REPO / ".venv-serve")
    return folder if (folder / "bin" / "vcamd").is_file() else None


def require_serve_venv() -> Path:
    folder = serve_venv()
    if folder is None:
        reason = ("no environment for `vcamd serve` (.venv-serve or $VCAMD_SERVE_VENV): make it with "
                  "`python3 -m venv .venv-serve && .venv-serve/bin/pip install -e '.[serve]'`")
        if os.environ.get("VCAMD_REQUIRE_TRITON") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return folder


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TritonProcess:
    """`vcamd serve --config CONFIG --listen 127.0.0.1:PORT [extra]`, started and restarted on the same port."""

    def __init__(self, config: Path, *extra: str, port: int | None = None, log: Path) -> None:
        self.venv = require_serve_venv()
        self.config = config
        self.extra = list(extra)
        self.port = port or free_port()
        self.url = f"grpc://127.0.0.1:{self.port}"
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.ready_at: float | None = None

    def start(self) -> TritonProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.lines, self.ready_at = [], None
        out = self.log.open("a")
        self.proc = subprocess.Popen(
            [str(self.venv / "bin" / "vcamd"), "serve", "--config", str(self.config), "--listen", f"127.0.0.1:{self.port}", *self.extra],
            stdout=subprocess.PIPE, stderr=out, text=True, start_new_session=True, env=dict(os.environ),
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        return self

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.strip() == READY_LINE:
                self.ready_at = time.monotonic()

    def wait_ready(self) -> float:
        """Until the server says it serves (models loaded); returns when it said so (monotonic)."""
        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"vcamd serve exited ({self.proc.returncode}): {self.lines[-5:]}; log {self.log}")
            return self.ready_at is not None

        wait_for(ready, "vcamd serve to be ready", timeout_s=START_S, poll_s=0.05, detail=lambda: f"stdout {self.lines[-3:]}")
        assert self.ready_at is not None
        return self.ready_at

    def kill(self) -> None:
        """SIGKILL to the whole server (its process group), and wait until it is gone."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        wait_for(lambda: not _group_alive(self.proc.pid), "the server's processes to be gone", timeout_s=30)

    def stop(self) -> None:
        """SIGTERM (a clean stop), then SIGKILL to whatever is left of the group."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True

"""`vcamd serve` as a process the remote bench and the tests start, kill and start again.

PyTriton's Python backend needs numpy 1 while the daemon runs on numpy 2, so the server runs from
an environment of its own — `.venv-serve` beside the checkout (README: `pip install -e '.[serve]'`)
or the folder `$VCAMD_SERVE_VENV` names — as it would on a GPU machine of its own. The server runs
in a session of its own, so that "killed" means all of it: `vcamd serve`, its `tritonserver` and the
Python backend stubs (SIGKILL to the process group).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from vcamd.common.errors import VcamdError

READY_LINE = "vcamd serve: ready"  # vcamd.remote.serve.READY_LINE, without importing numpy-1-only code paths
START_S = 180.0
"""How long a start may take on a busy 2-core machine (it copies and starts tritonserver, then loads each model)."""


def serve_venv() -> Path | None:
    """The environment `vcamd serve` runs from, or None when there is none."""
    default = Path(__file__).resolve().parents[2] / ".venv-serve"
    folder = Path(os.environ.get("VCAMD_SERVE_VENV") or default)
    return folder if (folder / "bin" / "vcamd").is_file() else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """`[prefix…] vcamd serve --config CONFIG --listen 127.0.0.1:PORT [extra]`, started and restarted on one port."""

    def __init__(self, config: Path, *extra: str, port: int | None = None, log: Path, prefix: Sequence[str] = ()) -> None:
        venv = serve_venv()
        if venv is None:
            raise VcamdError("no environment for `vcamd serve` (.venv-serve or $VCAMD_SERVE_VENV)",
                             fix="make it: `python3 -m venv .venv-serve && .venv-serve/bin/pip install -e '.[serve]'`")
        self.venv = venv
        self.config = config
        self.extra = list(extra)
        self.prefix = list(prefix)
        self.port = port or free_port()
        self.url = f"grpc://127.0.0.1:{self.port}"
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.ready_at: float | None = None

    def start(self) -> ServerProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.lines, self.ready_at = [], None
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [*self.prefix, str(self.venv / "bin" / "vcamd"), "serve", "--config", str(self.config),
                 "--listen", f"127.0.0.1:{self.port}", *self.extra],
                stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL, text=True, start_new_session=True, env=dict(os.environ),
            )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        return self

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.strip() == READY_LINE:
                self.ready_at = time.monotonic()

    def exited(self) -> str | None:
        """Why the server is gone, or None while it runs."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"vcamd serve exited ({self.proc.returncode}): {self.lines[-5:]}; its log: {self.log}"
        return None

    def wait_ready(self, timeout_s: float = START_S) -> float:
        """Until the server says it serves (its models loaded); returns when it said so (monotonic)."""
        deadline = time.monotonic() + timeout_s
        while self.ready_at is None:
            if (why := self.exited()) is not None:
                raise VcamdError(why)
            if time.monotonic() > deadline:
                raise VcamdError(f"vcamd serve not ready after {timeout_s:.0f} s: {self.lines[-3:]}; its log: {self.log}")
            time.sleep(0.05)
        return self.ready_at

    def kill(self) -> None:
        """SIGKILL to the whole server (its process group), and wait until every process of it is gone."""
        if self.proc is None or self.proc.poll() is not None:
            return
        _kill_group(self.proc.pid)
        self.proc.wait(30)
        deadline = time.monotonic() + 30
        while _group_alive(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM (a clean stop), then SIGKILL to whatever is left of the group."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.wait(30)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True

"""`vcamd run` as a user runs it, in its own process, for the benchmarks and the end-to-end tests: one
home for starting it with its own control socket, asking its status until a condition holds, and
stopping it so that no daemon outlives its run — `vcamd quit` first, then SIGTERM, then SIGKILL.

Its output goes to a file beside the runtime folder, not to a pipe: a pipe nobody reads until the end
fills up after ~64 KiB of log lines and blocks the daemon mid-run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from vcamd.control.client import ControlClient
from vcamd.control.protocol import ControlError, DaemonNotRunning

RUN_DEADLINE_S = 600.0
"""Only a hung daemon gets this far: a run lasts until its conditions are met, however busy the machine."""
QUIT_S = 120.0
"""How long a daemon asked to quit has to write its stats and its file (a loaded machine included)."""
TERMINATE_S = 15.0
"""How long SIGTERM gets before SIGKILL, when the run ended without a quit (a failed assertion)."""


class DaemonEnded(AssertionError):
    """The daemon exited by itself while it was expected to run."""


class DaemonRun:
    """`vcamd run --config CONFIG --source SOURCE --loop --sink SINK --no-tray [ARGS]` with
    VCAMD_RUNTIME_DIR set to `runtime` (made private if missing); a context manager."""

    def __init__(self, config: Path, source: str | Path, sink: str, runtime: Path, *,
                 args: Sequence[str] = (), env: Mapping[str, str] | None = None, log: Path | None = None) -> None:
        self.runtime = runtime
        self.log = log if log is not None else runtime.with_name(runtime.name + ".log")
        self._command = [sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(source), "--loop",
                         "--sink", sink, "--no-tray", *args]
        self._env = {**os.environ, **(env or {}), "VCAMD_RUNTIME_DIR": str(runtime)}
        self._proc: subprocess.Popen[bytes] | None = None
        self.client = ControlClient(runtime, timeout_s=30.0)

    def __enter__(self) -> DaemonRun:
        self.runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self.log.open("wb") as out:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(self._command, env=self._env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        proc = self._process()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(TERMINATE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _process(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError("DaemonRun is used as a context manager: `with DaemonRun(...) as daemon:`")
        return self._proc

    @property
    def returncode(self) -> int | None:
        return self._process().poll()

    def output(self) -> str:
        """Everything the daemon wrote so far (stdout and stderr)."""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def status(self) -> dict[str, Any]:
        """The daemon's status; {} while it is not listening yet. Raises DaemonEnded once it exited."""
        if self._process().poll() is not None:
            raise DaemonEnded(f"the daemon ended by itself (exit {self.returncode}):\n{self.output()[-3000:]}")
        try:
            return self.client.status()
        except (DaemonNotRunning, ControlError):
            return {}

    def wait_for(self, condition: Callable[[dict[str, Any]], object], what: str, *,
                 timeout_s: float = RUN_DEADLINE_S, poll_s: float = 0.2) -> dict[str, Any]:
        """Ask the status until `condition(status)` holds (a condition, never a clock: the bound is
        for a hung daemon only); returns that status."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status()
            if status and condition(status):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"the daemon did not get to {what} in {timeout_s:.0f} s: frames {status.get('frames')}, "
                                     f"faces {status.get('faces')}")
            time.sleep(poll_s)

    def wait(self, timeout_s: float = QUIT_S) -> int:
        """The exit status, once the daemon has exited (subprocess.TimeoutExpired after `timeout_s`)."""
        return self._process().wait(timeout_s)

    def quit(self) -> str:
        """`vcamd quit` through the control socket; waits for the exit and returns the daemon's output."""
        self.client.quit()
        self.wait()
        return self.output()

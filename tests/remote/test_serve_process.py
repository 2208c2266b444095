"""`vcamd serve` as processes: Triton's stubs run the models (no process of ours between Triton and
them), Triton ends with `vcamd serve` however it ends, a busy port is one clear error, and what a
killed server left in shared memory is cleared when one starts again on its port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.triton import TritonProcess, free_port, require_serve_venv

from .conftest import ServedFiles

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm")]


def _swapper_config(files: ServedFiles, path: Path) -> Path:
    path.write_text(f'[models]\nswapper = "{files.swapper}"\nproviders = ["cpu"]\nthreads = 1\n')
    return path


def _group(pgid: int) -> dict[int, str]:
    """pid → command line of every live process in the process group `pgid` (not zombies: a killed
    process stays one until its parent, this test, reaps it)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    return found


def _wait_until(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _regions(port: int) -> set[str]:
    return {p.name for p in Path("/dev/shm").glob(f"vcamd_serve_{os.getuid()}_{port}_*")}


def test_triton_ends_with_vcamd_serve_even_when_it_is_killed(served_files, tmp_path) -> None:
    """SIGKILL to `vcamd serve` alone (not its group): tritonserver and its stubs go too, and the
    models ran in Triton's Python backend stubs — no other process of the server's."""
    server = TritonProcess(_swapper_config(served_files, tmp_path / "server.toml"), log=tmp_path / "serve.log").start()
    try:
        server.wait_ready()
        pgid = server.proc.pid
        processes = _group(pgid)
        triton = [cmd for cmd in processes.values() if "/tritonserver " in cmd]
        stubs = [cmd for cmd in processes.values() if "triton_python_backend_stub" in cmd]
        assert len(triton) == 1 and len(stubs) == 2, processes  # the swapper and its .emap companion
        assert len(processes) == 1 + len(triton) + len(stubs), processes
        os.kill(pgid, signal.SIGKILL)
        assert _wait_until(lambda: not _group(pgid)), f"left running after vcamd serve was killed: {_group(pgid)}"
    finally:
        server.kill()


def test_a_port_in_use_is_one_clear_error(served_files, tmp_path) -> None:
    venv = require_serve_venv()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run([str(venv / "bin" / "vcamd"), "serve", "--config", str(_swapper_config(served_files, tmp_path / "s.toml")),
                               "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--listen" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_killed_servers_shared_memory_is_cleared_when_one_starts_on_its_port(served_files, tmp_path) -> None:
    port = free_port()
    server = TritonProcess(_swapper_config(served_files, tmp_path / "server.toml"), port=port, log=tmp_path / "serve.log").start()
    try:
        server.wait_ready()
        server.kill()  # SIGKILL to all of it: nothing gets to clean up
        left = _regions(port)
        assert left, "the Python backend's shared memory was not where it was looked for"
        server.start().wait_ready()
        assert not left & _regions(port), f"a killed server's shared memory is still there: {left & _regions(port)}"
    finally:
        server.stop()
    assert _wait_until(lambda: not _regions(port), 30), f"a stopped server left its shared memory: {_regions(port)}"

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
from support.signals import send_to_another_thread
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


def test_sigterm_landing_on_a_worker_thread_stops_the_server_and_triton(served_files, tmp_path) -> None:
    """A SIGTERM to the process (`systemctl stop`) may be handed to any of its threads; `vcamd serve`
    waits in waitpid() on its main thread, which such a signal does not wake. It still stops
    Triton and its stubs, and exits 0."""
    server = TritonProcess(_swapper_config(served_files, tmp_path / "server.toml"), log=tmp_path / "serve.log").start()
    try:
        server.wait_ready()
        pgid = server.proc.pid
        send_to_another_thread(server.proc.pid, signal.SIGTERM)
        try:
            code = server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"vcamd serve still running 60 s after a SIGTERM on one of its threads: {server.lines[-3:]}") from None
        assert code == 0, server.lines[-5:]
        assert _wait_until(lambda: not _group(pgid)), f"left running after vcamd serve stopped: {_group(pgid)}"
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


def test_no_command_line_of_the_server_lets_a_reader_drive_it(served_files, tmp_path) -> None:
    """Every local user reads every command line (/proc/PID/cmdline, `ps`). A client on loopback
    with all they hold — any restricted-protocol header found there, no client certificate — is
    refused: the server's one key is the pairing's client key, in a 0600 file."""
    import tritonclient.grpc as grpcclient

    server = TritonProcess(_swapper_config(served_files, tmp_path / "server.toml"), log=tmp_path / "serve.log").start()
    try:
        server.wait_ready()
        lines = " ".join(_group(server.proc.pid).values())
        headers = {}
        for arg in lines.split():
            if arg.startswith("--grpc-restricted-protocol="):  # PROTOCOLS:KEY=VALUE — Triton prefixes the header's name
                key, value = arg.split(":", 1)[1].split("=", 1)
                headers[f"triton-grpc-protocol-{key}"] = value
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        try:
            with pytest.raises(Exception) as refused:
                client.get_model_metadata("swapper", headers=headers or None, client_timeout=10)
        finally:
            client.close()
        assert "UNAVAILABLE" in str(refused.value) or "handshake" in str(refused.value).lower(), refused.value
        assert not headers, f"a secret on a command line: {sorted(headers)}"
    finally:
        server.stop()


def test_the_backends_shared_memory_is_its_users_alone(served_files, tmp_path) -> None:
    """Triton's Python backend makes its regions 0644 (boost sets the mode, whatever the umask):
    another local user could read a crop in flight. By the time the server is ready they are 0600
    and another uid cannot open them."""
    from support.users import NOBODY, read_as_another_user

    port = free_port()
    server = TritonProcess(_swapper_config(served_files, tmp_path / "server.toml"), port=port, log=tmp_path / "serve.log").start()
    try:
        server.wait_ready()
        regions = sorted(Path("/dev/shm").glob(f"vcamd_serve_{os.getuid()}_{port}_*"))
        assert len(regions) == 2, regions  # the swapper's stub and its .emap companion's
        modes = {p.name: oct(p.stat().st_mode & 0o777) for p in regions}
        assert set(modes.values()) == {"0o600"}, modes
        if os.geteuid() == 0:
            for region in regions:
                answer = read_as_another_user(str(region), NOBODY)
                assert answer.startswith(b"EXC PermissionError"), (region, answer[:80])
    finally:
        server.stop()

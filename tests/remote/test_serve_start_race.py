"""Triton's Python backend now and then aborts the whole server while model instances start side by side
(`boost::interprocess::lock_exception`, triton-inference-server/server#8882). `vcamd serve` starts Triton
again when a start ends that way before the server is ready, says so, and only then; any other end of a
start stays one clear error.

The abort cannot be made to happen on demand, so the Triton that `vcamd serve` runs here is the wheel's
real binary behind a script that ends its first starts exactly as the fault does — boost's lines on stderr,
then SIGABRT — and then runs the real server."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from support.triton import TritonProcess, require_serve_venv

from vcamd.remote.tritonserver import START_ATTEMPTS, START_RACE, aborted_by_start_race, log_since

from .conftest import ServedFiles

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a POSIX shell script stands in for Triton")]

ABORT_LINES = f"terminate called after throwing an instance of '{START_RACE}'\n  what():  {START_RACE}\n"

# Runs `vcamd serve` (argv[1], then its arguments) with Triton's binary replaced by $FAKE_TRITON, which
# finds the real one in $REAL_TRITON.
LAUNCHER = """
import dataclasses, os, sys
from pathlib import Path
from vcamd.remote import tritonserver
installed = tritonserver.Distribution.installed
real = installed()
os.environ["REAL_TRITON"] = str(real.binary)
tritonserver.Distribution.installed = classmethod(lambda cls: dataclasses.replace(real, binary=Path(os.environ["FAKE_TRITON"])))
from vcamd.cli import main
sys.argv = sys.argv[1:]
sys.exit(main())
"""


def _fake_triton(folder: Path, *, failures: int, how: str) -> tuple[Path, Path]:
    """A tritonserver that ends its first `failures` starts (`how`: "race" as the fault does, "other": an
    error of another kind, exit 1) and then execs the real one; and the file counting its starts."""
    count = folder / "starts"
    script = folder / "tritonserver"
    end = (f"printf %s \"{ABORT_LINES}\" >&2; kill -ABRT $$" if how == "race"
           else "echo 'E1207 model_lifecycle.cc:638] failed to load swapper' >&2; exit 1")
    script.write_text(f"""#!/bin/sh
n=$(( $(cat "{count}" 2>/dev/null || echo 0) + 1 ))
echo $n > "{count}"
if [ $n -le {failures} ]; then {end}; fi
exec "$REAL_TRITON" "$@"
""")
    script.chmod(0o755)
    return script, count


def _server(files: ServedFiles, folder: Path, fake: Path, monkeypatch: pytest.MonkeyPatch) -> TritonProcess:
    venv = require_serve_venv()
    config = folder / "server.toml"
    config.write_text(f'[models]\nswapper = "{files.swapper}"\nproviders = ["cpu"]\nthreads = 1\n')
    launcher = folder / "launcher.py"
    launcher.write_text(LAUNCHER)
    monkeypatch.setenv("FAKE_TRITON", str(fake))  # ServerProcess hands the server this process's environment
    return TritonProcess(config, log=folder / "serve.log", prefix=[str(venv / "bin" / "python"), str(launcher)])


def test_a_start_aborted_by_tritons_start_race_is_started_again(served_files, tmp_path, monkeypatch) -> None:
    fake, starts = _fake_triton(tmp_path, failures=START_ATTEMPTS - 1, how="race")
    server = _server(served_files, tmp_path, fake, monkeypatch).start()
    try:
        server.wait_ready()
        assert int(starts.read_text()) == START_ATTEMPTS
        again = [line for line in server.lines if line.startswith("Triton aborted while its Python backend started")]
        assert len(again) == START_ATTEMPTS - 1, server.lines
        assert "server#8882" in again[0] and f"(2 of {START_ATTEMPTS})" in again[0], again
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 0, server.lines[-5:]
    finally:
        server.kill()


def test_a_start_race_every_time_ends_in_one_clear_error(served_files, tmp_path, monkeypatch) -> None:
    fake, starts = _fake_triton(tmp_path, failures=START_ATTEMPTS, how="race")
    server = _server(served_files, tmp_path, fake, monkeypatch).start()
    try:
        code = server.proc.wait(timeout=120)
        stderr = (tmp_path / "serve.log").read_text()
        assert code == 2, (code, server.lines, stderr[-2000:])
        assert int(starts.read_text()) == START_ATTEMPTS
        assert f"Triton did not start (exit -{int(signal.SIGABRT)})" in stderr and START_RACE in stderr, stderr[-2000:]
        assert "Traceback" not in stderr
    finally:
        server.kill()


def test_any_other_failed_start_is_not_tried_again(served_files, tmp_path, monkeypatch) -> None:
    fake, starts = _fake_triton(tmp_path, failures=1, how="other")
    server = _server(served_files, tmp_path, fake, monkeypatch).start()
    try:
        code = server.proc.wait(timeout=120)
        stderr = (tmp_path / "serve.log").read_text()
        assert code == 2, (code, server.lines, stderr[-2000:])
        assert int(starts.read_text()) == 1, "a start that failed for another reason was tried again"
        assert "Triton did not start (exit 1)" in stderr and "failed to load swapper" in stderr, stderr[-2000:]
    finally:
        server.kill()


def test_only_an_abort_with_boosts_lines_in_this_starts_log_is_the_race(tmp_path) -> None:
    log_file = tmp_path / "tritonserver.log"
    log_file.write_text(ABORT_LINES)  # an earlier start's abort, already in the log
    offset = log_file.stat().st_size
    with log_file.open("a") as f:
        f.write("E1207 failed to load 'swapper'\n")
    assert not aborted_by_start_race(-signal.SIGABRT, log_since(log_file, offset))  # not this start's
    assert aborted_by_start_race(-signal.SIGABRT, log_since(log_file, 0))
    assert not aborted_by_start_race(1, ABORT_LINES)  # boost's lines, but not its abort
    assert not aborted_by_start_race(-signal.SIGSEGV, ABORT_LINES)
    log_file.write_text(ABORT_LINES)  # made anew, shorter than where this start's part began
    assert aborted_by_start_race(-signal.SIGABRT, log_since(log_file, offset + 100))
    assert log_since(tmp_path / "missing.log", 0) == ""

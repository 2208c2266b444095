"""Logging that survives a full disk; the memory cap and the model-fits check."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vcamd.common.errors import VcamdError
from vcamd.system.logs import SafeRotatingFileHandler, setup_logging
from vcamd.system.memory import GB, apply_memory_cap, check_all_fit, check_fits

REPO = Path(__file__).resolve().parents[2]
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def clean_root_logger():
    """setup_logging changes the root logger: give it back as it was."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


# ---- logging -----------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_full_disk_never_crashes_and_is_reported_once() -> None:
    result = run_python(
        """
        import logging
        from pathlib import Path
        from vcamd.system.logs import setup_logging
        assert setup_logging("info", Path("/dev/full")) == Path("/dev/full")
        for i in range(200):
            logging.getLogger("vcamd.test").info("frame %d", i)
        print("still running")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "still running\n"
    reports = [line for line in result.stderr.splitlines() if line.startswith("vcamd: logging to")]
    assert reports == ["vcamd: logging to /dev/full failed ([Errno 28] No space left on device); further log records there are dropped"]
    assert "Traceback" not in result.stderr
    assert result.stderr.count("INFO vcamd.test: frame") == 200  # stderr logging carried on


def test_default_log_file_is_in_the_user_state_dir(tmp_path) -> None:
    result = run_python(
        """
        import logging
        from vcamd.system.logs import setup_logging
        print(setup_logging("warning", None))
        logging.getLogger("vcamd.x").info("hidden")
        logging.getLogger("vcamd.x").warning("shown")
        """,
        env={"XDG_STATE_HOME": str(tmp_path)},
    )
    log_file = tmp_path / "facelive" / "vcamd.log"
    assert result.stdout.strip() == str(log_file), result.stderr
    text = log_file.read_text()
    assert "WARNING vcamd.x: shown" in text and "hidden" not in text


def test_log_file_rotates_and_a_second_setup_replaces_handlers(tmp_path, clean_root_logger) -> None:
    path = tmp_path / "logs" / "vcamd.log"
    setup_logging("debug", path, max_bytes=2000, backups=2)
    setup_logging("debug", path, max_bytes=2000, backups=2)  # e.g. a config reload
    ours = [h for h in logging.getLogger().handlers if isinstance(h, SafeRotatingFileHandler)]
    assert len(ours) == 1
    for i in range(200):
        logging.getLogger("vcamd.rot").debug("line %03d %s", i, "x" * 40)
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["vcamd.log", "vcamd.log.1", "vcamd.log.2"]
    assert all(p.stat().st_size <= 2000 for p in path.parent.iterdir())
    assert "line 199" in path.read_text()


def test_log_folder_that_cannot_be_created_falls_back_to_stderr(tmp_path, clean_root_logger) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert setup_logging("info", blocker / "sub" / "vcamd.log") is None


def test_bad_level_is_a_config_error(clean_root_logger) -> None:
    with pytest.raises(VcamdError, match=r"\[runtime\] log_level: 'loud': expected debug, info, warning or error"):
        setup_logging("loud", None, to_file=False)


# ---- memory cap ---------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_AS is Linux/macOS only")
def test_memory_cap_makes_a_big_allocation_fail() -> None:
    code = """
        import resource
        from vcamd.system.memory import GB, apply_memory_cap
        cap = apply_memory_cap({cap})
        print("cap", cap, resource.getrlimit(resource.RLIMIT_AS)[0])
        small = bytearray(50 * 1024 * 1024)  # well under the cap: fine
        try:
            big = bytes(int(1.5 * GB))  # calloc'd: the control below touches none of its pages
        except MemoryError:
            print("MemoryError")
        else:
            print("allocated", len(big))
        """
    capped = run_python(code.format(cap=1.0))
    assert capped.returncode == 0, capped.stderr
    assert capped.stdout.splitlines() == [f"cap {GB} {GB}", "MemoryError"]
    # Control: the same allocation without a cap succeeds (bytes(n) is calloc'd, bytearray(n) is
    # written through: 1.5 GB of page faults, seconds on a busy machine).
    uncapped = run_python(code.format(cap=0))
    assert uncapped.returncode == 0, uncapped.stderr
    assert uncapped.stdout.splitlines()[1] == f"allocated {int(1.5 * GB)}"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_cap_below_current_use_is_refused() -> None:
    result = run_python(
        """
        from vcamd.common.errors import VcamdError
        from vcamd.system.memory import apply_memory_cap
        try:
            apply_memory_cap(0.001)
        except VcamdError as err:
            print(err)
        """
    )
    assert result.stdout.startswith("[runtime] max_memory_gb = 0.001 is below what vcamd already uses"), result
    assert "raise [runtime] max_memory_gb, or set it to 0 for no cap" in result.stdout


def test_cap_zero_is_no_cap() -> None:
    assert apply_memory_cap(0) is None


def test_platform_without_rlimit_logs_a_warning(monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "resource", None)  # what `import resource` does on Windows
    with caplog.at_level(logging.WARNING, logger="vcamd.system.memory"):
        assert apply_memory_cap(2.0) is None
    assert f"[runtime] max_memory_gb = 2 is not supported on {sys.platform}; running without a memory cap" in caplog.text


def test_check_fits_refuses_a_model_too_big_for_the_cap(tmp_path) -> None:
    model = tmp_path / "inswapper_128.onnx"
    with model.open("wb") as f:
        f.truncate(int(0.6 * GB))  # sparse: the size without the disk use
    with pytest.raises(VcamdError) as err:
        check_fits(model, 1.0)
    assert str(err.value) == (
        "model inswapper_128.onnx needs ~1.2 GB, more than [runtime] max_memory_gb = 1"
        ' — raise the cap or use the fp16 model ([models] swapper = "inswapper_128_fp16")'
    )
    check_fits(model, 1.5)
    check_fits(model, 0)  # no cap


def test_check_all_fit_adds_the_models_up(tmp_path) -> None:
    paths = []
    for name in ("a.onnx", "b_fp16.onnx"):
        path = tmp_path / name
        with path.open("wb") as f:
            f.truncate(int(0.3 * GB))
        paths.append(path)
    check_all_fit(paths[:1], 1.0)
    with pytest.raises(VcamdError, match=r"the models \(.*\) need ~1\.2 GB, more than \[runtime\] max_memory_gb = 1"):
        check_all_fit(paths, 1.0)


def test_log_file_is_private(tmp_path):
    # The daemon log names the source-face photos and every control request: only the user may read it.
    import logging

    from vcamd.system.logs import SafeRotatingFileHandler

    path = tmp_path / "vcamd.log"
    handler = SafeRotatingFileHandler(path, maxBytes=200, backupCount=2, encoding="utf-8", delay=True)
    try:
        for i in range(10):  # past maxBytes: the rotated and the new file both stay private
            handler.emit(logging.LogRecord("vcamd", logging.INFO, __file__, 1, "source face /home/u/p%d.jpg" % i, None, None))
    finally:
        handler.close()
    files = sorted(tmp_path.glob("vcamd.log*"))
    assert len(files) >= 2, files
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file

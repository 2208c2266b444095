"""Everything vcamd writes is private to the user and never written through a planted symlink
(issue 10, item 7).

Logs, snapshots, `--stats-json`, the recent-faces list, the control lock and model downloads show
the user's face and activity: files 0600, folders 0700, whatever the umask (tests run under umask
000, the worst case), and a symlink planted at any of those names (pointing at a file of the
user's that an attacker wants overwritten or read) is refused or replaced — its target untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.waiting import wait_for

from vcamd.common.errors import VcamdError
from vcamd.files.private_files import UnsafePathError, open_private, open_private_fd, private_dir, write_private_atomic

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX modes, symlinks and FIFOs")

REPO = Path(__file__).resolve().parents[2]
VICTIM_TEXT = b"the user's own file: must stay exactly as it is\n"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 000: modes must come from vcamd, not from a careful umask."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_bytes(VICTIM_TEXT)
    path.chmod(0o644)
    return path


def assert_untouched(victim: Path) -> None:
    assert victim.read_bytes() == VICTIM_TEXT
    assert mode(victim) == 0o644


# ---- the module --------------------------------------------------------------------------------


def test_private_dir_creates_0700_and_tightens_an_existing_folder_of_ours(tmp_path: Path, open_umask) -> None:
    fresh = private_dir(tmp_path / "a" / "b" / "state")
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", fresh)] == [0o700, 0o700, 0o700]
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    private_dir(loose)
    assert mode(loose) == 0o700


@pytest.mark.parametrize("shared", [0o777, 0o1777, 0o703])
def test_private_dir_never_changes_a_folder_others_can_write(tmp_path: Path, shared: int) -> None:
    """Issue 36 item 4: [models] dir = /tmp (or any shared folder) was chmod-ed to 0700, locking
    every other user out of it. A folder others can write is refused, named, and left as it is."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(shared)
    with pytest.raises(UnsafePathError, match=r"can be written by other users") as err:
        private_dir(folder)
    assert str(folder) in str(err.value) and "mkdir -m 700" in str(err.value)
    assert mode(folder) == shared


def test_private_dir_leaves_a_folder_the_user_chose_as_it_is(tmp_path: Path) -> None:
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    chosen.chmod(0o755)
    private_dir(chosen, tighten=False)
    assert mode(chosen) == 0o755


def test_private_dir_refuses_a_file_in_its_place(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("x")
    with pytest.raises(UnsafePathError, match="is not a folder"):
        private_dir(tmp_path / "state")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a folder owned by another user")
def test_private_dir_refuses_another_users_folder(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)
    os.chown(theirs, 12345, 12345)
    with pytest.raises(UnsafePathError, match=r"belongs to another user \(uid 12345\)") as err:
        private_dir(theirs)
    assert isinstance(err.value, VcamdError) and "choose a folder of yours" in str(err.value)
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o777  # not ours to change


@pytest.mark.parametrize("mode_string", ["wb", "ab", "a", "r+b"])
def test_open_private_creates_0600_and_tightens_an_existing_file(tmp_path: Path, open_umask, mode_string: str) -> None:
    path = tmp_path / "f"
    with open_private(path, mode_string):
        pass
    assert mode(path) == 0o600
    path.chmod(0o644)
    with open_private(path, mode_string):
        pass
    assert mode(path) == 0o600


@pytest.mark.parametrize("mode_string", ["wb", "ab", "r+b"])
def test_open_private_refuses_a_planted_symlink(tmp_path: Path, victim: Path, mode_string: str) -> None:
    path = tmp_path / "log"
    path.symlink_to(victim)
    with pytest.raises(UnsafePathError, match=r"is a symlink .*never writes through") as err:
        open_private(path, mode_string)
    assert isinstance(err.value, OSError) and isinstance(err.value, VcamdError)
    assert_untouched(victim)


def test_open_private_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # with a reader, a blocking open would succeed
    try:
        with pytest.raises(UnsafePathError, match="is not a regular file"):
            open_private_fd(path, os.O_WRONLY)
    finally:
        os.close(reader)
    with pytest.raises(UnsafePathError, match="is not a regular file"):  # no reader: would block for good
        open_private_fd(path, os.O_WRONLY)


def test_write_private_atomic_replaces_a_symlink_instead_of_following_it(tmp_path: Path, victim: Path, open_umask) -> None:
    path = tmp_path / "snap.png"
    path.symlink_to(victim)
    write_private_atomic(path, b"png bytes")
    assert not path.is_symlink() and path.read_bytes() == b"png bytes" and mode(path) == 0o600
    assert_untouched(victim)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.png", "victim.txt"]  # no temporary left


# ---- each write path ---------------------------------------------------------------------------


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home / "facelive"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    import logging

    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    for handler in list(root.handlers):
        if handler not in saved[0]:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(saved[1])


def test_log_file_and_state_dir_are_private(state_home: Path, open_umask, restore_logging) -> None:
    import logging

    from vcamd.system.logs import setup_logging

    state_home.mkdir(parents=True, mode=0o755)
    state_home.chmod(0o755)  # as an older vcamd left it
    (state_home / "vcamd.log").write_text("old record\n")
    (state_home / "vcamd.log").chmod(0o644)
    path = setup_logging("info")
    logging.getLogger("vcamd.test").info("a record")
    assert path == state_home / "vcamd.log"
    assert mode(state_home) == 0o700 and mode(path) == 0o600
    assert "a record" in path.read_text()


def test_log_file_planted_symlink_is_not_followed(state_home: Path, victim: Path, restore_logging, capfd) -> None:
    import logging

    from vcamd.system.logs import setup_logging

    private_dir(state_home)
    (state_home / "vcamd.log").symlink_to(victim)
    setup_logging("info")
    for i in range(5):
        logging.getLogger("vcamd.test").info("record %d", i)
    assert_untouched(victim)
    reports = [line for line in capfd.readouterr().err.splitlines() if line.startswith("vcamd: logging to")]
    assert len(reports) == 1 and "is a symlink" in reports[0]  # said once; the program goes on


def test_control_lock_planted_symlink_is_refused(tmp_path: Path, victim: Path) -> None:
    from vcamd.control.server import LOCK_NAME, ControlServer

    runtime = Path(tempfile.mkdtemp(prefix="vc-", dir="/tmp"))
    try:
        (runtime / LOCK_NAME).symlink_to(victim)
        server = ControlServer(object(), runtime)  # the engine is never reached: the lock comes first
        with pytest.raises(UnsafePathError, match=rf"{LOCK_NAME} is a symlink") as err:
            server.start()
        server.close()
        assert isinstance(err.value, VcamdError)  # `vcamd run` prints it as one line
        assert_untouched(victim)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_recent_faces_file_is_private_and_a_planted_symlink_is_replaced(tmp_path: Path, victim: Path, open_umask) -> None:
    from vcamd.tray import RecentFaces

    folder = tmp_path / "state"
    face = tmp_path / "face.png"
    face.write_bytes(b"png")
    recent = RecentFaces(folder / "recent_faces.json")
    recent.add(face)
    assert mode(folder) == 0o700 and mode(folder / "recent_faces.json") == 0o600
    (folder / "recent_faces.json").unlink()
    (folder / "recent_faces.json").symlink_to(victim)
    recent.add(face)
    assert_untouched(victim)
    assert json.loads((folder / "recent_faces.json").read_text()) == [str(face.resolve())]


def test_model_downloads_state_and_partials_are_private(tmp_path: Path, victim: Path, open_umask) -> None:
    import hashlib

    from vcamd.modelstore.store import ModelStore
    from vcamd.modelstore.verify import STATE_FILE

    models = tmp_path / "models"
    models.mkdir(mode=0o755)
    models.chmod(0o755)
    (models / "m.onnx").write_bytes(b"weights")  # a hand-copied file: verify records its hash
    (models / "m.onnx").chmod(0o644)
    entry = {"role": "swapper", "file": "m.onnx", "sha256": hashlib.sha256(b"weights").hexdigest(), "license": "t",
             "url": "http://127.0.0.1:9/m.onnx"}
    store = ModelStore(models, "", {"models": {"m": entry}})
    assert store.pull(["m"], progress=False)[0].action == "already present"
    assert mode(models) == 0o700 and mode(models / STATE_FILE) == 0o600
    # A planted symlink at the state file's temporary name is not written through.
    (models / (STATE_FILE + ".tmp")).symlink_to(victim)
    store.verify()
    assert_untouched(victim)


# ---- a short real daemon run ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon_inputs(tmp_path_factory: pytest.TempPathFactory, assets: Path) -> dict[str, Path]:
    import cv2

    from vcamd.bench.clips import write_sliding_clip
    from vcamd.bench.standins import build_recognizer, build_swapper

    d = tmp_path_factory.mktemp("hostile-daemon")
    newton = cv2.imread(str(assets / "images" / "newton.png"))
    return {
        "clip": write_sliding_clip(d / "camera.avi", newton, size=(320, 240), fps=15.0, frames=20, face_scale=0.7),
        "swapper": build_swapper(d / "swapper.onnx"),
        "recognizer": build_recognizer(d / "recognizer.onnx"),
        "detector": assets / "models" / "scrfd_500m_kps.onnx",
        "source_face": assets / "images" / "newton.png",
    }


@pytest.mark.slow
def test_a_short_daemon_run_writes_only_private_files(daemon_inputs: dict[str, Path], victim: Path) -> None:
    import tomli_w

    base = Path(tempfile.mkdtemp(prefix="vc-", dir="/tmp"))  # short: a Unix socket path has 108 bytes
    try:
        state = base / "xdg-state" / "facelive"
        state.mkdir(parents=True, mode=0o755)
        state.chmod(0o755)  # as an older vcamd left it
        runtime, out = base / "rt", base / "out"
        out.mkdir()
        config = base / "config.toml"
        config.write_text(tomli_w.dumps({
            "models": {"detector": str(daemon_inputs["detector"]), "swapper": str(daemon_inputs["swapper"]),
                       "recognizer": str(daemon_inputs["recognizer"]), "providers": ["cpu"], "threads": 1},
            "detection": {"size": 320, "track_size": 160},
            "swap": {"source_face": str(daemon_inputs["source_face"]), "source_consent": True},
        }))
        stats = out / "stats.json"
        stats.symlink_to(victim)  # planted where the run will write its stats
        snap = out / "snap.png"
        snap.symlink_to(victim)
        env = {**os.environ, "VCAMD_RUNTIME_DIR": str(runtime), "XDG_STATE_HOME": str(base / "xdg-state"),
               "XDG_DATA_HOME": str(base / "xdg-data")}
        python = REPO / ".venv" / "bin" / "python"
        exe = str(python) if python.exists() else sys.executable

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([exe, "-m", "vcamd", *args], env=env, capture_output=True, text=True, timeout=60,
                                  preexec_fn=lambda: os.umask(0))

        with (base / "daemon.out").open("w+") as output:
            proc = subprocess.Popen(
                [exe, "-m", "vcamd", "run", "--config", str(config), "--source", str(daemon_inputs["clip"]), "--loop",
                 "--sink", "null", "--no-tray", "--stats-json", str(stats)],
                env=env, stdout=output, stderr=subprocess.STDOUT, preexec_fn=lambda: os.umask(0),
            )
            try:
                def published() -> bool:
                    assert proc.poll() is None, f"the daemon exited early: {output.seek(0) or output.read()[-3000:]}"
                    status = cli("status", "--json")
                    return status.returncode == 0 and json.loads(status.stdout)["fps"] > 0
                wait_for(published, "the daemon to publish frames", timeout_s=60, poll_s=0.1)
                shot = cli("snapshot", str(snap))
                assert shot.returncode == 0, shot.stderr
                quit_ = cli("quit")
                assert quit_.returncode == 0, quit_.stderr
                assert proc.wait(60) == 0, output.seek(0) or output.read()[-3000:]
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

        assert_untouched(victim)
        assert not snap.is_symlink() and snap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and mode(snap) == 0o600
        assert not stats.is_symlink() and json.loads(stats.read_text())["frames"] and mode(stats) == 0o600
        # Every file and folder the daemon created or owns: private.
        written = [p for root in (state, runtime) if root.exists() for p in [root, *root.rglob("*")]]
        assert state / "vcamd.log" in written
        loose = {str(p): oct(mode(p)) for p in written
                 if not p.is_symlink() and mode(p) != (0o700 if p.is_dir() else 0o600)}
        assert loose == {}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_config_init_writes_a_private_file_and_replaces_a_planted_symlink(tmp_path: Path, victim: Path) -> None:
    """Before: config.toml (it names the user's photos) was 0666 under umask 000, written through
    `config.toml.tmp` whatever that was."""
    config_home = tmp_path / "xdg-config"
    folder = config_home / "facelive"
    folder.mkdir(parents=True)
    (folder / "config.toml.tmp").symlink_to(victim)
    (folder / "config.toml").symlink_to(victim)
    env = {**os.environ, "XDG_CONFIG_HOME": str(config_home)}
    done = subprocess.run([sys.executable, "-m", "vcamd", "config", "init", "--force"], env=env, capture_output=True,
                          text=True, timeout=60, preexec_fn=lambda: os.umask(0))
    assert done.returncode == 0, done.stderr
    assert_untouched(victim)
    written = folder / "config.toml"
    assert not written.is_symlink() and "[swap]" in written.read_text() and mode(written) == 0o600

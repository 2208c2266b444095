"""The runtime folder (control socket, lock) as another local user could arrange it (issue 36 item 4):
a shared folder is refused and never chmod-ed, another user's private folder is one clear line, and
the CLI sends nothing to a socket whose listening process is not the user's."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest
from support.cli import one_clear_line, run_vcamd
from support.users import NOBODY, needs_root, skip_unless_runs_as

from vcamd.common.errors import VcamdError
from vcamd.control.client import ControlClient, ForeignDaemon, RuntimeDirError, checked_runtime_dir
from vcamd.control.server import ControlServer


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_existing_runtime_dir_of_ours_is_used_as_it_is(engine, runtime):
    """Never change the mode of a folder the daemon did not create: 0755 shuts no one out of
    anything (the socket is 0600 and its peer checked), so it stays 0755."""
    runtime.mkdir(mode=0o755)
    os.chmod(runtime, 0o755)
    with ControlServer(engine, runtime, transport="unix") as srv:
        assert mode(runtime) == 0o755
        assert ControlClient(runtime).status()["enabled"] is True
        assert srv.address == str(runtime / "control.sock")


def test_a_runtime_dir_the_daemon_creates_is_0700_whatever_the_umask(engine, runtime):
    old = os.umask(0)
    try:
        with ControlServer(engine, runtime, transport="unix"):
            assert mode(runtime) == 0o700
    finally:
        os.umask(old)


@pytest.mark.parametrize("shared_mode", [0o777, 0o1777, 0o757])
def test_a_runtime_dir_others_can_write_is_refused_and_left_alone(engine, runtime, shared_mode):
    """VCAMD_RUNTIME_DIR=/tmp as root made /tmp 0700 for every user of the machine: now the daemon
    and the CLI refuse it, name it and the fix, and the folder keeps its mode."""
    runtime.mkdir()
    os.chmod(runtime, shared_mode)
    server = ControlServer(engine, runtime, transport="unix")
    with pytest.raises(VcamdError) as err:
        server.start()
    server.close()
    message = str(err.value)
    assert str(runtime) in message and "can be written by other users" in message and "VCAMD_RUNTIME_DIR" in message
    assert mode(runtime) == shared_mode
    assert list(runtime.iterdir()) == []  # no lock, no socket left there
    with pytest.raises(RuntimeDirError, match="can be written by other users"):
        ControlClient(runtime).status()
    assert mode(runtime) == shared_mode


@needs_root
def test_a_runtime_dir_owned_by_another_user_is_refused(engine, runtime):
    runtime.mkdir(mode=0o700)
    os.chown(runtime, NOBODY, NOBODY)
    with pytest.raises(VcamdError, match=r"belongs to another user \(uid 65534\)"):
        ControlServer(engine, runtime, transport="unix").start()
    with pytest.raises(RuntimeDirError, match=r"belongs to another user \(uid 65534\)"):
        ControlClient(runtime).status()


def test_a_symlinked_runtime_dir_and_a_swappable_parent_are_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(RuntimeDirError, match="is a symlink"):
        checked_runtime_dir(tmp_path / "link", create=True)
    if os.geteuid() == 0:  # a parent others may write without the sticky bit: they could rename ours away
        shared = tmp_path / "shared"
        shared.mkdir()
        os.chmod(shared, 0o777)
        os.chown(shared, NOBODY, NOBODY)
        with pytest.raises(RuntimeDirError, match="belongs to another user"):
            checked_runtime_dir(shared / "rt", create=True)
        os.chown(shared, 0, 0)
        with pytest.raises(RuntimeDirError, match="without the sticky bit"):
            checked_runtime_dir(shared / "rt", create=True)
        os.chmod(shared, 0o1777)
        assert checked_runtime_dir(shared / "rt", create=True) == shared / "rt"  # as /tmp/vcamd-UID in /tmp


@pytest.mark.parametrize("verb", [["status"], ["quit"], ["off"], ["run", "--i-have-consent", "--no-tray", "--sink", "null"]])
def test_another_users_private_folder_is_one_line_not_a_traceback(short_dir, verb):
    """As nobody, VCAMD_RUNTIME_DIR inside root's 0700 folder: `run`, `status` and `quit` ended in
    PermissionError tracebacks."""
    skip_unless_runs_as(NOBODY)
    private = short_dir / "root-only"
    private.mkdir(mode=0o700)
    home = short_dir / "nobody-home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    os.chmod(short_dir, 0o755)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "VCAMD_RUNTIME_DIR": str(private / "rt")}
    proc = run_vcamd(*verb, env=env, user=NOBODY)
    one_clear_line(proc, str(private / "rt"), "VCAMD_RUNTIME_DIR")
    assert "permission denied" in proc.stderr


def foreign_daemon(path: Path, uid: int) -> tuple[int, int]:
    """A process that listens at `path` as `uid` (the socket file itself bound as root, so only the
    kernel's peer credentials tell), answers a fake status to one request, and reports on its pipe
    what it received. Returns (pid, read end of the pipe)."""
    read_end, write_end = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # system calls only: the parent has threads
        received = b""
        try:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            os.chmod(path, 0o600)
            os.setegid(uid)
            os.seteuid(uid)
            listener.listen(4)
            os.write(ready_w, b"1")
            listener.settimeout(30)
            for _ in range(2):  # the test's client, then `vcamd off`
                conn, _ = listener.accept()
                conn.settimeout(3)
                try:
                    received += conn.recv(4096)
                    conn.sendall(b'{"ok": true, "result": {"enabled": false, "state": "running", "forged": true}}\n')
                except OSError:
                    pass  # the client hung up
                conn.close()
        except BaseException as exc:  # noqa: BLE001
            received = f"EXC {exc!r}".encode()
        finally:
            os.write(write_end, received or b"(nothing)")
            os._exit(0)
    os.close(write_end)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"1"
    os.close(ready_r)
    return pid, read_end


@needs_root
def test_the_cli_sends_nothing_to_a_socket_held_by_another_users_process(runtime):
    """Issue 36 item 4: the CLI talked to a planted control.sock and believed its answers. Even with
    the folder and the socket file ours, the kernel says who listens: another uid is refused
    before a byte is sent."""
    runtime.mkdir(mode=0o700)
    pid, report = foreign_daemon(runtime / "control.sock", NOBODY)
    try:
        with pytest.raises(ForeignDaemon, match=r"held by another user's process \(uid 65534\); nothing was sent"):
            ControlClient(runtime, timeout_s=5).status()
        proc = run_vcamd("off", env={**os.environ, "VCAMD_RUNTIME_DIR": str(runtime)})
        one_clear_line(proc, str(runtime / "control.sock"), "uid 65534")
    finally:
        with os.fdopen(report, "rb") as pipe:
            heard = pipe.read()
        os.waitpid(pid, 0)
    assert heard == b"(nothing)"  # the forged daemon heard no request (and its answer was never read)


@needs_root
def test_the_cli_refuses_a_socket_file_of_another_user(runtime):
    runtime.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as planted:
        planted.bind(str(runtime / "control.sock"))
        planted.listen()
        os.chown(runtime / "control.sock", NOBODY, NOBODY)
        with pytest.raises(RuntimeDirError, match=r"belongs to another user \(uid 65534\)"):
            ControlClient(runtime, timeout_s=5).status()


def test_the_cli_talks_to_its_own_daemon(engine, runtime):
    with ControlServer(engine, runtime, transport="unix"):
        assert json.loads(json.dumps(ControlClient(runtime).status()))["enabled"] is True

"""The control server over real sockets: who can reach it, every command, and bad input."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time

import cv2
import numpy as np
import pytest
from support.waiting import wait_for

from vcamd.common.errors import VcamdError
from vcamd.common.quality import Level
from vcamd.control.client import ControlClient, find_endpoint
from vcamd.control.protocol import (
    MAX_REQUEST_BYTES,
    ControlError,
    Controllable,
    DaemonNotRunning,
)
from vcamd.control.server import AlreadyRunning, ControlServer

# ---- who can reach it ---------------------------------------------------------------------------


def test_unix_socket_is_0600_in_a_0700_dir_owned_by_us(engine, runtime):
    with ControlServer(engine, runtime, transport="unix") as srv:
        sock = runtime / "control.sock"
        info = sock.lstat()
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_uid == os.geteuid()
        assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
        assert srv.address == str(sock)
        # Nothing else lies around (the temporary bind name was renamed, not left behind).
        assert sorted(p.name for p in runtime.iterdir()) == ["control.lock", "control.sock"]


def test_another_user_cannot_connect(engine, runtime, as_nobody):
    runtime.parent.chmod(0o755)  # only our own modes may stand in the way (mkdtemp made it 0700)
    with ControlServer(engine, runtime, transport="unix") as srv:

        def try_connect() -> bytes:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(str(srv.address))
                return b"CONNECTED"

        assert as_nobody(try_connect).startswith(b"EXC PermissionError")  # the 0700 dir stops it
        os.chmod(runtime, 0o755)
        assert as_nobody(try_connect).startswith(b"EXC PermissionError")  # so does the 0600 socket alone
        os.chmod(runtime / "control.sock", 0o666)
        assert as_nobody(try_connect) == b"CONNECTED"  # (the check above really measured the mode)


def test_peer_uid_check_refuses_another_user_even_with_open_permissions(engine, runtime, as_nobody):
    """Defence in depth: if someone loosens the modes, SO_PEERCRED still refuses other users."""
    with ControlServer(engine, runtime, transport="unix") as srv:
        os.chmod(runtime.parent, 0o755)  # mkdtemp made it 0700
        os.chmod(runtime, 0o755)
        os.chmod(runtime / "control.sock", 0o666)

        def ask_status() -> bytes:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, sock.makefile("rb") as reader:
                sock.settimeout(5)
                sock.connect(str(srv.address))  # the file modes no longer stop it...
                sock.sendall(b'{"cmd": "off"}\n')
                return reader.readline()

        answer = json.loads(as_nobody(ask_status))
        assert answer == {"ok": False, "error": "refused: uid 65534 is not the daemon's user"}
        assert engine.enabled is True  # ...and the "off" was not obeyed


def test_tcp_mode_binds_loopback_only_and_needs_the_token(engine, runtime, raw, request_line):
    with ControlServer(engine, runtime, transport="tcp") as srv:
        host, port = srv.address
        assert host == "127.0.0.1"
        endpoint_file = runtime / "control.json"
        assert stat.S_IMODE(endpoint_file.stat().st_mode) == 0o600
        published = json.loads(endpoint_file.read_text())
        assert published == {"host": "127.0.0.1", "port": port, "token": srv.token}
        assert len(srv.token) >= 32

        no_token = raw(srv, b'{"cmd": "off"}\n')
        wrong_token = raw(srv, json.dumps({"cmd": "off", "token": srv.token[:-1] + "x"}).encode() + b"\n")
        for answer in (no_token, wrong_token):
            assert answer[0]["ok"] is False
            assert answer[0]["error"].startswith("refused: missing or wrong token")
        assert engine.enabled is True

        right = raw(srv, request_line(srv, "off"))
        assert right[0]["ok"] is True and right[0]["result"]["enabled"] is False
        assert engine.enabled is False


def test_tcp_mode_is_not_reachable_from_another_interface(engine, runtime):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent; this only picks the outgoing interface
        own_ip = probe.getsockname()[0]
    except OSError:
        own_ip = "127.0.0.1"
    finally:
        probe.close()
    if own_ip.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address to try from")
    with ControlServer(engine, runtime, transport="tcp") as srv:
        _, port = srv.address
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((own_ip, port), timeout=2).close()


# ---- every command ------------------------------------------------------------------------------


def test_the_small_engine_is_a_controllable(engine):
    assert isinstance(engine, Controllable)


def test_every_command_round_trips(server, engine, assets, newton):
    client = ControlClient(server.directory, timeout_s=5)
    status = client.status()
    assert status == {
        "enabled": True,
        "state": "running",
        "level": "full",
        "quality": "auto",
        "fps": 29.97,
        "latency_ms": 41.5,
        "source_face": None,
        "providers": {"scrfd_500m_kps.onnx": "CPUExecutionProvider"},
        "config_error": None,
    }

    assert client.set_enabled(False)["enabled"] is False and engine.enabled is False
    assert client.set_enabled(True)["enabled"] is True and engine.enabled is True
    assert client.toggle()["enabled"] is False and engine.enabled is False
    assert client.toggle()["enabled"] is True and engine.enabled is True

    face = assets / "images" / "newton.png"
    assert client.set_source_face(face)["source_face"] == str(face)
    assert engine.source_face == face

    locked = client.set_quality(Level.low_res)
    assert engine.quality is Level.low_res
    assert (locked["level"], locked["quality"]) == ("low_res", "low_res")
    unlocked = client.set_quality(None)
    assert engine.quality is None and unlocked["quality"] == "auto"

    client.reload()
    assert engine.reloads == 1

    png = client.snapshot_png()
    decoded = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    assert np.array_equal(decoded, newton)

    assert not engine.quit_requested.is_set()
    client.quit()
    assert engine.quit_requested.wait(5)


def test_engine_errors_come_back_as_one_line(server, engine, tmp_path):
    client = ControlClient(server.directory, timeout_s=5)
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("hello")
    with pytest.raises(ControlError, match=r"notes\.png is not a readable image — use a PNG or JPEG photo"):
        client.set_source_face(not_an_image)
    assert engine.source_face is None

    engine.reload_problem = "[camera] fps = -1: Input should be greater than 0"
    with pytest.raises(ControlError, match=r"fps = -1"):
        client.reload()

    engine.fail_status_with = RuntimeError("boom\nsecond line")
    with pytest.raises(ControlError) as caught:
        client.status()
    assert str(caught.value) == "internal error in status: RuntimeError: boom second line"
    engine.fail_status_with = None
    assert client.status()["enabled"] is True  # the server survived the engine's bug


def test_concurrent_toggles_do_not_cancel_each_other(server, engine):
    client = ControlClient(server.directory, timeout_s=10)
    errors: list[BaseException] = []

    def toggle() -> None:
        try:
            client.toggle()
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    threads = [threading.Thread(target=toggle) for _ in range(100)]  # more than the listen backlog
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert engine.enabled is True  # an even number of toggles: back where it started


def test_quit_answers_even_when_the_engine_closes_the_server_at_once(engine, runtime):
    """The real daemon's quit path: request_quit tears the server down on the handler's thread."""
    srv = ControlServer(engine, runtime, transport="unix")

    class ClosingEngine(type(engine)):
        def request_quit(self) -> None:
            srv.close()
            super().request_quit()

    engine.__class__ = ClosingEngine
    srv.start()
    ControlClient(runtime, timeout_s=5).quit()
    assert engine.quit_requested.wait(5)
    assert not (runtime / "control.sock").exists()
    with pytest.raises(DaemonNotRunning):
        ControlClient(runtime).status()


def test_quit_is_obeyed_even_if_the_client_hangs_up_at_once(server, engine, connect, request_line):
    with connect(server) as sock:
        sock.sendall(request_line(server, "quit"))
    assert engine.quit_requested.wait(5)


# ---- bad input ----------------------------------------------------------------------------------


def test_malformed_requests_get_errors_and_the_connection_keeps_serving(server, raw, request_line):
    requests = [
        b"this is not json\n",
        b"[1, 2, 3]\n",
        b"\xff\xfe\xfd\n",
        request_line(server, "dance"),
        json.dumps({"cmd": "status", "args": [1], "token": server.token}).encode() + b"\n",
        json.dumps({"cmd": "status", "extra": 1, "token": server.token}).encode() + b"\n",
        request_line(server, "quality", {"level": "ultra"}),
        request_line(server, "quality", {}),
        request_line(server, "set_face", {"path": "relative/face.png"}),
        request_line(server, "set_face", {}),
        request_line(server, "status"),
    ]
    answers = raw(server, b"".join(requests), answers=len(requests))
    errors = [a["error"] for a in answers[:-1]]
    assert all(a["ok"] is False for a in answers[:-1])
    assert errors[0].startswith("request is not valid JSON")
    assert errors[1].startswith("request must be a JSON object")
    assert errors[2] == "request is not UTF-8 text"
    assert errors[3].startswith("unknown command 'dance' — use one of: status, on, off")
    assert errors[4] == '"args" must be a JSON object, got list'
    assert errors[5] == "unknown request field(s): extra"
    assert errors[6].startswith("unknown quality level 'ultra' — use one of: auto, full, no_boost, no_enhancer")
    assert errors[7].startswith('quality needs args {"level": NAME}')
    assert "is relative" in errors[8]
    assert errors[9].startswith("set_face needs args")
    assert answers[-1]["ok"] is True and answers[-1]["result"]["state"] == "running"


HOSTILE_LINES = {
    "nested ~40 KB deep": b"[" * 40_000 + b"\n",
    "nested objects": b'{"cmd": "status", "args": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}\n",
    "an int of 5,000 digits": b'{"cmd": "status", "args": {"x": ' + b"7" * 5000 + b"}}\n",
    "an int of 5,000 digits as cmd": b'{"cmd": ' + b"7" * 5000 + b"}\n",
    "a float that overflows": b'{"cmd": "status", "args": {"x": 1e99999}}\n',
    "NaN": b'{"cmd": "status", "args": {"x": NaN}}\n',
    "a lone surrogate": b'{"cmd": "set_face", "args": {"path": "/tmp/\\ud800.png"}}\n',
    "not UTF-8": b"\xff\xfe{}\n",
    "a JSON string": b'"status"\n',
    "a JSON number": b"12\n",
    "null": b"null\n",
    "an unhashable cmd": b'{"cmd": {"a": 1}}\n',
    "a NUL in the path": b'{"cmd": "set_face", "args": {"path": "/tmp/a\\u0000b.png"}}\n',
    "a file name over the limit": b'{"cmd": "set_face", "args": {"path": "/tmp/' + b"n" * 300 + b'.png"}}\n',
}


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_every_hostile_line_gets_one_error_line_and_no_worker_dies(engine, runtime, transport, connect):
    """Issue 36 item 2: a deeply nested line or a 5,000-digit integer ended a worker thread; after
    three, `status`, `off` and `quit` all answered "is it stuck?" while the daemon kept publishing.
    Each hostile line, sent three times over (more than there are workers), gets exactly one
    error line; then the real verbs still work."""
    with ControlServer(engine, runtime, transport=transport, request_timeout_s=5.0) as srv:
        client = ControlClient(runtime, timeout_s=10)
        for name, line in HOSTILE_LINES.items():
            for _ in range(3):
                with connect(srv) as sock, sock.makefile("rb") as reader:
                    sock.sendall(line)
                    answer = json.loads(reader.readline())
                assert answer["ok"] is False and answer["error"], (name, answer)
                assert "internal error" not in answer["error"], (name, answer)
                assert len(answer["error"]) < 400, (name, answer)  # a line, not the request echoed back
            assert client.status()["state"] == "running", name
        assert client.set_enabled(False)["enabled"] is False
        client.quit()
        wait_for(engine.quit_requested.is_set, "quit obeyed", timeout_s=30)


def test_a_worker_survives_whatever_its_handler_raises(short_dir):
    """The class of fault, not the two instances: any exception out of a request's handling is one
    error line and a closed connection; the workers (3) all stay, the selector thread too."""
    from vcamd.control.connections import ConnectionLoop

    def answer(line: bytes):
        if line.startswith(b"boom"):
            raise {b"boom-recursion\n": RecursionError, b"boom-value\n": ValueError}.get(line, KeyError)("planted")
        return b'{"ok": true}\n', True, None

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(short_dir / "s"))
    listener.listen()
    loop = ConnectionLoop(listener, answer, refuse=lambda sock: None,
                          is_heavy=lambda line: line.startswith(b"boom-heavy"), request_timeout_s=5.0)
    loop.start()
    try:
        for line in [b"boom-recursion\n", b"boom-value\n", b"boom-other\n", b"boom-heavy\n"] * 3:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, sock.makefile("rb") as reader:
                sock.settimeout(10)
                sock.connect(str(short_dir / "s"))
                sock.sendall(line)
                answer_line = json.loads(reader.readline())
                assert answer_line["ok"] is False and answer_line["error"].startswith("internal error: ")
                assert reader.readline() == b""  # closed after the error
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, sock.makefile("rb") as reader:
            sock.settimeout(10)
            sock.connect(str(short_dir / "s"))
            sock.sendall(b"fine\n")
            assert json.loads(reader.readline()) == {"ok": True}
        assert all(thread.is_alive() for thread in loop._threads)
    finally:
        loop.close()


def test_huge_requests_are_refused_and_the_server_keeps_serving(server, engine, raw, request_line):
    huge = b'{"cmd": "status", "args": {"pad": "' + b"x" * (2 * MAX_REQUEST_BYTES) + b'"}}\n'
    answers = raw(server, huge + request_line(server, "off"), answers=2)
    assert answers[0] == {"ok": False, "error": f"request too large (over {MAX_REQUEST_BYTES} bytes) — "
                                                "a request is a command and its arguments, never data"}
    assert answers[1]["ok"] is True and engine.enabled is False  # same connection, back in step
    megabyte = b"y" * (1024 * 1024) + b"\n"
    assert raw(server, megabyte)[0]["error"].startswith("request too large")
    assert ControlClient(server.directory).status()["enabled"] is False


def test_a_stalled_client_times_out_without_blocking_others(server, connect):
    with connect(server) as stalled, stalled.makefile("rb") as reader:
        stalled.sendall(b'{"cmd": "sta')  # ...and never the rest
        assert ControlClient(server.directory).status()["state"] == "running"  # others are served
        answer = json.loads(reader.readline())  # the server gives up after request_timeout_s (1 s)
        assert answer == {"ok": False, "error": "no complete request line within 1 s"}
        assert reader.readline() == b""  # and hangs up


def test_start_and_close_are_idempotent(engine, runtime):
    srv = ControlServer(engine, runtime, transport="unix")
    assert srv.start() is srv
    assert srv.start() is srv
    assert ControlClient(runtime).status()["state"] == "running"
    srv.close()
    srv.close()
    assert not (runtime / "control.sock").exists()
    with pytest.raises(DaemonNotRunning) as caught:
        ControlClient(runtime).status()
    assert caught.value.exit_code == 3
    assert str(caught.value) == (f"FaceLive Camera is not running (no control socket at {runtime}/control.sock)"
                                 " — start it with `vcamd run`")


def test_close_before_start_is_harmless(engine, runtime):
    """A server closed before it started (a second `vcamd run` giving up early) takes nothing from
    the daemon serving in the same folder: its socket stays, it answers, and it is still seen."""
    with ControlServer(engine, runtime, transport="unix"):
        ControlServer(engine, runtime, transport="unix").close()
        assert (runtime / "control.sock").exists()
        assert ControlClient(runtime).status()["state"] == "running"
        with pytest.raises(AlreadyRunning, match="already running"):
            ControlServer(engine, runtime, transport="unix").start()


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_a_second_daemon_is_refused(engine, runtime, transport):
    with ControlServer(engine, runtime, transport=transport):
        with pytest.raises(AlreadyRunning, match="already running"):
            ControlServer(engine, runtime, transport=transport).start()
        assert ControlClient(runtime).status()["enabled"] is True  # the first one is unharmed


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_a_live_endpoint_is_detected_even_without_the_lock(engine, runtime, transport):
    """A daemon that does not hold control.lock (another version, a Windows peer) is still seen."""
    with ControlServer(engine, runtime, transport=transport) as first:
        first._release_lock()  # simulate a daemon that never took the lock
        with pytest.raises(AlreadyRunning, match="it answers on"):
            ControlServer(engine, runtime, transport=transport).start()


def test_a_stale_socket_file_is_replaced(engine, runtime):
    runtime.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(runtime / "control.sock"))
    stale.close()  # the file stays, nobody listens: a daemon that crashed
    with pytest.raises(DaemonNotRunning, match="does not answer"):
        ControlClient(runtime).status()
    with ControlServer(engine, runtime, transport="unix"):
        assert ControlClient(runtime).status()["state"] == "running"


def test_a_stale_tcp_endpoint_file_is_replaced(engine, runtime):
    runtime.mkdir(mode=0o700)
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    dead_port = free.getsockname()[1]
    free.close()
    (runtime / "control.json").write_text(json.dumps({"host": "127.0.0.1", "port": dead_port, "token": "old"}))
    with ControlServer(engine, runtime, transport="tcp") as srv:
        assert find_endpoint(runtime).token == srv.token != "old"
        assert ControlClient(runtime).status()["state"] == "running"


def test_a_socket_path_too_long_is_a_clear_error(engine, short_dir):
    deep = short_dir / ("d" * 100)
    with pytest.raises(VcamdError, match="too long for a Unix socket — set VCAMD_RUNTIME_DIR"):
        ControlServer(engine, deep, transport="unix").start()


def test_runtime_dir_follows_the_environment_variable(engine, runtime, monkeypatch):
    monkeypatch.setenv("VCAMD_RUNTIME_DIR", str(runtime))
    with ControlServer(engine) as srv:
        assert srv.directory == runtime
        assert ControlClient().status()["enabled"] is True


# ---- floods -------------------------------------------------------------------------------------


def _control_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("vcamd-control")]


def _open_idle(srv: ControlServer, deadline_s: float = 30.0) -> socket.socket:
    """A connected client that sends nothing (waits while the server's listen queue is full)."""
    family = socket.AF_UNIX if srv.transport == "unix" else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(deadline_s)

    def connected() -> socket.socket | None:
        try:
            sock.connect(srv.address)
            return sock
        except BlockingIOError:  # a full Unix-socket backlog refuses at once: the CLI client retries too
            return None

    return wait_for(connected, "the server to accept again", timeout_s=deadline_s, poll_s=0.01)


def test_500_idle_connections_hold_no_threads_and_a_new_client_is_served(engine, runtime):
    # Before: one thread per connection — 500 idle clients held ~400 threads of the daemon.
    with ControlServer(engine, runtime, transport="unix", request_timeout_s=30.0) as srv:
        threads_before = threading.active_count()
        assert len(_control_threads()) <= 6  # a selector thread and a few workers, whatever comes
        idle = []
        try:
            for _ in range(500):
                idle.append(_open_idle(srv))
            assert threading.active_count() == threads_before
            assert ControlClient(runtime, timeout_s=10).status()["state"] == "running"
            assert threading.active_count() == threads_before
            # Room was made by closing the longest-idle connections, each told why in one line.
            with idle[0].makefile("rb") as reader:
                told = json.loads(reader.readline())
            assert told == {"ok": False, "error": "closed: too many control connections; this idle one made room"}
        finally:
            for sock in idle:
                sock.close()


def test_when_every_connection_is_being_answered_a_new_client_is_refused_in_one_line(engine, runtime):
    release = threading.Event()
    entered = threading.Semaphore(0)

    class SlowStatus(type(engine)):
        def status(self):
            entered.release()
            release.wait(30)
            return super().status()

    engine.__class__ = SlowStatus
    with ControlServer(engine, runtime, transport="unix", max_connections=2):
        busy = [threading.Thread(target=lambda: ControlClient(runtime, timeout_s=30).status()) for _ in range(2)]
        try:
            for thread in busy:
                thread.start()
            for _ in busy:
                assert entered.acquire(timeout=10)
            with pytest.raises(ControlError, match=r"busy: 2 control connections are open and active .* try again"):
                ControlClient(runtime, timeout_s=10).request("on")
        finally:
            release.set()
            for thread in busy:
                thread.join(10)
        assert engine.enabled is True  # the refused request was not obeyed...
        engine.__class__ = SmallEngineType
        # ...and the server serves on once the two slow answers are out (a condition, not a clock).
        def served() -> bool:
            try:
                status = ControlClient(runtime, timeout_s=10).status()
            except ControlError as err:
                assert str(err).startswith("busy:"), err
                return False
            assert status["state"] == "running"
            return True

        wait_for(served, "a status answer once the slow ones are out", timeout_s=30, poll_s=0.1)


class CountingFaces:
    """Wraps set_source_face to count how many decodes run at the same time."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def set_source_face(self, path):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            from vcamd.files.images import read_image

            read_image(path, "source face")  # the real decode of a large photo
            time.sleep(0.05)  # hold the slot a little longer than the decode
        finally:
            with self.lock:
                self.running -= 1


def test_concurrent_set_face_requests_decode_one_photo_at_a_time(server, engine, short_dir):
    big = short_dir / "big.png"
    photo = np.zeros((3000, 4000, 3), np.uint8)  # 12 MP
    photo[::7] = 200
    assert cv2.imwrite(str(big), photo, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    counting = CountingFaces(engine)
    engine.set_source_face = counting.set_source_face
    client = ControlClient(server.directory, timeout_s=60)
    answers: list[str] = []

    def set_face() -> None:
        try:
            client.set_source_face(big)
            answers.append("ok")
        except ControlError as err:
            answers.append(str(err))

    threads = [threading.Thread(target=set_face) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert counting.most == 1  # before: all eight decoded at once
    assert len(answers) == 8 and "ok" in answers
    refused = [a for a in answers if a != "ok"]
    assert all(a.startswith("busy: another source face photo is being loaded") for a in refused), refused
    assert client.status()["state"] == "running"  # status is served meanwhile, by other threads


SmallEngineType = None  # set below: the fixture's class, to undo a test's subclass swap


@pytest.fixture(autouse=True)
def _remember_engine_class(engine):
    global SmallEngineType
    SmallEngineType = type(engine)


RSS_SCRIPT = r"""
import json, resource, sys, threading
from pathlib import Path
sys.path[:0] = [sys.argv[3], str(Path(sys.argv[3]).parent)]  # this folder's conftest, and tests/ for `support`
from conftest import SmallEngine
import numpy as np
from vcamd.control.client import ControlClient
from vcamd.control.server import ControlServer
from vcamd.files.images import read_image
from vcamd.control.protocol import ControlError


class PhotoEngine(SmallEngine):
    def set_source_face(self, path):
        read_image(path, "source face")  # decodes the whole photo, as the face engine does


runtime, photo = Path(sys.argv[1]), Path(sys.argv[2])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with ControlServer(PhotoEngine(np.zeros((8, 8, 3), np.uint8)), runtime, transport="unix"):
    client = ControlClient(runtime, timeout_s=120)
    results = []
    def go():
        try:
            client.set_source_face(photo); results.append("ok")
        except ControlError as err:
            results.append(str(err))
    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"base_mb": base / 1024, "peak_mb": peak / 1024, "results": results}))
"""


@pytest.mark.slow
def test_eight_concurrent_set_face_with_60_megapixel_photos_stay_within_memory(short_dir, tmp_path):
    # Before: 8 decodes at once, ~2.9 GB in the daemon. One decode of 7900×7900 BGR is ~190 MB.
    import subprocess
    import sys
    from pathlib import Path

    photo = short_dir / "huge.png"
    image = np.zeros((7900, 7900, 3), np.uint8)
    image[::5, ::3] = (40, 160, 220)
    assert cv2.imwrite(str(photo), image, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    del image
    result = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(short_dir / "rt"), str(photo), str(Path(__file__).parent)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert "ok" in measured["results"], measured
    grew = measured["peak_mb"] - measured["base_mb"]
    print(f"8 concurrent set-face of a 62 MP photo: RSS grew {grew:.0f} MB")
    assert grew < 900, measured  # one or two photos' worth, never eight

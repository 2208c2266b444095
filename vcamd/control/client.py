"""Talk to a running daemon: what `vcamd status/on/off/...` and the tray call.

One short connection per request. The endpoint is found in the runtime dir (`runtime_dir()`,
overridable with `VCAMD_RUNTIME_DIR`): the Unix socket `control.sock` where AF_UNIX exists, else
`control.json` (loopback TCP port + token).

Nothing is sent to a daemon that may not be the user's own: the runtime dir must be a folder of
the user's that no other user can write or swap out (`checked_runtime_dir`, the rule the daemon
follows too), the socket file the user's, and the process listening on it the user's — the kernel
says who is at the other end of a Unix socket (`vcamd.common.peers.unix_peer_uid`), asked before the
request goes out. So a `control.sock` another user planted in a shared folder is never believed.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vcamd.common.peers import unix_peer_uid
from vcamd.common.quality import AUTO, Level
from vcamd.control.protocol import (
    MAX_RESPONSE_BYTES,
    SOCKET_NAME,
    TCP_ENDPOINT_NAME,
    Command,
    ControlError,
    DaemonNotRunning,
    decode_response,
    encode_request,
    runtime_dir,
    unix_sockets_available,
)
from vcamd.files.private_files import UnsafePathError, check_private_dir, others_can_write, private_dir

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a daemon listens: a Unix socket file, or a loopback TCP port with its token."""

    kind: Literal["unix", "tcp"]
    path: Path  # the socket file, or the control.json that names port and token
    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None

    def connect(self, timeout_s: float) -> socket.socket:
        """A connected socket — for a Unix socket, only once the kernel says the listening process
        is the user's (`ForeignDaemon` otherwise, before anything is sent)."""
        if self.kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: Any = str(self.path)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            target = (self.host, self.port)
        sock.settimeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    sock.connect(target)
                    if self.kind == "unix":
                        refuse_foreign_peer(sock, self.path)
                    return sock
                except BlockingIOError:
                    # A Unix socket whose listen backlog is full refuses at once instead of waiting.
                    if time.monotonic() > deadline:
                        raise TimeoutError("the control socket's backlog stayed full") from None
                    time.sleep(0.01)
        except BaseException:
            sock.close()
            raise


class RuntimeDirError(ControlError):
    """The runtime dir (or the socket in it) is not safely the user's: nothing is sent there."""


class ForeignDaemon(ControlError):
    """The process listening on the control socket is another user's."""


def refuse_foreign_peer(sock: socket.socket, path: Path) -> None:
    """Raise ForeignDaemon unless the process listening at `path` is the user's (where the system
    can tell: Linux SO_PEERCRED, macOS/BSD LOCAL_PEERCRED; elsewhere the folder checks stand alone)."""
    uid = unix_peer_uid(sock)
    if uid is not None and uid != os.geteuid():
        raise ForeignDaemon(f"the control socket {path} is held by another user's process (uid {uid}); nothing was sent to it",
                            fix="remove that socket, and set VCAMD_RUNTIME_DIR to a private folder of yours (or unset it)")


def checked_runtime_dir(directory: Path, *, create: bool = False) -> Path:
    """`directory` as the control endpoint's folder, or RuntimeDirError saying why not: a folder of
    the user's (not a symlink) that no other user can write, inside a parent no other user can swap
    it out of (the user's or root's, and shared only with the sticky bit, as /tmp). `create` (the
    daemon): a missing folder is made 0700; an existing one is used as it is — its mode is never
    changed (VCAMD_RUNTIME_DIR=/tmp must not make /tmp private for everyone). Without `create` (the
    CLI) a missing folder means no daemon: DaemonNotRunning."""
    if os.name != "posix":
        if create:
            directory.mkdir(parents=True, exist_ok=True)  # Windows: the per-user app-data dir is private by ACL
        return directory
    fix = "set VCAMD_RUNTIME_DIR to a private folder of yours (mkdir -m 700 FOLDER), or unset it"
    try:
        if create:
            private_dir(directory, tighten=False)
        info = os.lstat(directory)
        if stat.S_ISLNK(info.st_mode):
            raise RuntimeDirError(f"the runtime folder {directory} is a symlink; vcamd only uses a real folder of yours", fix=fix)
        check_private_dir(directory)
        parent = os.stat(directory.parent)
    except FileNotFoundError:
        raise not_running(default_endpoint_path(directory)) from None
    except UnsafePathError as err:
        raise RuntimeDirError(f"the runtime folder {err.message}", fix=fix) from None
    except OSError as exc:
        why = "permission denied: it is inside a folder of another user" if exc.errno == errno.EACCES else exc.strerror or exc
        raise RuntimeDirError(f"cannot use the runtime folder {directory} ({why})", fix=fix) from None
    uid = os.geteuid()
    if parent.st_uid not in (uid, 0):
        raise RuntimeDirError(f"the runtime folder's parent {directory.parent} belongs to another user (uid {parent.st_uid}), "
                              "who could swap the folder for theirs", fix=fix)
    if others_can_write(parent) and not parent.st_mode & stat.S_ISVTX:
        raise RuntimeDirError(f"the runtime folder's parent {directory.parent} can be written by other users without the "
                              "sticky bit, so they could swap the folder for theirs", fix=fix)
    return directory


def not_running(where: Path, why: str = "no control socket at") -> DaemonNotRunning:
    return DaemonNotRunning(f"FaceLive Camera is not running ({why} {where})", fix="start it with `vcamd run`")


def default_endpoint_path(directory: Path) -> Path:
    """The file a daemon on this platform publishes: the socket, or control.json without AF_UNIX."""
    return directory / (SOCKET_NAME if unix_sockets_available() else TCP_ENDPOINT_NAME)


def find_endpoint(directory: Path | None = None) -> Endpoint:
    """The endpoint published in `directory` (default: the runtime dir); DaemonNotRunning if none,
    RuntimeDirError when the folder or the socket file is not safely the user's."""
    directory = checked_runtime_dir(directory if directory is not None else runtime_dir())
    sock_path = directory / SOCKET_NAME
    if unix_sockets_available() and _own_socket(sock_path):
        return Endpoint("unix", sock_path)
    tcp_path = directory / TCP_ENDPOINT_NAME
    if tcp_path.exists():
        return read_tcp_endpoint(tcp_path)
    raise not_running(default_endpoint_path(directory))


def _own_socket(path: Path) -> bool:
    """Whether a socket file of the user's is at `path` (False: nothing there); RuntimeDirError for
    anything else there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RuntimeDirError(f"cannot look at the control socket {path} ({exc.strerror or exc})",
                              fix="set VCAMD_RUNTIME_DIR to a private folder of yours, or unset it") from None
    if not stat.S_ISSOCK(info.st_mode):
        raise RuntimeDirError(f"{path} is not a socket (vcamd publishes its control socket there)",
                              fix="remove it, or set VCAMD_RUNTIME_DIR to another folder of yours")
    if os.name == "posix" and info.st_uid != os.geteuid():
        raise RuntimeDirError(f"the control socket {path} belongs to another user (uid {info.st_uid}); nothing was sent to it",
                              fix="remove it, and set VCAMD_RUNTIME_DIR to a private folder of yours (or unset it)")
    return True


def read_tcp_endpoint(path: Path) -> Endpoint:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Endpoint("tcp", path, host=str(data["host"]), port=int(data["port"]), token=str(data["token"]))
    except FileNotFoundError:
        raise not_running(path) from None
    except PermissionError:
        raise ControlError(f"cannot read the control endpoint file {path}",
                           fix="it belongs to another user; run vcamd as the user who started the daemon") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ControlError(f"the control endpoint file {path} is unreadable ({exc})",
                           fix="delete it and restart the daemon with `vcamd run`") from None


def exchange(endpoint: Endpoint, request: bytes, timeout_s: float) -> bytes:
    """Send one request line and read one response line. Raises DaemonNotRunning, ControlError."""
    try:
        sock = endpoint.connect(timeout_s)
    except (FileNotFoundError, ConnectionRefusedError):
        raise not_running(endpoint.path, "the control socket does not answer:") from None
    except PermissionError:
        raise ControlError(f"permission denied on the control socket {endpoint.path}",
                           fix="run vcamd as the user who started the daemon") from None
    except TimeoutError:
        raise ControlError(f"no answer from FaceLive Camera at {endpoint.path} within {timeout_s:g} s",
                           fix="is it stuck? see its log, or restart it") from None
    except OSError as exc:  # e.g. "AF_UNIX path too long" for a deep VCAMD_RUNTIME_DIR
        raise ControlError(f"cannot connect to the control socket {endpoint.path} ({exc.strerror or exc})",
                           fix="set VCAMD_RUNTIME_DIR (or XDG_RUNTIME_DIR) to a short directory of yours") from None
    try:
        with sock, sock.makefile("rb") as reader:
            try:
                sock.sendall(request)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a server at its connection bound says why in one line and hangs up: read it
            line = reader.readline(MAX_RESPONSE_BYTES + 1)
    except TimeoutError:
        raise ControlError(f"no answer from FaceLive Camera at {endpoint.path} within {timeout_s:g} s",
                           fix="is it stuck? see its log, or restart it") from None
    except (ConnectionResetError, BrokenPipeError):
        raise ControlError(f"FaceLive Camera closed the connection at {endpoint.path} without answering",
                           fix="see its log") from None
    if not line.endswith(b"\n"):
        if len(line) > MAX_RESPONSE_BYTES:
            raise ControlError(f"the answer from {endpoint.path} is larger than {MAX_RESPONSE_BYTES} bytes")
        raise ControlError(f"FaceLive Camera closed the connection at {endpoint.path} without a full answer",
                           fix="see its log")
    return line


def answers(endpoint: Endpoint, timeout_s: float = 2.0) -> bool:
    """True when a control server (any vcamd daemon) answers a status request at `endpoint`."""
    try:
        line = exchange(endpoint, encode_request(Command.status, token=endpoint.token), timeout_s)
        message = json.loads(line)
    except (DaemonNotRunning, ControlError, ValueError, OSError):
        return False
    return isinstance(message, dict) and "ok" in message


class ControlClient:
    """Requests to the daemon; each method raises DaemonNotRunning (exit 3) or ControlError."""

    def __init__(self, directory: Path | None = None, timeout_s: float = 10.0) -> None:
        self.directory = directory if directory is not None else runtime_dir()
        self.timeout_s = timeout_s

    def request(self, cmd: Command | str, args: dict[str, Any] | None = None) -> Any:
        endpoint = find_endpoint(self.directory)
        line = exchange(endpoint, encode_request(str(cmd), args, endpoint.token), self.timeout_s)
        return decode_response(line)

    def is_running(self) -> bool:
        """Whether a daemon of the user's answers; RuntimeDirError (the folder cannot be used) is raised."""
        try:
            return answers(find_endpoint(self.directory), min(self.timeout_s, 2.0))
        except RuntimeDirError:
            raise
        except (DaemonNotRunning, ControlError):
            return False

    def _state(self, cmd: Command, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """A request the daemon answers with its state (a JSON object)."""
        state: dict[str, Any] = self.request(cmd, args)
        return state

    def status(self) -> dict[str, Any]:
        return self._state(Command.status)

    def set_enabled(self, on: bool) -> dict[str, Any]:
        return self._state(Command.on if on else Command.off)

    def toggle(self) -> dict[str, Any]:
        return self._state(Command.toggle)

    def set_source_face(self, path: Path) -> dict[str, Any]:
        # The daemon may run in another working directory: always send an absolute path.
        return self._state(Command.set_face, {"path": str(Path(path).expanduser().resolve())})

    def set_quality(self, level: Level | None) -> dict[str, Any]:
        return self._state(Command.quality, {"level": AUTO if level is None else level.name})

    def reload(self) -> dict[str, Any]:
        return self._state(Command.reload)

    def snapshot_png(self) -> bytes:
        result = self.request(Command.snapshot)
        try:
            png = base64.b64decode(result["png_base64"], validate=True)
        except (TypeError, KeyError, ValueError):
            raise ControlError("the daemon's snapshot answer is not base64 PNG data") from None
        if not png.startswith(PNG_SIGNATURE):
            raise ControlError("the daemon's snapshot is not a PNG image")
        return png

    def quit(self) -> None:
        self.request(Command.quit)

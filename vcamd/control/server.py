"""The daemon's control endpoint: JSON-lines requests into a `Controllable` (the live engine).

Only the user who runs the daemon can reach it:

- Unix socket (`control.sock`, everywhere AF_UNIX exists): the runtime dir is a folder of ours
  that no other user can write (`client.checked_runtime_dir`: created 0700, an existing one used as
  it is, never chmod-ed, refused when shared); the socket is bound under a temporary name,
  chmod-ed to 0600, and only then renamed to its public name, so it is never reachable with looser
  permissions (a process-wide umask change would do the same but would race with every other
  thread creating files). Each connection's peer uid (`vcamd.common.peers.unix_peer_uid`) must also equal ours.
- Loopback TCP (`control.json`, where AF_UNIX is unavailable): bound to 127.0.0.1 only; a random
  token lives in the 0600 endpoint file and every request must carry it.

Connections are held by `vcamd.control.connections.ConnectionLoop`: one selector thread and a
few workers, a bound on open connections, one source-face decode at a time; a malformed,
oversized or slow request gets an error line (or a closed connection), never a crash of the server.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import os
import secrets
import socket
import threading
from pathlib import Path
from typing import Any, Literal

from vcamd.common.errors import VcamdError
from vcamd.common.peers import unix_peer_uid
from vcamd.control.client import Endpoint, answers, checked_runtime_dir, read_tcp_endpoint
from vcamd.control.connections import ConnectionLoop
from vcamd.control.protocol import (
    LOCK_NAME,
    SOCKET_NAME,
    TCP_ENDPOINT_NAME,
    VERBS,
    Command,
    Controllable,
    ProtocolError,
    decode_request,
    encode_error,
    encode_ok,
    runtime_dir,
    unix_sockets_available,
)
from vcamd.files.private_files import open_private_fd, write_private_atomic

log = logging.getLogger(__name__)

Transport = Literal["auto", "unix", "tcp"]

# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS), including the terminating NUL.
MAX_UNIX_PATH_BYTES = 103

LISTEN_BACKLOG = 128
"""Connections the kernel queues before we accept them (a full backlog makes a Unix-socket connect
fail at once with EAGAIN; the client retries)."""

MAX_CONNECTIONS = 64
"""Open control connections at most; past it the longest-idle one makes room (see connections.py)."""


class AlreadyRunning(VcamdError):
    """Another daemon already answers on this control endpoint."""


class ControlServer:
    """Serve control requests for `target` from `directory` (default: the runtime dir).

    `transport`: "auto" = Unix socket where available, else loopback TCP; "unix" / "tcp" force one
    (tests exercise the Windows path on Linux with "tcp"). `start()` and `close()` are idempotent.
    """

    def __init__(
        self,
        target: Controllable,
        directory: Path | None = None,
        *,
        transport: Transport = "auto",
        request_timeout_s: float = 5.0,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if transport == "auto":
            transport = "unix" if unix_sockets_available() else "tcp"
        if transport == "unix" and not unix_sockets_available():
            raise VcamdError("Unix sockets are not available on this system", fix='use transport="tcp"')
        self.target = target
        self.directory = directory if directory is not None else runtime_dir()
        self.transport: Literal["unix", "tcp"] = transport
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self._state_lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._loop: ConnectionLoop | None = None
        self._lock_fd: int | None = None
        self._token: str | None = None
        self._published_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file we published
        self._closed = False

    # ---- life cycle ---------------------------------------------------------------------------

    @property
    def endpoint_path(self) -> Path:
        """The published file: the socket, or control.json (TCP port + token)."""
        return self.directory / (SOCKET_NAME if self.transport == "unix" else TCP_ENDPOINT_NAME)

    @property
    def address(self) -> str | tuple[str, int]:
        """The socket path (Unix) or (host, port) (TCP) actually bound; only after start()."""
        if self._listener is None:
            raise RuntimeError("the control server is not started")
        if self.transport == "unix":
            return str(self.endpoint_path)
        host, port = self._listener.getsockname()[:2]
        return (str(host), int(port))

    @property
    def token(self) -> str | None:
        return self._token

    def start(self) -> "ControlServer":
        with self._state_lock:
            if self._closed:
                raise RuntimeError("a closed control server cannot be started again; make a new one")
            if self._listener is not None:
                return self
            checked_runtime_dir(self.directory, create=True)
            self._take_lock()
            try:
                self._refuse_if_live()
                listener = self._bind_unix() if self.transport == "unix" else self._bind_tcp()
            except BaseException:
                self._release_lock()
                raise
            self._listener = listener
            self._loop = ConnectionLoop(listener, self._answer, refuse=self._refusal, is_heavy=_is_heavy,
                                        request_timeout_s=self.request_timeout_s, max_connections=self.max_connections)
            self._loop.start()
            log.info("control endpoint ready at %s", self.endpoint_path)
            return self

    def close(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            loop, listener = self._loop, self._listener
            self._loop = self._listener = None
            if loop is not None:
                loop.close()  # bounded; also when quit closes the server from a worker thread
            elif listener is not None:
                listener.close()
            self._unpublish()
            self._release_lock()

    def __enter__(self) -> "ControlServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- binding ------------------------------------------------------------------------------

    def _take_lock(self) -> None:
        """Hold control.lock while serving, so two daemons starting together cannot both publish."""
        if os.name != "posix":
            return  # Windows: the liveness probe alone decides
        import fcntl

        fd = open_private_fd(self.directory / LOCK_NAME, os.O_RDWR)  # 0600; a planted symlink is refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(f"FaceLive Camera is already running (it holds {self.directory / LOCK_NAME})",
                                 fix="stop it with `vcamd quit`, or drive it with `vcamd on/off/status`") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _refuse_if_live(self) -> None:
        """Refuse to start if a daemon answers on our endpoint; remove a stale endpoint file."""
        path = self.endpoint_path
        if not os.path.lexists(path):
            return
        try:
            endpoint = Endpoint("unix", path) if self.transport == "unix" else read_tcp_endpoint(path)
        except VcamdError:
            endpoint = None
        if endpoint is not None and answers(endpoint):
            raise AlreadyRunning(f"FaceLive Camera is already running (it answers on {path})",
                                 fix="stop it with `vcamd quit`, or drive it with `vcamd on/off/status`")
        log.info("removing stale control endpoint %s", path)
        path.unlink(missing_ok=True)

    def _bind_unix(self) -> socket.socket:
        final = self.endpoint_path
        temporary = self.directory / f".cs-{secrets.token_hex(3)}"  # no longer than the final name
        if len(os.fsencode(final)) > MAX_UNIX_PATH_BYTES:
            raise VcamdError(f"the control socket path {final} is too long for a Unix socket",
                             fix="set VCAMD_RUNTIME_DIR (or XDG_RUNTIME_DIR) to a shorter directory")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(os.fspath(temporary))
            os.chmod(temporary, 0o600)
            listener.listen(LISTEN_BACKLOG)  # listen before the name is public: no ECONNREFUSED window
            os.replace(temporary, final)
        except BaseException:
            listener.close()
            temporary.unlink(missing_ok=True)
            raise
        info = final.lstat()
        self._published_id = (info.st_dev, info.st_ino)
        return listener

    def _bind_tcp(self) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(LISTEN_BACKLOG)
            host, port = listener.getsockname()[:2]
            self._token = secrets.token_urlsafe(32)
            write_private_atomic(self.endpoint_path, json.dumps({"host": host, "port": port, "token": self._token}))
        except BaseException:
            listener.close()
            raise
        info = self.endpoint_path.stat()
        self._published_id = (info.st_dev, info.st_ino)
        return listener

    def _unpublish(self) -> None:
        """Remove our endpoint file — only if it is still ours (not a newer daemon's)."""
        path = self.endpoint_path
        try:
            info = path.lstat()
        except FileNotFoundError:
            return
        if self._published_id == (info.st_dev, info.st_ino):
            path.unlink(missing_ok=True)
        self._published_id = None

    # ---- requests -----------------------------------------------------------------------------

    def _refusal(self, conn: socket.socket) -> bytes | None:
        """The answer for a connection we must not serve (another user's, SO_PEERCRED), else None."""
        if self.transport == "unix":
            uid = unix_peer_uid(conn)
            if uid is not None and uid != os.geteuid():
                log.warning("refused a control connection from uid %d", uid)
                return encode_error(f"refused: uid {uid} is not the daemon's user")
        return None

    def _answer(self, line: bytes) -> tuple[bytes, bool, Any]:
        """(response line, keep the connection open, action to run after answering)."""
        try:
            command, args, token = decode_request(line)
        except ProtocolError as err:
            return encode_error(str(err)), True, None
        if self.transport == "tcp" and not (token is not None and self._token is not None
                                            and hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self._token.encode())):
            log.warning("refused a control request without the right token")
            return encode_error(f"refused: missing or wrong token (it is in {self.endpoint_path})"), False, None
        if command is not Command.status:
            log.info("control request: %s %s", command, json.dumps(args)[:200] if args else "")
        if command is Command.quit:
            # Answer first: the daemon may be gone before a reply written afterwards gets out.
            return encode_ok({"quitting": True}), False, self._quit
        try:
            return encode_ok(self._dispatch(command, args)), True, None
        except VcamdError as err:
            return encode_error(str(err)), True, None
        except Exception as exc:  # a bug in the engine must not take the control endpoint down
            log.exception("control command %s failed", command)
            return encode_error(f"internal error in {command}: {type(exc).__name__}: {exc}"), True, None

    def _quit(self) -> None:
        try:
            self.target.request_quit()
        except Exception:
            log.exception("request_quit failed")

    def _dispatch(self, command: Command, args: dict[str, Any]) -> Any:
        """Run the request on the target. A target that answers a change with its state right
        after it applied (the live engine) is answered with that state; otherwise with status()."""
        target = self.target
        if command is Command.status:
            return target.status()
        if command is Command.snapshot:
            return {"png_base64": base64.b64encode(target.snapshot_png()).decode("ascii")}
        verb = VERBS.get(command)
        if verb is None:
            raise ProtocolError(f"command {command} is not handled here")
        answer: Any = getattr(target, verb.method)(*verb.call_args(args))
        return answer if isinstance(answer, dict) else target.status()


def _is_heavy(line: bytes) -> bool:
    """Requests that decode a user's photo (up to 64 megapixels): served one at a time. A line that
    is not a request is not heavy: `_answer` tells its sender why."""
    try:
        command, _args, _token = decode_request(line)
    except ProtocolError:
        return False
    return command is Command.set_face


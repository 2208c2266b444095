"""What the control API speaks: the engine's control surface, the wire format, where to find it.

Wire format — JSON lines, one request and one response per line, UTF-8:

    request:  {"cmd": "status", "args": {...}, "token": "..."}      ("token" only over TCP)
    response: {"ok": true, "result": ...}  or  {"ok": false, "error": "one line"}

Commands and their args/results:

    status                                  → the status dict (see `Status`)
    on | off | toggle                       → the status dict after the change
    set_face   {"path": "/abs/face.png"}    → the status dict
    quality    {"level": "auto" | a level name from `vcamd.common.quality.LADDER`}
                                            → the status dict ("auto" unlocks: the watchdog decides)
    model      {"role": "swapper" | "enhancer", "name": a manifest model of that role}
                                            → the status dict (the model loads in the background)
    reload                                  → the status dict
    snapshot                                → {"png_base64": "..."}  (PNG of the current output)
    quit                                    → {"quitting": true}     (answered before the daemon stops)

Where the daemon listens (both in the runtime dir, see `runtime_dir`):

    control.sock   Unix socket, mode 0600, in a 0700 dir (everywhere AF_UNIX exists)
    control.json   {"host": "127.0.0.1", "port": N, "token": "..."}, mode 0600 — loopback TCP where
                   AF_UNIX is unavailable (Windows); every request must carry the token.

`VCAMD_RUNTIME_DIR` overrides the runtime dir for both the daemon and the CLI (tests, several
daemons side by side).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from vcamd.common.boundedjson import JsonRefused, loads_bounded
from vcamd.common.errors import VcamdError
from vcamd.common.jsonable import to_jsonable
from vcamd.common.quality import AUTO, Level, quality_names
from vcamd.live.measures.numbers import LiveNumbers

MAX_REQUEST_BYTES = 64 * 1024
"""A request line longer than this is refused (a request is a command and a path, never data)."""

MAX_REQUEST_DEPTH = 8
"""Nesting a request may have (it needs 2: the request, its args); deeper is refused before parsing."""

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
"""The client's bound on one response: a base64 PNG snapshot of an 8K frame fits well under it."""

RUNTIME_DIR_ENV = "VCAMD_RUNTIME_DIR"
SOCKET_NAME = "control.sock"
TCP_ENDPOINT_NAME = "control.json"
LOCK_NAME = "control.lock"


class Command(StrEnum):
    status = "status"
    on = "on"
    off = "off"
    toggle = "toggle"
    set_face = "set_face"
    quality = "quality"
    model = "model"
    reload = "reload"
    snapshot = "snapshot"
    quit = "quit"


class Status(LiveNumbers, total=False):
    """What `Controllable.status()` returns: the live numbers (fps, latency_ms, swap_age_ms, frames,
    faces, misses — `vcamd.live.measures.numbers`) and the state below; extra keys are shown as they are."""

    enabled: bool  # swapping on (the user's switch)
    state: str  # "running" | "camera offline" | "error"
    level: str | int | Level  # the quality level in use (a `quality.Level` or its name)
    quality: str  # "auto" or the level the user locked
    source_face: str | None  # path of the source photo
    providers: dict[str, str] | list[str]  # model file → ONNX Runtime provider really in use
    models: dict[str, str | None]  # role → the running model ("swapper", "enhancer"), and "loading": the one loading or None
    model_choices: dict[str, list[dict[str, Any]]]  # role → [{"name", "license", "present"}]: what `model` can switch to
    precision: dict[str, str]  # model role → "float" or "int8", what it really runs at (`vcamd.inference.precision`)
    precision_why: dict[str, str]  # model role → why it runs at that precision (float where int8 was possible, int8's check)
    config_error: str | None  # the last config problem while running on the last good config


StateAnswer = dict[str, Any] | None
"""What a change of `Controllable` answers: the state after it applied (as `status()`), or None."""


@runtime_checkable
class Controllable(Protocol):
    """The control surface the live engine implements and the control server and tray drive.

    Methods are called from control-server threads, so implementations must be thread-safe. A
    user-caused problem is raised as `VcamdError` (e.g. `FaceError` for a bad photo); its one-line
    message is what the user sees. A change may answer with the state after it applied (the live
    engine does: `StateAnswer`) or with None.
    """

    def status(self) -> dict[str, Any]: ...

    def set_enabled(self, on: bool) -> StateAnswer: ...

    def toggle(self) -> Any:
        """Switch swapping over from its current state, as one step (two toggles never cancel out)."""
        ...

    def set_source_face(self, path: Path) -> StateAnswer: ...

    def set_quality(self, level: Level | None) -> StateAnswer:
        """Pin the quality level; None = automatic (the watchdog decides)."""
        ...

    def reload_config(self) -> StateAnswer: ...

    def snapshot_png(self) -> bytes: ...

    def latest_frame(self) -> Any:
        """The last published frame (H×W×3 uint8 BGR, read-only) or None before the first."""
        ...

    def recent_transitions(self) -> list[dict[str, Any]]:
        """The watchdog's level changes with their reasons, oldest first."""
        ...

    def set_badge(self, on: bool) -> StateAnswer:
        """Show or hide the "AI-altered" disclosure badge."""
        ...

    def set_model(self, role: str, name: str) -> StateAnswer:
        """Use the manifest's model `name` for `role` (swapper or enhancer), loaded in the
        background while the running one keeps swapping (VcamdError when it is not there)."""
        ...

    def request_quit(self) -> None:
        """Ask the daemon to stop; returns at once (the stop happens on the daemon's own thread)."""
        ...


class ProtocolError(VcamdError):
    """A request that does not follow the wire format; answered with an error, never a crash."""


class ControlError(VcamdError):
    """The daemon answered a request with an error (e.g. a source photo without a face)."""


class DaemonNotRunning(VcamdError):
    """No daemon answers on the control endpoint."""

    exit_code = 3


def runtime_dir() -> Path:
    """`$VCAMD_RUNTIME_DIR` if set, else the user runtime dir (`config.folders.user_runtime_dir`: on Linux
    /run/user/UID/facelive or /tmp/vcamd-UID, by the user id alone, whatever XDG_RUNTIME_DIR says)."""
    override = os.environ.get(RUNTIME_DIR_ENV)
    if override:
        return Path(override).expanduser()
    import warnings

    from vcamd.config.folders import user_runtime_dir  # platformdirs (~13 ms) only when no override is set

    with warnings.catch_warnings():
        # Off Linux platformdirs decides, and may warn on stderr,
        # which would break the CLI's one-line answers; the server checks that dir's ownership itself.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        return user_runtime_dir()


def unix_sockets_available() -> bool:
    return hasattr(socket, "AF_UNIX")


def parse_quality(name: str) -> Level | None:
    """"auto" → None (unlocked); a Level name → that Level; anything else → ProtocolError."""
    if name == AUTO:
        return None
    try:
        return Level[name]
    except KeyError:
        raise ProtocolError(
            f"unknown quality level {shown(name)}", fix=f"use one of: {', '.join(quality_names())}"
        ) from None


def _face_path(args: dict[str, Any]) -> tuple[Path]:
    raw = args.get("path")
    if not isinstance(raw, str) or not raw:
        raise ProtocolError('set_face needs args {"path": "/absolute/path/to/photo"}')
    path = Path(raw)
    if not path.is_absolute():
        # The daemon's working directory is not the caller's: a relative path would mean something else.
        raise ProtocolError(f"set_face path {shown(raw)} is relative", fix="send an absolute path")
    return (path,)


def _model_choice(args: dict[str, Any]) -> tuple[str, str]:
    role, name = args.get("role"), args.get("name")
    if role not in ("swapper", "enhancer") or not isinstance(name, str) or not name:
        raise ProtocolError('model needs args {"role": "swapper" | "enhancer", "name": MODEL}', fix="see `vcamd models list` for the names")
    return role, name


def _quality_level(args: dict[str, Any]) -> tuple[Level | None]:
    level = args.get("level")
    if not isinstance(level, str):
        raise ProtocolError('quality needs args {"level": NAME}', fix='e.g. "auto" or "low_res"')
    return (parse_quality(level),)


@dataclass(frozen=True, slots=True)
class Verb:
    """A change the control API can ask for: the `Controllable` method it calls, and how the
    request's args become that call's arguments (raising `ProtocolError` for bad ones)."""

    method: str
    call_args: Callable[[dict[str, Any]], tuple[Any, ...]] = lambda args: ()


VERBS: dict[Command, Verb] = {
    Command.on: Verb("set_enabled", lambda args: (True,)),
    Command.off: Verb("set_enabled", lambda args: (False,)),
    Command.toggle: Verb("toggle"),  # the engine flips its own current state, as one step
    Command.set_face: Verb("set_source_face", _face_path),
    Command.quality: Verb("set_quality", _quality_level),
    Command.model: Verb("set_model", _model_choice),
    Command.reload: Verb("reload_config"),
}
"""The changes, each answered with the state the target returned after applying it (else its
status). `status`, `snapshot` and `quit` answer something else and are handled by the server."""


def encode_request(cmd: str, args: dict[str, Any] | None = None, token: str | None = None) -> bytes:
    message: dict[str, Any] = {"cmd": cmd, "args": args or {}}
    if token is not None:
        message["token"] = token
    return json.dumps(message).encode() + b"\n"


def encode_ok(result: Any) -> bytes:
    return json.dumps({"ok": True, "result": to_jsonable(result)}, allow_nan=False).encode() + b"\n"


def encode_error(message: str) -> bytes:
    one_line = " ".join(str(message).split())
    return json.dumps({"ok": False, "error": one_line}).encode() + b"\n"


def decode_request(line: bytes) -> tuple[Command, dict[str, Any], str | None]:
    """(command, args, token) from one request line; ProtocolError for anything malformed."""
    try:
        message = loads_bounded(line, max_bytes=MAX_REQUEST_BYTES + 2, max_depth=MAX_REQUEST_DEPTH)
    except JsonRefused as exc:
        raise ProtocolError(f"request is {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError('request must be a JSON object like {"cmd": "status", "args": {}}')
    unknown = set(message) - {"cmd", "args", "token"}
    if unknown:
        raise ProtocolError(f"unknown request field(s): {', '.join(name[:40] for name in sorted(unknown)[:5])}")
    cmd: Any = message.get("cmd")  # untrusted JSON: Command() refuses anything but one of its values
    try:
        command = Command(cmd)
    except ValueError:
        raise ProtocolError(
            f"unknown command {shown(cmd)}", fix=f"use one of: {', '.join(c.value for c in Command)}"
        ) from None
    args = message.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ProtocolError(f'"args" must be a JSON object, got {type(args).__name__}')
    token = message.get("token")
    if token is not None and not isinstance(token, str):
        raise ProtocolError('"token" must be a string')
    return command, args, token


def shown(value: Any, limit: int = 60) -> str:
    """A value from a request, as an error message may quote it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def decode_response(line: bytes) -> Any:
    """The result of an ok response; ControlError with the daemon's message for an error response."""
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ControlError("the control endpoint answered something that is not a JSON line",
                           fix="is it really FaceLive Camera listening there?") from None
    if not isinstance(message, dict) or "ok" not in message:
        raise ControlError("the control endpoint answered an unexpected message",
                           fix="is it really FaceLive Camera listening there?")
    if not message["ok"]:
        raise ControlError(str(message.get("error", "unknown error")))
    return message.get("result")

"""`vcamd status|on|off|toggle|reload|set-face|quality|snapshot|quit`: drive the running daemon.

Each verb is one request over the daemon's control socket, found in the user runtime dir (e.g.
/run/user/1000/facelive/control.sock, /tmp/vcamd-1000 without a login session: the same folder
whatever the environment, see `config.folders.user_runtime_dir`) or in `$VCAMD_RUNTIME_DIR` when that is set. With no daemon
running every verb prints one line and exits 3 (`status --json` also prints a JSON answer saying so,
`"running": false`, for the scripts that read it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from vcamd.commands import Subcommands
from vcamd.common.quality import quality_names  # standard library only: the parser must not import numpy
from vcamd.files.private_files import write_private_atomic
from vcamd.remote.summary import describe_server  # standard library only, like quality

ENDPOINT_HELP = (
    "Talks to the running daemon over its control socket in the user runtime dir "
    "(set VCAMD_RUNTIME_DIR to use another directory). Exit 3 when no daemon is running."
)
QUIT_WAIT_S = 15.0


def register(subparsers: Subcommands) -> None:
    def verb(name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
        # The short help reads as the other commands' (lower case, in `vcamd --help`'s list); the
        # description is a sentence before the next one.
        parser = subparsers.add_parser(name, help=help_text, description=f"{help_text[:1].upper()}{help_text[1:]}. {ENDPOINT_HELP}")
        parser.set_defaults(func=handler)
        return parser

    status = verb("status", "show whether swapping is on (and what it still needs), fps, latency, quality level, config problems", _status)
    status.add_argument("--json", action="store_true",
                        help='print the status as JSON (with "running": false and the reason when no daemon runs; exit 3)')
    verb("on", "turn face swapping on (refused, saying what is missing and how to get it, until the models, consent and a face are there)",
         lambda args: _switch(args, "on"))
    verb("off", "turn face swapping off (the camera passes through unchanged)", lambda args: _switch(args, "off"))
    verb("toggle", "turn face swapping on if off, off if on", lambda args: _switch(args, "toggle"))
    verb("reload", "re-read the config file now (it is also reloaded on save)", _reload)
    set_face = verb("set-face", "use another source face photo", _set_face)
    set_face.add_argument("path", type=Path, metavar="PATH", help="photo with one clear face (PNG/JPEG)")
    quality = verb("quality", "lock the quality level, or `auto` to let the watchdog decide", _quality)
    quality.add_argument("level", choices=quality_names(), metavar="LEVEL",
                         help="one of: " + ", ".join(quality_names()))
    snapshot = verb("snapshot", "save the current output frame as a PNG, JPEG or WebP image (by OUT's extension)", _snapshot)
    snapshot.add_argument("out", type=Path, metavar="OUT", help="where to write the image: "
                          + ", ".join(SNAPSHOT_FORMATS) + " (the format follows the extension)")
    verb("quit", "stop the daemon", _quit)


def _client() -> Any:
    from vcamd.control.client import ControlClient

    return ControlClient()


def _status(args: argparse.Namespace) -> int:
    from vcamd.control.protocol import DaemonNotRunning

    try:
        status = _client().status()
    except DaemonNotRunning as err:
        if not args.json:
            raise
        # A script reading the JSON (`jq .panel_token`) gets an answer, not an empty stdout.
        print(json.dumps({"running": False, "error": err.message, "fix": err.fix}, indent=2, sort_keys=True))
        print(f"vcamd: error: {err}", file=sys.stderr)
        return err.exit_code
    if args.json:
        print(json.dumps({"running": True, **status}, indent=2, sort_keys=True))
    else:
        print_status(status)
    return 0


def _switch(args: argparse.Namespace, cmd: str) -> int:
    status = _client().request(cmd)
    print("Face swap on" if status.get("enabled") else "Face swap off (camera passes through)")
    return 0


def _reload(args: argparse.Namespace) -> int:
    status = _client().reload()
    print("Config reloaded")
    if status.get("config_error"):
        print(f"config problem: {status['config_error']}", file=sys.stderr)
        return 2
    return 0


def _set_face(args: argparse.Namespace) -> int:
    import stat

    from vcamd.common.errors import FaceError
    from vcamd.files.images import stat_given_path

    path = args.path.expanduser().resolve()
    info = stat_given_path(path, "source face")  # every way the path itself is wrong, as one line
    if stat.S_ISDIR(info.st_mode):
        raise FaceError(f"source face {path} is a folder, not a photo", fix="give the path of a photo (PNG or JPEG) in it")
    if not stat.S_ISREG(info.st_mode):
        raise FaceError(f"source face {path} is not a file", fix="give the path of a photo (PNG or JPEG)")
    status = _client().set_source_face(path)
    print(f"Source face: {status.get('source_face') or path}")
    if status.get("source_face_pick"):
        print(f"  {status['source_face_pick']}")
    return 0


def _quality(args: argparse.Namespace) -> int:
    from vcamd.control.protocol import parse_quality

    status = _client().set_quality(parse_quality(args.level))
    if args.level == "auto":
        print(f"Quality: automatic (now {status.get('level')})")
    else:
        print(f"Quality locked at {status.get('quality') or args.level}")
    return 0


STATUS_LABELS = {"gpu": "GPU", "precision_why": "Precision, why"}
"""Status keys whose row label is not the key itself, capitalised."""


SNAPSHOT_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WebP"}
"""Snapshot file extensions and the image format each one is written in."""


def snapshot_format(out: Path) -> str:
    """The image format for OUT's extension; asked before the daemon, so a bad name fails at once."""
    fmt = SNAPSHOT_FORMATS.get(out.suffix.lower())
    if fmt is None:
        from vcamd.common.errors import VcamdError

        raise VcamdError(
            f"cannot tell the image format of {out} from its extension {out.suffix or '(none)'!r}",
            fix="end the file name with " + ", ".join(SNAPSHOT_FORMATS),
        )
    return fmt


def encode_snapshot(png: bytes, fmt: str) -> tuple[bytes, int, int]:
    """The daemon's PNG as `fmt` bytes, with the frame's width and height (PNG is kept byte for byte)."""
    import cv2
    import numpy as np

    frame = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    if frame is None:
        from vcamd.control.protocol import ControlError

        raise ControlError("the daemon's snapshot could not be decoded as a PNG image")
    height, width = frame.shape[:2]
    if fmt == "PNG":
        return png, width, height
    params = {"JPEG": [cv2.IMWRITE_JPEG_QUALITY, 95], "WebP": [cv2.IMWRITE_WEBP_QUALITY, 95]}[fmt]
    ok, data = cv2.imencode(".jpg" if fmt == "JPEG" else ".webp", frame, params)
    if not ok:
        from vcamd.common.errors import VcamdError

        raise VcamdError(f"this OpenCV build cannot encode {fmt}", fix="save the snapshot as .png")
    return data.tobytes(), width, height


def _snapshot(args: argparse.Namespace) -> int:
    out: Path = args.out.expanduser()
    fmt = snapshot_format(out)
    image, width, height = encode_snapshot(_client().snapshot_png(), fmt)
    try:
        write_private_atomic(out, image)  # 0600 (it shows a face); a symlink at `out` is replaced, not followed
    except OSError as exc:
        import errno

        from vcamd.common.errors import VcamdError

        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            from vcamd.files.diskspace import full_disk_message

            message, fix = full_disk_message(str(out), out, "the snapshot")
            raise VcamdError(message, fix=fix) from None
        raise VcamdError(f"cannot write {out}: {exc.strerror}", fix="choose a writable path") from None
    print(f"Saved {out} ({width}×{height})")
    return 0


def _quit(args: argparse.Namespace) -> int:
    client = _client()
    client.quit()
    deadline = time.monotonic() + QUIT_WAIT_S
    while time.monotonic() < deadline:
        if not client.is_running():
            print("FaceLive Camera stopped")
            return 0
        time.sleep(0.1)
    print(f"FaceLive Camera was asked to stop but still answers after {QUIT_WAIT_S:g} s", file=sys.stderr)
    return 1


def _latency_text(latency: Any) -> str:
    """A number (ms) or percentiles ({"p50": .., "p95": ..}) as one readable string."""
    if isinstance(latency, (int, float)):
        return f"{latency:.0f} ms"
    if isinstance(latency, dict) and latency:
        return ", ".join(f"{name} {value:.0f} ms" for name, value in latency.items() if isinstance(value, (int, float)))
    return "–"


def print_status(status: dict[str, Any]) -> None:
    """The status as a readable table (rich; plain text when not a terminal)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    state = escape(str(status.get("state", "unknown")))
    state_style = {"running": "green", "camera offline": "yellow", "error": "red"}.get(state, "")
    needs = [n for n in status.get("swap_needs") or [] if isinstance(n, dict)]
    labels = ", ".join(str(n.get("label") or "?") for n in needs)
    if status.get("enabled"):
        table.add_row("Face swap", f"[green]on[/]{escape(f' (every face covered: it needs {labels})') if needs else ''}")
    else:
        table.add_row("Face swap", f"off{escape(f' (it needs {labels})') if needs else ''}")
    for need in needs:
        # Each with its fix: `vcamd on` is refused with the same list.
        table.add_row("  needs", f"[yellow]{escape(str(need.get('what', '?')))}[/] — {escape(str(need.get('fix', '')))}")
    table.add_row("State", f"[{state_style}]{state}[/]" if state_style else state)
    level = escape(str(status.get("level", "?")))
    quality = status.get("quality")
    if quality is None:
        table.add_row("Quality", str(level))
    elif quality == "auto":
        table.add_row("Quality", f"{level} (automatic)")
    else:
        table.add_row("Quality", f"{level} (locked by you)")
    fps, latency = status.get("fps"), status.get("latency_ms")
    table.add_row("Frame rate", f"{fps:.1f} fps" if isinstance(fps, (int, float)) else "–")
    table.add_row("Latency", _latency_text(latency))
    face = escape(str(status.get("source_face") or "(none set)"))
    pick = status.get("source_face_pick")  # a group photo: which face was taken
    table.add_row("Source face", f"{face}\n{escape(str(pick))}" if pick else face)
    providers = status.get("providers") or {}
    if isinstance(providers, dict):
        shown = ", ".join(f"{model}: {provider}" for model, provider in providers.items())
    else:
        shown = ", ".join(str(p) for p in providers)
    table.add_row("Providers", escape(shown) or "–")
    server = status.get("server")
    if isinstance(server, dict):
        table.add_row("Server", escape(describe_server(server)))
    error = status.get("config_error")
    table.add_row("Config", f"[red]{escape(str(error))}[/] (running on the last good config)" if error else "ok")
    # panel_token is for scripts (`--json`), not for a screen someone may be looking at.
    known = {"enabled", "state", "level", "quality", "fps", "latency_ms", "source_face", "source_face_pick", "providers",
             "config_error", "panel_url", "panel_token", "swap_needs", "server"}
    for key in sorted(set(status) - known):
        value = status[key]
        if value is None:
            continue  # nothing measured (no GPU, say): no row rather than "None"
        shown = ", ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, dict) else str(value)
        table.add_row(STATUS_LABELS.get(key, key.replace("_", " ").capitalize()), escape(shown))
    console = Console(soft_wrap=True, highlight=False)
    console.print(table)
    if status.get("panel_url"):
        # Outside the table, whose cells rich cuts to the terminal's width: the address must stay whole.
        console.print(f"Control page: {escape(str(status['panel_url']))}", overflow="ignore", crop=False)

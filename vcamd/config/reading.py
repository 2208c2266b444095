"""Reading a config file: its bytes (a regular file only, size-capped), TOML, the schema, and
relative paths made relative to the file. Every config read goes through here (load, watch, reload).
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vcamd.common.errors import ConfigError
from vcamd.config.folders import user_config_path
from vcamd.config.schema import Config
from vcamd.config.wording import describe_error
from vcamd.modelstore.roles import ROLES


def config_from_dict(data: dict[str, Any], origin: str = "<config>") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(origin, [describe_error(e) for e in exc.errors()]) from None


MAX_CONFIG_BYTES = 1 << 20
"""A config file is a few KB; anything over 1 MiB is refused unread (a symlink to a huge file)."""

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def read_config_bytes(path: Path) -> bytes:
    """The bytes of a config file: the one way every config read goes (load, watch, reload).

    Only a regular file is read, and at most MAX_CONFIG_BYTES: a FIFO would block the reader for
    good and /dev/zero would fill memory. Opened with O_NONBLOCK (opening a FIFO does not wait for
    a writer) and checked with fstat on the opened descriptor, so the check and the read see the
    same file even if the name is swapped in between. Symlinks are followed (dotfile managers use
    them); what they point to is checked. Raises FileNotFoundError when there is no file, and
    ConfigError for everything else.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror}"]) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError(str(path), ["is a folder, not a file — pass the config file itself (e.g. config.toml)"])
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(str(path), [f"is not a regular file (a {_file_kind(info.st_mode)}) — point it at a TOML file"])
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(str(path), [f"is {info.st_size:,} bytes, over the {MAX_CONFIG_BYTES:,}-byte (1 MiB) limit for a config file — is it the right file?"])
        if _NONBLOCK:
            os.set_blocking(fd, True)
        chunks, total = [], 0
        while total <= MAX_CONFIG_BYTES:  # the file may grow after fstat: never read past the limit
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_CONFIG_BYTES:
            raise ConfigError(str(path), [f"grew over the {MAX_CONFIG_BYTES:,}-byte (1 MiB) limit for a config file while being read"])
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror}"]) from None
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def load_config(path: Path | str | None = None) -> tuple[Config, Path | None]:
    """Load and validate a config file.

    With no path, the user config file is used when it exists, else the defaults. Returns the
    config and the file it came from (None for pure defaults). Raises ConfigError with one line
    per problem.
    """
    if path is None:
        candidate = user_config_path()
        if not candidate.exists():
            return Config(), None
        path = candidate
    path = Path(path).expanduser()
    try:
        raw = read_config_bytes(path)
    except FileNotFoundError:
        raise ConfigError(str(path), ["file not found — create it with `vcamd config init` or pass --config"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(str(path), ["not UTF-8 text — save it as UTF-8"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"invalid TOML: {exc}"]) from None
    except RecursionError:
        raise ConfigError(str(path), ["nested too deeply to parse — no setting needs more than two levels"]) from None
    config = config_from_dict(data, str(path))
    return _resolve_relative_paths(config, path.parent, str(path)), path


def _resolve_relative_paths(config: Config, base: Path, origin: str) -> Config:
    """Paths in a config file are relative to the file, not to wherever the daemon was started."""

    def fix(key: str, p: Path | None) -> Path | None:
        if p is None:
            return None
        try:
            p = p.expanduser()
        except RuntimeError:  # "~someone/..." where that user does not exist
            raise ConfigError(origin, [f"{key} = {str(p)!r}: cannot expand '~' (no such user) — use a full path"]) from None
        return p if p.is_absolute() else (base / p)

    def fix_model(key: str, value: str) -> str:
        # A model is a manifest name ("buffalo_l") or a path to an .onnx file; only paths move.
        if not ("/" in value or "\\" in value or value.endswith((".onnx", ".dfm"))):
            return value
        fixed = fix(f"[models] {key}", Path(value))
        return str(fixed)

    models = config.models.model_copy(
        update={
            "dir": fix("[models] dir", config.models.dir),
            **{role.key: fix_model(role.key, getattr(config.models, role.key)) for role in ROLES},
        }
    )
    swap = config.swap.model_copy(
        update={
            "source_face": fix("[swap] source_face", config.swap.source_face),
            "reference_face": fix("[swap] reference_face", config.swap.reference_face),
        }
    )
    device = config.camera.device
    if device.strip() and not device.strip().isdigit() and device.strip() != "synthetic":  # a device or video file path
        device = str(fix("[camera] device", Path(device.strip())))
    camera = config.camera.model_copy(update={"device": device})
    return config.model_copy(update={"models": models, "swap": swap, "camera": camera})

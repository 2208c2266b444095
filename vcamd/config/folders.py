"""The user's folders: where the config file, the models, the state and the control socket live.

Standard library and platformdirs only (no pydantic): `vcamd status` and the control client find
the socket without loading the schema.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import platformdirs

from vcamd.common.errors import VcamdError

APP_NAME = "facelive"


def user_config_path() -> Path:
    """`~/.config/facelive/config.toml` on Linux, the platform equivalent elsewhere."""
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def user_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME))


def user_state_dir() -> Path:
    return Path(platformdirs.user_state_dir(APP_NAME))


RUN_USER = Path("/run/user")
"""Where systemd-logind makes each user's session runtime folder (what XDG_RUNTIME_DIR names)."""
SHARED_TMP = Path("/tmp")
"""The fallback's parent: fixed, not $TMPDIR, so every environment of the user finds the same folder."""


def user_runtime_dir(*, uid: int | None = None, run_user: Path = RUN_USER, tmp: Path = SHARED_TMP) -> Path:
    """The folder of the control socket and the one-daemon lock: the one rule the daemon and every
    CLI verb follow, the same folder whatever the environment (a cron job, `su`, a container, a
    desktop session), so they always find each other and a second daemon always meets the lock.

    On Linux it depends on the user id only, never on $XDG_RUNTIME_DIR (unset in cron and `su`):
    `/run/user/UID/facelive` when logind's `/run/user/UID` is a folder of the user's that no one
    else can enter, else `/tmp/vcamd-UID` (created 0700 by the daemon, `control.client.checked_runtime_dir`).
    An existing `/tmp/vcamd-UID` that is a symlink or another user's is refused here, so no verb
    talks to a socket someone else planted. Elsewhere, the platform's per-user folder
    (platformdirs: no XDG variables there). `$VCAMD_RUNTIME_DIR` overrides it all
    (`control.protocol.runtime_dir`: tests, several daemons side by side)."""
    if not sys.platform.startswith("linux"):
        return Path(platformdirs.user_runtime_dir(APP_NAME))
    uid = os.geteuid() if uid is None else uid
    session = run_user / str(uid)
    if _private_folder_of(session, uid):
        return session / APP_NAME
    fallback = tmp / f"vcamd-{uid}"
    try:
        info = os.lstat(fallback)
    except FileNotFoundError:
        return fallback
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise VcamdError(
            f"the runtime folder {fallback} is not a folder of yours (uid {uid}): another user may have planted it",
            fix="remove it, or set VCAMD_RUNTIME_DIR to a private folder of yours",
        )
    return fallback


def _private_folder_of(path: Path, uid: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid and stat.S_IMODE(info.st_mode) & 0o077 == 0

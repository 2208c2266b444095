"""The config file, and the source face it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcamd.common.errors import ConfigError, VcamdError
from vcamd.config.schema import Config
from vcamd.doctor.results import CheckResult, Status, ok


def check_config(path: Path | None) -> tuple[CheckResult, Config]:
    """The config check, and the config the other checks use (the defaults when it is invalid)."""
    from vcamd.config.folders import user_config_path
    from vcamd.config.reading import load_config

    try:
        cfg, origin = load_config(path)
    except ConfigError as err:
        return CheckResult("config", Status.fail, f"{err.path}: " + "; ".join(err.problems),
                           f"edit {err.path} (`vcamd config check {err.path}` lists every problem); "
                           "the other checks use the defaults"), Config()
    where = str(origin) if origin else f"defaults (no file at {user_config_path()})"
    return ok("config", f"{where} is valid"), cfg


def check_source_face(cfg: Config, daemon_status: dict[str, Any] | None = None) -> CheckResult:
    """The config's source face; with none there, the one the running daemon uses (`--face`,
    `vcamd set-face`, the tray or the control page)."""
    face = cfg.swap.source_face
    running = (daemon_status or {}).get("source_face")
    if face is None and running:
        return ok("source face", f"{running}, in use by the running daemon (not in the config: a later start "
                                 "without --face has none until you set [swap] source_face)")
    if face is None:
        return CheckResult("source face", Status.warn, "no source face set: nothing to swap in, so `vcamd run` keeps "
                           "swapping off (the camera as it is) until you choose one",
                           "set [swap] source_face (and source_consent = true), or pick one in the tray's Source face menu "
                           "or on the control page (`vcamd panel`)")
    if not Path(face).is_file():
        return CheckResult("source face", Status.fail, f"[swap] source_face = {face} does not exist",
                           "fix the path in the config file")
    from vcamd.files.images import read_image

    try:
        image = read_image(face, "[swap] source_face")  # a file that is there but not a photo fails the run just the same
    except VcamdError as err:
        return CheckResult("source face", Status.fail, err.message, err.fix or "use a JPEG or PNG photo")
    if not cfg.swap.source_consent:
        return CheckResult("source face", Status.warn,
                           f"{face}: [swap] source_consent is not set, so `vcamd run` (and the start-up service) keeps "
                           "swapping off and refuses `vcamd on` without --i-have-consent",
                           "once you have the consent of the person in the photo, set `source_consent = true` under [swap]")
    return ok("source face", f"{face} ({image.shape[1]}×{image.shape[0]})")

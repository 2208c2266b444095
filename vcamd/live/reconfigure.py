"""How every config key takes effect while `vcamd run` runs: one table, one place.

* **live** — applied to the running engine between two frames (the camera or the output is
  reopened for [camera], [virtual_camera] and [preview]);
* **rebuild** — the face pipeline is built anew in the background with the new value (new model
  sessions, or values the face engine is built with) and swapped in between two frames when ready;
  the running one keeps publishing meanwhile;
* **restart** — takes effect at the next start of `vcamd run` (the user is told so).

`tests/live/test_reconfigure.py` walks every field of `Config`, so a new key cannot be left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel

from vcamd.config import Config


class Apply(StrEnum):
    live = "live"
    rebuild = "rebuild"
    restart = "restart"


L, B, R = Apply.live, Apply.rebuild, Apply.restart

TABLE: dict[str, dict[str, Apply]] = {
    "models": {"dir": B, "detector": B, "recognizer": B, "swapper": B, "enhancer": B, "parser": B, "providers": B, "mirror": B, "threads": B},
    # The detector is built with its size and threshold; full_every is the tracker's cadence, and
    # cover_threshold is asked of each full detection as it is submitted.
    "detection": {"size": B, "threshold": B, "cover_threshold": L, "full_every": L, "track_size": B},
    "swap": {
        "enabled": L,
        "source_face": L,  # embedded off the loop, then used from the next swap
        # Checked when the daemon starts, before any model is loaded; withdrawn (true → false)
        # while it runs: swapping off at once, and on/set-face refused until it is given back.
        "source_consent": L,
        "face_selection": B,  # "reference" needs the reference photo embedded at build
        "reference_face": B,
        "others": L,  # read by the loop for every frame
        "cover_changes": L,  # read by the loop for every frame
        "mouth_mask": B,
        "color_correction": B,
        "on_miss": L,
        "max_result_age_s": L,
        "pixel_boost": B,  # the face engine is built with it (and the watchdog told when it is installed)
    },
    # Read by the loop for every frame it locates the faces in.
    "smoothing": {"enabled": L, "min_cutoff_hz": L, "beta": L},
    "mask": {"regions": B, "min_visible": B},  # the face engine's parser is built with them
    "enhancer": {"enabled": L, "strength": L},
    "camera": {"device": L, "width": L, "height": L, "fps": L, "mjpg": L, "loop": L, "reopen_interval_s": L, "stall_timeout_s": L},
    "virtual_camera": {"name": L, "device": L, "backend": L},
    "watchdog": {k: L for k in ("budget_ms", "window", "degrade_ratio", "recover_headroom", "recover_after_s", "cooldown_s", "lowres_scale", "swap_age_budget_ms")},
    "disclosure": {"badge": L, "text": L, "corner": L},
    "preview": {"port": L, "jpeg_quality": L},
    "runtime": {"max_memory_gb": R, "log_level": L},
    "tray": {"enabled": R},
    # The control page is served beside the engine by `vcamd run`, started once with it.
    "panel": {"enabled": R, "port": R, "video_fps": R},
}


def config_keys(model: type[BaseModel] = Config) -> Iterator[tuple[str, str]]:
    """Every (section, key) of `Config`."""
    for section, info in model.model_fields.items():
        section_model = info.annotation
        assert isinstance(section_model, type) and issubclass(section_model, BaseModel), section
        for key in section_model.model_fields:
            yield section, key


@dataclass(frozen=True)
class Plan:
    """What a config change needs, key by key (as "section.key")."""

    live: set[str] = field(default_factory=set)
    rebuild: set[str] = field(default_factory=set)
    restart: set[str] = field(default_factory=set)

    @property
    def sections(self) -> set[str]:
        """The sections with a live change."""
        return {key.split(".", 1)[0] for key in self.live}

    def live_in(self, section: str) -> bool:
        return section in self.sections


def changed_keys(old: Config, new: Config) -> Iterator[tuple[str, str]]:
    for section, key in config_keys():
        if getattr(getattr(old, section), key) != getattr(getattr(new, section), key):
            yield section, key


def plan(old: Config, new: Config) -> Plan:
    """The changes from `old` to `new`, sorted by how they take effect."""
    out = Plan()
    for section, key in changed_keys(old, new):
        getattr(out, TABLE[section][key].value).add(f"{section}.{key}")
    return out


def needs_rebuild(built_from: Config, new: Config) -> bool:
    """Whether the face pipeline built from `built_from` must be rebuilt for `new`."""
    return bool(plan(built_from, new).rebuild)

"""How every config key takes effect while `vcamd run` runs: one table, one place.

* **live** — applied to the running engine between two frames (the camera or the output is
  reopened for [camera], [virtual_camera] and [preview]);
* **rebuild** — the face pipeline is built anew in the background with the new value (new model
  sessions, or values the face engine is built with) and swapped in between two frames when ready;
  the running one keeps publishing meanwhile;
* **restart** — takes effect at the next start of `vcamd run` (the user is told so).

Every row names its owner (`Owner`): the part that applies the key. `tests/live/test_reconfigure.py`
walks every field of `Config`, so a new key cannot be left out, and changes every live key in a
running engine to see each take effect.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from vcamd.config.schema import Config


class Apply(StrEnum):
    live = "live"
    rebuild = "rebuild"
    restart = "restart"


class Owner(StrEnum):
    """Who applies a live key: each part applies its own settings (`configure(...)`), the others
    are the engine's switches and the parts it replaces whole (`settings.Settings` runs them, in
    `APPLY_ORDER`)."""

    camera = "camera"  # the source and its reader, reopened (`Settings`)
    watchdog = "watchdog"  # `Watchdog.configure`: thresholds; forgets only what the changed keys judged
    tracker = "tracker"  # `LiveTracker.configure`: full-detection cadence, detector sizes, unsure band
    frames = "frames"  # `FrameProcessor.configure`: per-frame policy (others, cover_changes, on_miss, …)
    publisher = "publisher"  # `Publisher.configure`: the badge, and the output reopened
    swapping = "swapping"  # swap on/off (`Settings`)
    consent = "consent"  # consent withdrawn or given again (`Settings`)
    source_face = "source_face"  # the photo, embedded off the loop (`Settings`)
    enhancer = "enhancer"  # the running pipeline's enhancer, and the watchdog told (`Settings`)
    logging = "logging"  # the root logger's level, unless `-v` pinned it (`Settings`)
    pipeline = "pipeline"  # rebuild rows: the face pipeline loaded anew (`loading.PipelineBuild`)
    restart = "restart"  # restart rows: the next start of `vcamd run`


APPLY_ORDER: tuple[Owner, ...] = (
    Owner.camera, Owner.watchdog, Owner.tracker, Owner.frames,
    # A withdrawal of consent wins over [swap] enabled in the same edit; the photo is read after
    # both, the enhancer after it.
    Owner.swapping, Owner.consent, Owner.source_face, Owner.enhancer, Owner.logging,
    Owner.publisher,  # last: the output reopens with everything else applied
)
"""The order live owners apply an edit in (every live owner is here: tests check it)."""


@dataclass(frozen=True)
class Row:
    """How one key takes effect, and who applies it."""

    apply: Apply
    owners: tuple[Owner, ...]


def live(*owners: Owner) -> Row:
    return Row(Apply.live, owners)


REBUILD = Row(Apply.rebuild, (Owner.pipeline,))
RESTART = Row(Apply.restart, (Owner.restart,))
B, R = REBUILD, RESTART
O = Owner

TABLE: dict[str, dict[str, Row]] = {
    "models": {k: B for k in ("dir", "detector", "recognizer", "swapper", "swapper_family", "converter", "enhancer", "parser",
                              "providers", "mirror", "threads", "precision", "server", "fallback")},  # precision: the swapper's session, float or its int8 copy
    # The detector is built with its size and threshold; full_every is the tracker's cadence, and
    # cover_threshold is asked of each full detection as it is submitted.
    "detection": {"size": B, "threshold": B, "cover_threshold": live(O.tracker), "full_every": live(O.tracker), "track_size": B},
    "swap": {
        "enabled": live(O.swapping),
        "source_face": live(O.source_face),  # embedded off the loop, then used from the next swap
        # Checked when the daemon starts, before any model is loaded; withdrawn (true → false)
        # while it runs: swapping off at once, and on/set-face refused until it is given back.
        "source_consent": live(O.consent),
        "face_selection": B,  # "reference" needs the reference photo embedded at build
        "reference_face": B,
        # Which faces are obscured, and whether the unsure band is asked of the detections.
        "others": live(O.frames, O.tracker),
        "cover_changes": live(O.frames),
        "mouth_mask": B,
        "color_correction": B,
        "on_miss": live(O.frames),
        "max_result_age_s": live(O.frames),
        "pixel_boost": B,  # the face engine is built with it (and the watchdog told when it is installed)
        "weight": B,  # the face engine is built with it
        "map": B,  # every mapped photo is read at build (an unchanged source photo's latent is computed again)
    },
    "smoothing": {"enabled": live(O.frames), "min_cutoff_hz": live(O.frames), "beta": live(O.frames)},
    "mask": {"regions": B, "min_visible": B},  # the face engine's parser is built with them
    "enhancer": {"enabled": live(O.enhancer), "strength": live(O.enhancer), "weight": live(O.enhancer)},
    "camera": {k: live(O.camera) for k in ("device", "width", "height", "fps", "mjpg", "loop", "reopen_interval_s", "stall_timeout_s")},
    "virtual_camera": {"name": live(O.publisher), "device": live(O.publisher), "backend": live(O.publisher)},
    "watchdog": {
        **{k: live(O.watchdog) for k in ("budget_ms", "window", "degrade_ratio", "recover_headroom", "recover_after_s", "cooldown_s",
                                          "swap_age_budget_ms")},
        "lowres_scale": live(O.watchdog, O.tracker),  # the tracker's detector sizes at low_res
    },
    "disclosure": {"badge": live(O.publisher), "text": live(O.publisher), "corner": live(O.publisher)},
    "preview": {"port": live(O.publisher), "jpeg_quality": live(O.publisher)},
    "runtime": {"max_memory_gb": R, "log_level": live(O.logging)},
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
    """What a config change needs, key by key (as "section.key"). Made once per edit (`plan`)."""

    live: set[str] = field(default_factory=set)
    rebuild: set[str] = field(default_factory=set)
    restart: set[str] = field(default_factory=set)

    owners: set[Owner] = field(default_factory=set)
    """The owners of the live changes: each applies the new config once."""

    pipeline_outdated: bool = False
    """The face pipeline built from `plan`'s `built_from` must be built anew for the new config."""

    @property
    def changed(self) -> set[str]:
        return self.live | self.rebuild | self.restart

    def keys_in(self, section: str) -> frozenset[str]:
        """The changed keys of one section, by their names in it (for the owner of that section)."""
        prefix = f"{section}."
        return frozenset(name.removeprefix(prefix) for name in self.changed if name.startswith(prefix))


def plan(old: Config, new: Config, *, built_from: Config | None = None, detector_copy: bool = False) -> Plan:
    """The changes from `old` to `new`, sorted by how they take effect, in one walk over the keys.

    `built_from`: what the running face pipeline was built from (default `old`; it differs while a
    load is under way or after one failed): `pipeline_outdated` compares the rebuild keys with it.
    `detector_copy`: its detector runs an int8 copy or builds one (`detector_copy`): then also the
    settings the copy's check was made at (`detector_check_outdated`)."""
    base = old if built_from is None else built_from
    out = Plan()
    outdated = False
    for section, key in config_keys():
        value = getattr(getattr(new, section), key)
        row = TABLE[section][key]
        if value != getattr(getattr(old, section), key):
            getattr(out, row.apply.value).add(f"{section}.{key}")
            if row.apply is Apply.live:
                out.owners.update(row.owners)
        if row.apply is Apply.rebuild and value != getattr(getattr(base, section), key):
            outdated = True
    return replace(out, pipeline_outdated=outdated or (detector_copy and detector_check_outdated(base, new)))


def detector_check_outdated(base: Config, new: Config) -> bool:
    """Whether a detector's int8 copy checked at `base`'s looks would run under settings its check did
    not cover (`vcamd.models.int8detector.looks_for`; some — `[detection] cover_threshold`, `[watchdog]
    lowres_scale` — are live keys): the pipeline is then built anew, its detector float until a copy is
    checked at the new looks (another build key)."""
    from vcamd.models.int8detector import looks_for

    return looks_for(new) != looks_for(base)


def detector_copy(faces: Any) -> bool:
    """Whether the running face engine's detector runs its int8 copy or has one being built for it."""
    choice = getattr(faces, "precisions", {}).get("detector") if faces is not None else None
    return choice is not None and (choice.runs == "int8" or bool(choice.build))


def needs_rebuild(built_from: Config, new: Config) -> bool:
    """Whether the face pipeline built from `built_from` must be rebuilt for `new`."""
    return plan(built_from, new).pipeline_outdated

"""The detector input sizes each quality level asks for, and the band of unsure faces: one rule for
the tracker, the warm-up and the full detections. `TrackerSettings` is what of the config they read."""


from __future__ import annotations

from dataclasses import dataclass

from vcamd.common.quality import BEST, Level, detect_size
from vcamd.config.schema import Config, FaceSelection, Others


@dataclass(frozen=True)
class TrackerSettings:
    """What the tracker reads of the config (`LiveTracker.configure`), by the keys' names: the full
    detections' cadence, the detector sizes at each level and the unsure band with the selection
    that decides whether it is asked. Built from a config in one place (`of`)."""

    full_every: int  # [detection]
    size: int  # [detection]
    track_size: int  # [detection]
    threshold: float  # [detection]
    cover_threshold: float  # [detection]
    lowres_scale: float  # [watchdog]: the detector sizes at the reduced rungs
    face_selection: FaceSelection  # [swap]
    others: Others  # [swap]

    @classmethod
    def of(cls, cfg: Config) -> TrackerSettings:
        det, swap = cfg.detection, cfg.swap
        return cls(det.full_every, det.size, det.track_size, det.threshold, det.cover_threshold,
                   cfg.watchdog.lowres_scale, swap.face_selection, swap.others)


def detect_sizes(settings: TrackerSettings, level: Level) -> dict[str, int]:
    """{"full_size", "track_size"}: the detector input sizes at `level`."""
    scale = settings.lowres_scale
    return {"full_size": detect_size(settings.size, level, scale), "track_size": detect_size(settings.track_size, level, scale)}


def vouch_size(settings: TrackerSettings) -> int:
    """The input size a full detection must run at for what it looked at to count as seen
    (`unseen`): the best rung's. A reduced rung's smaller input misses faces this one finds."""
    return detect_sizes(settings, BEST)["full_size"]


def unsure_band(settings: TrackerSettings) -> tuple[float, float] | None:
    """(threshold, cover_threshold) when the full detections also report the faces the detector
    is unsure of — scored in [cover_threshold, threshold): where every face shown must be swapped
    or covered (face_selection = "all", or others = "obscure"), they are covered
    (`FaceReport.unsure`). None: off (others = "show" leaves the faces the selection does not pick
    alone, unsure or not; and a frame with no face found at `threshold` is covered whole anyway)."""
    shown = settings.face_selection is not FaceSelection.all and settings.others is Others.show
    if shown or settings.cover_threshold >= settings.threshold:
        return None
    return settings.threshold, settings.cover_threshold


def all_detect_sizes(settings: TrackerSettings) -> list[int]:
    """Every input size a level may ask for (their sessions are built before the stream starts).
    The smaller crop inputs a small face chooses and the mosaics of a group are built when first
    needed (`cropplan.ShapeWarmer`)."""
    return sorted({size for level in Level for size in detect_sizes(settings, level).values()})

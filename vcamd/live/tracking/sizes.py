"""The detector input sizes each quality level asks for, and the band of unsure faces: one rule for
the tracker, the warm-up and the full detections."""


from __future__ import annotations

from vcamd.common.quality import BEST, Level, detect_size
from vcamd.config.schema import Config, FaceSelection, Others


def detect_sizes(cfg: Config, level: Level) -> dict[str, int]:
    """{"full_size", "track_size"}: the detector input sizes at `level`."""
    det, scale = cfg.detection, cfg.watchdog.lowres_scale
    return {"full_size": detect_size(det.size, level, scale), "track_size": detect_size(det.track_size, level, scale)}


def vouch_size(cfg: Config) -> int:
    """The input size a full detection must run at for what it looked at to count as seen
    (`unseen`): the best rung's. A reduced rung's smaller input misses faces this one finds."""
    return detect_sizes(cfg, BEST)["full_size"]


def unsure_band(cfg: Config) -> tuple[float, float] | None:
    """(threshold, cover_threshold) when the full detections also report the faces the detector
    is unsure of — scored in [cover_threshold, threshold): where every face shown must be swapped
    or covered (face_selection = "all", or others = "obscure"), they are covered
    (`FaceReport.unsure`). None: off (others = "show" leaves the faces the selection does not pick
    alone, unsure or not; and a frame with no face found at `threshold` is covered whole anyway)."""
    det = cfg.detection
    shown = cfg.swap.face_selection is not FaceSelection.all and cfg.swap.others is Others.show
    if shown or det.cover_threshold >= det.threshold:
        return None
    return det.threshold, det.cover_threshold


def all_detect_sizes(cfg: Config) -> list[int]:
    """Every input size a level may ask for (their sessions are built before the stream starts).
    The smaller crop inputs a small face chooses and the mosaics of a group are built when first
    needed (`cropplan.ShapeWarmer`)."""
    return sorted({size for level in Level for size in detect_sizes(cfg, level).values()})

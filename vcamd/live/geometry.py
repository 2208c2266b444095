"""Whether two face positions are one face: the rule the tracker, the smoothing and the composing
of a frame share. Pure (no state, no threads, no models)."""

from __future__ import annotations

import numpy as np

from vcamd.types import Face

SAME_TRACK_WIDTHS = 0.5
"""Two positions are one face when their centres are closer than this × the smaller width (both
are positions of one face a frame or a detection apart; a neighbour is a width away)."""


def near(face: Face, other: Face, widths: float = SAME_TRACK_WIDTHS) -> bool:
    """Whether two positions are one face (see SAME_TRACK_WIDTHS)."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    ox, oy = (other.box[0] + other.box[2]) / 2, (other.box[1] + other.box[3]) / 2
    return bool(np.hypot(ox - cx, oy - cy) < widths * max(min(face.width, other.width), 1.0))

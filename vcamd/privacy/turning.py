"""Which tracked faces count as seen from the side: `TurnedFaces`, the live loop's memory of it.

One look's keypoints do not say it for sure. A face turned away reads side-on in some looks and
facing in others: crowd_selfie's profile at 720p, in SCRFD-500M's crop looks around it, has an
`eye_share` from 0.06 to 0.65 (median 0.23), and each look that read it facing pasted a swap on
the nose side of it, the cheek and ear left as the camera showed them — recognised in 7–48 of 48
checked frames of `benchmarks/loop_cost.py`'s crowd row at 720p with that detector. So a face that
read side-on in any look of the last TURNED_KEEP_S stays side-on (covered, `rule.compose`) until
it has read facing for that long.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from vcamd.common.types import Face
from vcamd.privacy.geometry import same_face_pairs
from vcamd.privacy.rule import side_on

TURNED_KEEP_S = 1.0
"""A face stays side-on this long after the last look that read it so (30 frames at 30 fps): a turn
back to the camera is swapped a second later; a face between the two is covered, not half swapped."""


class TurnedFaces:
    """Per face of the frame, whether it was seen from the side within TURNED_KEEP_S (the same face
    from frame to frame: `geometry.same_face_pairs`). A face side-on within that time is remembered
    at its last place while it is missing from the targets too (lost, unsure, between looks): back
    a few frames later, it is still side-on. One thread at a time (the live loop's)."""

    def __init__(self) -> None:
        self._known: list[tuple[Face, float]] = []  # faces at their last place, each with when it last read side-on

    def update(self, faces: Sequence[Face], t: float) -> list[bool]:
        """`faces` at time `t` (seconds, any monotonic clock): per face, side-on now or within TURNED_KEEP_S."""
        now = side_on(faces).tolist()
        previous = self._known
        pairs = same_face_pairs(list(faces), [face for face, _ in previous])
        known: list[tuple[Face, float]] = []
        out: list[bool] = []
        for face, sideways, j in zip(faces, now, pairs, strict=True):
            since = t if sideways else previous[j][1] if j is not None else -math.inf
            known.append((face, since))
            out.append(t - since <= TURNED_KEEP_S)
        taken = set(pairs)
        known += [(face, since) for j, (face, since) in enumerate(previous) if j not in taken and t - since <= TURNED_KEEP_S]
        self._known = known
        return out

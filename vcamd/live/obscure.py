"""Making a face unrecognisable: the one place that decides how an uncovered face is obscured.

Used by the live engine for every face it cannot swap or hold (start-up, misses, lost tracks) and for
the whole frame when it cannot say where the faces are. The cost follows the obscured area only.
"""

from __future__ import annotations

import cv2

from vcamd.types import Frame


def obscure_region(frame: Frame, box: tuple[int, int, int, int]) -> None:
    """Make whatever face is inside `box` (x0, y0, x1, y1) unrecognisable, in place."""
    x0, y0, x1, y1 = box
    if x1 - x0 < 2 or y1 - y0 < 2:
        return
    roi = frame[y0:y1, x0:x1]
    small = cv2.resize(roi, (max(1, (x1 - x0) // 16), max(1, (y1 - y0) // 16)), interpolation=cv2.INTER_AREA)
    cv2.resize(small, (x1 - x0, y1 - y0), dst=roi, interpolation=cv2.INTER_LINEAR)


def obscure_frame(frame: Frame) -> None:
    """The whole frame, for when the engine cannot say where the faces are."""
    obscure_region(frame, (0, 0, frame.shape[1], frame.shape[0]))

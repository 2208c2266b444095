"""Named types that travel along the frame path. Small, frozen, no dicts passed around."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from cv2.typing import MatLike

Frame = npt.NDArray[np.uint8]
"""H×W×3 uint8 BGR image, as OpenCV delivers it."""


def as_frame(image: MatLike) -> Frame:
    """An OpenCV result as the uint8 image it is. OpenCV's stubs give every result one type, an array
    of any depth (`MatLike`); its functions keep their input's depth (a uint8 image in, one out) and
    a decoded or captured image is uint8. Free at run time: the same array, only its type named."""
    return cast(Frame, image)


def as_float32(image: MatLike) -> npt.NDArray[np.float32]:
    """An OpenCV result as the float32 array it is (a float32 input's blur, warp or blob): `as_frame`'s
    reason, for float images."""
    return cast(npt.NDArray[np.float32], image)

Points = npt.NDArray[np.float32]
"""N×2 float32 pixel coordinates."""


@dataclass(frozen=True, slots=True)
class Face:
    """One detected face in frame coordinates."""

    box: tuple[float, float, float, float]  # x1, y1, x2, y2
    score: float
    kps: Points  # 5×2: left eye, right eye, nose, left mouth corner, right mouth corner

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]

    @property
    def area(self) -> float:
        return max(0.0, self.width) * max(0.0, self.height)


@dataclass(frozen=True, slots=True)
class Captured:
    """A camera frame stamped when it was read (time.monotonic seconds) and numbered."""

    frame: Frame
    t_capture: float
    seq: int


class Outcome(StrEnum):
    """What a published frame shows."""

    swapped = "swapped"  # the swapped face (fresh or re-composited at the face's current position)
    held = "held"  # the last good output, because this frame could not be swapped
    blurred = "blurred"  # the face region blurred, because it could not be swapped
    passthrough = "passthrough"  # the raw frame while swapping was on (only with on_miss = passthrough)
    off = "off"  # swapping turned off by the user: the raw frame, not a miss
    offline = "offline"  # the camera-offline placeholder (the camera lost or stalled)
    starting = "starting"  # the "Camera starting…" card, before the camera's first frame: not a miss


@dataclass(frozen=True)
class ModelFiles:
    """The model files a config uses, resolved before the face engine is built (`vcamd.modelstore`,
    in `vcamd.models.pipeline`): the face engine opens files, it never looks them up."""

    paths: Mapping[str, Path]
    """Role → file, for every model the config uses (`modelstore.roles`)."""
    enhancer: Callable[[], Path]
    """The enhancer's file, looked up when it is switched on while running (it may be unused at start)."""

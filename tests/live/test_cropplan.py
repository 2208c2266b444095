"""The tracking crop: cut around a face, scaled to the detector's input, mapped back to the frame."""

from __future__ import annotations

import numpy as np
import pytest

from vcamd.common.types import Face
from vcamd.live.tracking.cropplan import crop_around


def _dot_frame(x: float, y: float, shape=(720, 1280)) -> np.ndarray:
    """A grey frame with a soft bright dot centred at (x, y) (sub-pixel)."""
    ys, xs = np.mgrid[: shape[0], : shape[1]].astype(np.float32)
    dot = 200.0 * np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * 6.0**2))
    return np.repeat((30 + dot).astype(np.uint8)[:, :, None], 3, axis=2)


def _centroid(patch: np.ndarray) -> tuple[float, float]:
    w = np.clip(patch[:, :, 0].astype(np.float64) - 30, 0, None)
    ys, xs = np.mgrid[: patch.shape[0], : patch.shape[1]]
    return float((w * xs).sum() / w.sum()), float((w * ys).sum() / w.sum())


@pytest.mark.parametrize(
    "box, dot",
    [
        ((600.3, 300.7, 700.9, 420.2), (640.4, 350.6)),  # inside the frame: cut and resized
        ((1200.0, 10.0, 1290.0, 110.0), (1230.2, 40.7)),  # over the top-right edge: warpAffine
        ((500.0, 300.0, 540.0, 340.0), (515.5, 322.25)),  # a small face: the crop is scaled up
    ],
)
def test_crop_maps_back_to_the_frame(box, dot):
    """A point in the tracking patch maps back (TrackCrop.to_frame) to where it is in the frame."""
    frame = _dot_frame(*dot)
    face = Face(box=box, score=0.9, kps=np.zeros((5, 2), np.float32))
    patch, crop = crop_around(frame, face, 192)
    assert patch.shape == (192, 192, 3) and patch.flags.c_contiguous
    assert not np.shares_memory(patch, frame)
    px, py = _centroid(patch)
    found = crop.to_frame(Face(box=(px, py, px, py), score=1.0, kps=np.array([[px, py]] * 5, np.float32)))
    assert abs(found.box[0] - dot[0]) < 0.25 and abs(found.box[1] - dot[1]) < 0.25
    side = 2.0 * max(box[2] - box[0], box[3] - box[1])
    assert abs(192 / crop.scale - side) <= 1.0  # CROP_FACTOR × the face, to the pixel

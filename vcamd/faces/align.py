"""Similarity transforms between a face's 5 keypoints and the crop templates the models expect.

"arcface" is insightface's rule: ArcFace 112 (recognizer) and, at multiples of 128, the 112 template
shifted 8 px right (inswapper: `norm_crop2(img, kps, 128)`). "ffhq" is FFHQ 512 (GFPGAN). The other
swapper and enhancer families name FaceFusion's templates (`UNIT_TEMPLATES`: points as fractions of
the crop side, scaled by the crop size): arcface_112_v1 (simswap, ghost), arcface_112_v2 (the
ArcFace 112 points, blendswap's source), arcface_128 (hyperswap, gpen_bfr_256), ffhq_512 (uniface,
blendswap), mtcnn_512 (hififace) and dfl_whole_face (DeepFaceLab models).
A transform M maps frame coordinates to crop coordinates; `invert_affine(M)` maps back.
"""

from __future__ import annotations

import functools
from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.types import Frame, Points, as_frame

Template = Literal["arcface", "ffhq", "arcface_112_v1", "arcface_112_v2", "arcface_128", "ffhq_512", "mtcnn_512", "dfl_whole_face"]

ARCFACE_112: Points = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float32,
)
"""ArcFace's 5-point template in a 112×112 crop: left eye, right eye, nose, mouth corners."""

FFHQ_512: Points = np.array(
    [[192.98138, 239.94708], [318.90277, 240.1936], [256.63416, 314.01935], [201.26117, 371.41043], [313.08905, 371.15118]],
    dtype=np.float32,
)
"""The FFHQ 5-point template in a 512×512 crop (what GFPGAN was trained on)."""

ARCFACE_112_V1: Points = np.array(
    [[39.730, 51.138], [72.270, 51.138], [56.000, 68.493], [42.463, 87.010], [69.537, 87.010]],
    dtype=np.float32,
)
"""The older, left-right symmetric ArcFace template in a 112×112 crop (SimSwap's and GHOST's crops;
FaceFusion's arcface_112_v1 is these points / 112)."""

UNIT_TEMPLATES: dict[str, Points] = {
    "arcface_112_v1": ARCFACE_112_V1 / np.float32(112.0),
    "arcface_112_v2": ARCFACE_112 / np.float32(112.0),
    "arcface_128": (ARCFACE_112 + np.array([8.0, 0.0], np.float32)) / np.float32(128.0),
    "ffhq_512": FFHQ_512 / np.float32(512.0),
    # The two below are published only as fractions of the crop side (FaceFusion's face_helper).
    "mtcnn_512": np.array([[0.36562865, 0.46733799], [0.63305391, 0.46585885], [0.50019127, 0.61942959],
                           [0.39032951, 0.77598822], [0.61178945, 0.77476328]], dtype=np.float32),
    "dfl_whole_face": np.array([[0.35342266, 0.39285716], [0.62797622, 0.39285716], [0.48660713, 0.54017860],
                                [0.38839287, 0.68750011], [0.59821427, 0.68750011]], dtype=np.float32),
}
"""FaceFusion's named templates as fractions of the crop side: at size S the points are these × S
(whatever S is: a 256-px arcface_128 crop is the 128 one scaled by 2, shift included)."""

Affine = npt.NDArray[np.float32]
"""2×3 float32 matrix mapping frame points (x, y, 1) to crop points."""


def template_points(size: int, template: Template = "arcface") -> Points:
    """The template's 5 points in a size×size crop.

    ArcFace follows insightface's rule: sizes that are multiples of 112 scale the 112 template;
    multiples of 128 scale it by size/128 and shift it 8·size/128 px right (inswapper's 128 crop).
    FFHQ scales the 512 template by size/512; the named templates of `UNIT_TEMPLATES` scale by size.
    """
    if template == "ffhq":
        return FFHQ_512 * np.float32(size / 512.0)
    if template in UNIT_TEMPLATES:
        return UNIT_TEMPLATES[template] * np.float32(size)
    if template != "arcface":
        raise ValueError(f"unknown alignment template {template!r}; expected 'arcface', 'ffhq' or one of {', '.join(UNIT_TEMPLATES)}")
    if size % 112 == 0:
        return ARCFACE_112 * np.float32(size / 112.0)
    if size % 128 == 0:
        ratio = size / 128.0
        return ARCFACE_112 * np.float32(ratio) + np.array([8.0 * ratio, 0.0], dtype=np.float32)
    raise ValueError(f"ArcFace crops must be a multiple of 112 or 128 px, got {size}")


def similarity_transform(src: npt.ArrayLike, dst: npt.ArrayLike) -> Affine:
    """Least-squares similarity (rotation, uniform scale, translation) taking src onto dst.

    The same estimate as Umeyama's solution (skimage's SimilarityTransform, which insightface uses,
    without RANSAC: 5 good points need no outlier rejection), in its 2-D closed form: with points as
    complex numbers, scale·rotation is the single complex factor a = Σ conj(s)·d / Σ |s|² of the
    centred points — no SVD, and a proper rotation by construction (never a reflection).
    """
    return _similarity(np.asarray(src, dtype=np.float64).tolist(), np.asarray(dst, dtype=np.float64).tolist())


def _similarity(src: list[list[float]], dst: list[list[float]]) -> Affine:
    """`similarity_transform` on point lists, in plain Python floats (float64, as numpy would): for
    5 points this is ~4 µs against ~15 µs of numpy calls, per face and per frame."""
    n = len(src)
    smx = sum([p[0] for p in src]) / n
    smy = sum([p[1] for p in src]) / n
    dmx = sum([p[0] for p in dst]) / n
    dmy = sum([p[1] for p in dst]) / n
    src_var = dot_c = dot_s = 0.0
    for (x, y), (u, v) in zip(src, dst):
        x, y, u, v = x - smx, y - smy, u - dmx, v - dmy
        src_var += x * x + y * y
        dot_c += x * u + y * v
        dot_s += x * v - y * u
    if src_var > 0:
        a = dot_c / src_var  # scale · cos θ
        b = dot_s / src_var  # scale · sin θ
    else:
        a, b = 1.0, 0.0  # all points coincide: no scale or rotation to recover, only the shift
    return np.array(
        ((a, -b, dmx - (a * smx - b * smy)), (b, a, dmy - (b * smx + a * smy))),
        dtype=np.float32,
    )


@functools.lru_cache(maxsize=32)
def _template_list(size: int, template: Template) -> list[list[float]]:
    points: list[list[float]] = template_points(size, template).astype(np.float64).tolist()
    return points


def estimate_affine(kps: npt.ArrayLike, size: int, template: Template = "arcface") -> Affine:
    """M (2×3 float32) that maps a face's 5 keypoints onto the template in a size×size crop."""
    kps = np.asarray(kps, dtype=np.float32)
    if kps.shape != (5, 2):
        raise ValueError(f"expected 5×2 keypoints, got shape {kps.shape}")
    return _similarity(kps.tolist(), _template_list(size, template))


def warp(frame: Frame, m: Affine, size: int) -> Frame:
    """The size×size BGR crop that M maps the frame into (black outside the frame).

    warpAffine samples only the crop's size² pixels, so the cost does not depend on the frame size.
    `frame` is BGR, or the same frame from `for_warps` (BGRA): then the crop is the same, bit for
    bit, and ~2× cheaper.
    """
    crop = as_frame(cv2.warpAffine(frame, m, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0))
    return as_frame(cv2.cvtColor(crop, cv2.COLOR_BGRA2BGR)) if crop.ndim == 3 and crop.shape[2] == 4 else crop


WARP4_PAYS = 16
"""`for_warps` converts the frame when the crops to cut have at least 1/16 of its pixels: converting
costs ~0.15–0.2 ns a frame pixel (more on small frames), a 4-channel warp saves ~3.4 ns a crop
pixel (a 128² crop: 105 → 49 µs; measured on the 2-core dev machine)."""


def for_warps(frame: Frame, crops: int, side: int) -> Frame:
    """The frame to cut `crops` side² crops from with `warp`: `frame` itself, or — when it pays —
    a copy with a fourth channel. OpenCV warps 8-bit 4-channel images through its SIMD path and
    3-channel ones without it; the crops `warp` cuts from the copy are bit for bit those of the
    BGR frame. It pays for a group (29 faces of a 1000×720 region: 4.4 → 1.9 CPU-ms), not for one
    face (the conversion of its region costs about what one crop saves)."""
    if crops < 2 or crops * side * side * WARP4_PAYS < frame.shape[0] * frame.shape[1]:
        return frame
    return as_frame(cv2.cvtColor(frame, cv2.COLOR_BGR2BGRA))


def invert_affine(m: Affine) -> Affine:
    """The inverse similarity: crop coordinates back to frame coordinates."""
    return cv2.invertAffineTransform(np.asarray(m, dtype=np.float64)).astype(np.float32)


def transform_points(points: npt.ArrayLike, m: Affine) -> Points:
    """Apply a 2×3 affine to N×2 points."""
    pts = np.asarray(points, dtype=np.float32).reshape(-1, 2)
    return (pts @ np.asarray(m, dtype=np.float32)[:, :2].T + np.asarray(m, dtype=np.float32)[:, 2]).astype(np.float32)

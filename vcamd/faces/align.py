"""Similarity transforms between a face's 5 keypoints and the crop templates the models expect.

Three crops are used: ArcFace 112 (recognizer), ArcFace-128 (inswapper: the 112 template shifted
8 px right, exactly like insightface's `norm_crop2(img, kps, 128)`) and FFHQ 512 (GFPGAN).
A transform M maps frame coordinates to crop coordinates; `invert_affine(M)` maps back.
"""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.types import Frame, Points

Template = Literal["arcface", "ffhq"]

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

Affine = npt.NDArray[np.float32]
"""2×3 float32 matrix mapping frame points (x, y, 1) to crop points."""


def template_points(size: int, template: Template = "arcface") -> Points:
    """The template's 5 points in a size×size crop.

    ArcFace follows insightface's rule: sizes that are multiples of 112 scale the 112 template;
    multiples of 128 scale it by size/128 and shift it 8·size/128 px right (inswapper's 128 crop).
    FFHQ scales the 512 template by size/512.
    """
    if template == "ffhq":
        return FFHQ_512 * np.float32(size / 512.0)
    if template != "arcface":
        raise ValueError(f"unknown alignment template {template!r}; expected 'arcface' or 'ffhq'")
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
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    sx, sy = (src - src_mean).T
    dx, dy = (dst - dst_mean).T
    src_var = float(sx @ sx + sy @ sy)
    if src_var > 0:
        a = float(sx @ dx + sy @ dy) / src_var  # scale · cos θ
        b = float(sx @ dy - sy @ dx) / src_var  # scale · sin θ
    else:
        a, b = 1.0, 0.0  # all points coincide: no scale or rotation to recover, only the shift
    m = np.empty((2, 3), dtype=np.float32)
    m[0, 0], m[0, 1], m[1, 0], m[1, 1] = a, -b, b, a
    m[0, 2] = dst_mean[0] - (a * src_mean[0] - b * src_mean[1])
    m[1, 2] = dst_mean[1] - (b * src_mean[0] + a * src_mean[1])
    return m


def estimate_affine(kps: npt.ArrayLike, size: int, template: Template = "arcface") -> Affine:
    """M (2×3 float32) that maps a face's 5 keypoints onto the template in a size×size crop."""
    kps = np.asarray(kps, dtype=np.float32)
    if kps.shape != (5, 2):
        raise ValueError(f"expected 5×2 keypoints, got shape {kps.shape}")
    return similarity_transform(kps, template_points(size, template))


def warp(frame: Frame, m: Affine, size: int) -> Frame:
    """The size×size crop that M maps the frame into (black outside the frame).

    warpAffine samples only the crop's size² pixels, so the cost does not depend on the frame size.
    """
    return cv2.warpAffine(frame, m, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def invert_affine(m: Affine) -> Affine:
    """The inverse similarity: crop coordinates back to frame coordinates."""
    return cv2.invertAffineTransform(np.asarray(m, dtype=np.float64)).astype(np.float32)


def transform_points(points: npt.ArrayLike, m: Affine) -> Points:
    """Apply a 2×3 affine to N×2 points."""
    pts = np.asarray(points, dtype=np.float32).reshape(-1, 2)
    return (pts @ np.asarray(m, dtype=np.float32)[:, :2].T + np.asarray(m, dtype=np.float32)[:, 2]).astype(np.float32)

"""Reference pastes and measures for judging `Blender.paste` (benchmarks/paste_quality.py and
tests/faces/test_blend_footprint.py): an anti-aliased ideal paste, PSNR, the face's core in the
frame, and a photo scaled so that a face's crop covers a given number of frame pixels."""

from __future__ import annotations

from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.types import Face, Frame
from vcamd.faces.align import estimate_affine
from vcamd.faces.footprint import paste_region
from vcamd.faces.masks import feather_mask

SUPERSAMPLE = 8
"""Points per frame pixel side at which the ideal paste interpolates the crop."""


def ideal_paste(frame: Frame, crop: Frame, M: npt.ArrayLike, factor: int = SUPERSAMPLE) -> Frame:
    """The anti-aliased ideal of pasting `crop` where `M` (frame → crop) says, without colour
    correction: each frame pixel becomes the mean over its own area of α·crop + (1 − α)·frame,
    crop and feathered mask α bilinearly interpolated at factor² points of that pixel. A paste
    that samples the crop at one point per frame pixel aliases where the crop is finer than the
    frame; this one does not (up to the factor)."""
    side = crop.shape[0]
    out = frame.copy()
    region = paste_region(frame.shape, (side, side), M)
    if region is None:
        return out
    m = np.asarray(M, np.float64)
    # Supersampled pixel (i, j) of the paste rectangle lies at frame point
    # (x0 + (i + ½)/factor − ½, y0 + (j + ½)/factor − ½).
    m_fine = m.copy()
    m_fine[:, :2] /= factor
    m_fine[:, 2] = m[:, 2] + m[:, :2] @ (np.array([region.x0, region.y0], np.float64) + 0.5 / factor - 0.5)
    size = (region.width * factor, region.height * factor)
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    crop_fine = cv2.warpAffine(crop.astype(np.float32), m_fine, size, flags=flags)
    alpha_fine = cv2.warpAffine(feather_mask(side), m_fine, size, flags=flags)
    weighted = cv2.resize(crop_fine * alpha_fine[..., None], (region.width, region.height), interpolation=cv2.INTER_AREA)
    alpha = cv2.resize(alpha_fine, (region.width, region.height), interpolation=cv2.INTER_AREA)[..., None]
    roi = out[region.y0 : region.y1, region.x0 : region.x1]
    roi[:] = np.clip(np.rint(weighted + (1.0 - alpha) * roi.astype(np.float32)), 0, 255).astype(np.uint8)
    return out


def face_core(frame_shape: tuple[int, ...], M: npt.ArrayLike, side: int, level: float = 0.5) -> npt.NDArray[np.bool_]:
    """Frame pixels where the paste's feathered mask is at least `level` (the face itself)."""
    height, width = frame_shape[:2]
    inside = (feather_mask(side) >= level).astype(np.uint8)
    flags = cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP
    return cv2.warpAffine(inside, np.asarray(M, np.float64), (width, height), flags=flags) > 0


def psnr(a: Frame, b: Frame, where: npt.NDArray[np.bool_] | None = None) -> float:
    """Peak signal-to-noise ratio of a against b in dB (over `where` only, when given)."""
    err = (a.astype(np.float64) - b.astype(np.float64)) ** 2
    if where is not None:
        err = err[where]
    return float(10.0 * np.log10(255.0**2 / max(float(err.mean()), 1e-12)))


def footprint(M: npt.ArrayLike, side: int) -> float:
    """How many frame pixels the side of a side² crop covers (M: frame → crop, a similarity)."""
    m = np.asarray(M, np.float64)
    return side / float(np.sqrt(abs(np.linalg.det(m[:, :2]))))


def scaled_for_footprint(image: Frame, face: Face, pixels: float, side: int = 128) -> tuple[Frame, Face]:
    """`image` area-downscaled so that `face`'s side² ArcFace crop covers `pixels` frame pixels,
    and the face in it (box and keypoints scaled the same way)."""
    scale = pixels / footprint(estimate_affine(face.kps, side), side)
    small = cast(Frame, cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)), interpolation=cv2.INTER_AREA))
    sx, sy = small.shape[1] / image.shape[1], small.shape[0] / image.shape[0]
    # Pixel centres: x in the photo lies at (x + ½)·s − ½ in the downscaled one.
    kps = ((face.kps + 0.5) * np.array([sx, sy], np.float32) - 0.5).astype(np.float32)
    x1, y1, x2, y2 = face.box
    return small, Face(box=(x1 * sx, y1 * sy, x2 * sx, y2 * sy), score=face.score, kps=kps)

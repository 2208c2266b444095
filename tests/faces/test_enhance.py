"""Enhancer (GFPGAN 1.4 signature) with the light stand-in through real ONNX Runtime sessions."""

from __future__ import annotations

import numpy as np
import pytest

from vcamd.common.errors import ModelError
from vcamd.common.types import Face, Frame
from vcamd.faces.enhance import ENHANCE_SIZE, Enhancer
from vcamd.models.pipeline import build_face_engine


def test_enhanced_swap_changes_the_face_region_only(standins, assets, sessions, newton: Frame, newton_face: Face) -> None:  # type: ignore[no-untyped-def]
    from vcamd.config.reading import config_from_dict
    from vcamd.faces.align import estimate_affine
    from vcamd.faces.footprint import paste_region

    models = {"detector": str(standins.detector), "recognizer": str(standins.recognizer), "swapper": str(standins.identity_swapper),
              "enhancer": str(standins.enhancer), "providers": ["cpu"], "threads": 1}
    swap = {"source_face": str(assets / "images" / "newton.png"), "source_consent": True, "color_correction": False}
    engine = build_face_engine(config_from_dict({"models": models, "swap": swap, "enhancer": {"enabled": True, "strength": 1.0}}), sessions)
    frame = newton.copy()
    assert engine.process_frame(frame).swapped == 1
    region = paste_region(frame.shape, (ENHANCE_SIZE, ENHANCE_SIZE), estimate_affine(newton_face.kps, ENHANCE_SIZE, "ffhq"))
    assert region is not None
    inside = np.zeros(frame.shape[:2], bool)
    inside[region.y0 : region.y1, region.x0 : region.x1] = True
    assert np.array_equal(frame[~inside], newton[~inside])
    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    # The swapper is the identity: what changed in the face is the enhancer's sharpening and contrast.
    assert np.abs(frame[y1:y2, x1:x2].astype(np.int16) - newton[y1:y2, x1:x2]).mean() > 3
    assert inside.mean() < 0.5  # a face-sized rectangle, not the frame


def test_restore_uses_rgb_minus_one_to_one(standins, sessions) -> None:  # type: ignore[no-untyped-def]
    # The light stand-in is y = clip(1.15 · sharpen(x)) on x = pixel/127.5 − 1; sharpen(flat) = flat.
    crop = np.empty((ENHANCE_SIZE, ENHANCE_SIZE, 3), np.uint8)
    crop[:] = (50, 100, 200)  # B, G, R
    out = Enhancer(standins.enhancer, sessions).restore(crop)
    expected = [np.clip(1.15 * (v / 127.5 - 1.0), -1, 1) * 127.5 + 127.5 for v in (50, 100, 200)]
    assert np.abs(out[256, 256].astype(float) - expected).max() <= 1.0


def test_enhance_aligned_mixes_by_strength_in_crop_space(standins, sessions, newton: Frame, newton_face: Face) -> None:  # type: ignore[no-untyped-def]
    from vcamd.faces.align import estimate_affine, warp

    crop = warp(newton, estimate_affine(newton_face.kps, ENHANCE_SIZE, "ffhq"), ENHANCE_SIZE)
    assert Enhancer(standins.enhancer, sessions, strength=0.0).enhance_aligned(crop) is crop
    full = Enhancer(standins.enhancer, sessions, strength=1.0).enhance_aligned(crop)
    half = Enhancer(standins.enhancer, sessions, strength=0.5).enhance_aligned(crop)
    midpoint = (full.astype(np.float32) + crop) / 2
    assert np.abs(half - midpoint).max() <= 1.0
    assert np.abs(full.astype(np.int16) - crop).mean() > 3


def test_a_model_with_the_wrong_signature_is_a_model_error(standins, sessions) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelError, match=r"swapper\.onnx is not a face enhancer.*\[models\] enhancer"):
        Enhancer(standins.swapper, sessions)
    with pytest.raises(ModelError, match=r"recognizer\.onnx is not a face enhancer.*\[1,3,S,S\].*got input \[1, 3, 112, 112\]"):
        Enhancer(standins.recognizer, sessions)

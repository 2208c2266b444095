"""Pixel boost (vcamd/faces/boost.py, FaceEngine.swap_faces): an N-px face from the 128-px
swapper as (N/128)² polyphase tiles, sharper where the face is large in the frame."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.bench.pastes import face_core, psnr
from vcamd.common.errors import ConfigError
from vcamd.common.quality import Level
from vcamd.config.reading import config_from_dict
from vcamd.faces import boost
from vcamd.faces.align import estimate_affine
from vcamd.faces.engine import FaceEngine
from vcamd.models.pipeline import build_face_engine


def test_tiles_are_the_contract_s_polyphase_split_and_merge_inverts_it(newton, newton_face):
    crop = cv2.warpAffine(newton, estimate_affine(newton_face.kps, 512), (512, 512))
    for k in (1, 2, 4):
        n = 128 * k
        c = np.ascontiguousarray(crop[:n, :n])
        tiles = boost.split(c, k)
        assert len(tiles) == k * k and all(t.shape == (128, 128, 3) and t.flags.c_contiguous for t in tiles)
        for i in range(k):
            for j in range(k):
                np.testing.assert_array_equal(tiles[i * k + j], c[i::k, j::k])
        # the contract's NumPy form (model-contracts.md, "Pixel boost")
        expected = c.reshape(128, k, 128, k, 3).transpose(1, 3, 0, 2, 4).reshape(k * k, 128, 128, 3)
        np.testing.assert_array_equal(np.stack(tiles), expected)
        np.testing.assert_array_equal(boost.merge(tiles, k), c)
    with pytest.raises(ValueError, match="multiple"):
        boost.factor(200, 128)


def _engine(standins, assets: Path, sessions, pixel_boost: int, swapper: Path | None = None) -> FaceEngine:
    cfg = config_from_dict({
        "models": {"detector": str(standins.detector), "recognizer": str(standins.recognizer),
                   "swapper": str(swapper or standins.swapper), "providers": ["cpu"], "threads": 1},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True,
                 "pixel_boost": pixel_boost, "color_correction": False},
    })
    return build_face_engine(cfg, sessions)


def test_a_boosted_face_is_swapped_at_its_size_and_the_no_boost_rung_gives_it_up(standins, assets, sessions, newton, newton_face):
    engine = _engine(standins, assets, sessions, 256)
    assert engine.boosts
    calls: list[int] = []
    swap = engine.swapper.swap
    engine.swapper.swap = lambda crops, latent: calls.append(len(crops)) or swap(crops, latent)  # type: ignore[method-assign]
    boosted = engine.swap_faces(newton, [newton_face, newton_face], Level.full)
    assert [s.size for s in boosted] == [256, 256] and calls == [8]  # both faces' 4 tiles: one batch
    plain = engine.swap_faces(newton, [newton_face], Level.no_boost)
    assert plain[0].size == 128 and calls[-1] == 1
    # every tile is a face the model swapped: the interleaved face is the swap, not the camera's
    aligned = cv2.warpAffine(newton, estimate_affine(newton_face.kps, 256), (256, 256))
    assert np.abs(boosted[0].crop.astype(np.int16) - aligned).mean() > 20
    assert not _engine(standins, assets, sessions, 128).boosts


def test_a_256_px_face_pastes_sharper_than_128_at_1080p(standins, assets, sessions, newton, detector):
    """The perfect swap (a model whose output is its input) pasted back into a 1080p frame whose
    face is 257 px wide: the paste is the camera frame itself, up to what the crop's size loses."""
    frame = cv2.resize(newton, (1920, 1080), interpolation=cv2.INTER_CUBIC)
    face = max(detector.detect(frame), key=lambda f: f.area)
    scores = {}
    for size in (128, 256):
        engine = _engine(standins, assets, sessions, size, standins.identity_swapper)
        out = frame.copy()
        [swapped] = engine.swap_faces(frame, [face], Level.full)
        engine.composite(out, swapped, face)
        scores[size] = psnr(out, frame, face_core(frame.shape, estimate_affine(face.kps, 128), 128))
    assert scores[256] > scores[128] + 3.0, scores


def test_pixel_boost_takes_only_the_sizes_the_swapper_divides():
    with pytest.raises(ConfigError):
        config_from_dict({"swap": {"pixel_boost": 300}})


def test_the_watchdog_gives_the_boost_up_first_and_takes_it_back_last():
    from vcamd.config.schema import WatchdogConfig
    from vcamd.live.measures.watchdog import Watchdog

    now = [0.0]
    dog = Watchdog(WatchdogConfig(), lambda: now[0], enhancer_enabled=True, boost_enabled=True)

    def feed(latency_ms: float, frames: int) -> None:
        for _ in range(frames):
            now[0] += 1 / 30
            dog.observe(latency_ms, None)

    feed(70.0, 30 * 10)
    steps = [(t.from_level, t.to_level) for t in dog.transitions]
    assert steps[0] == (Level.full, Level.no_boost) and steps[1] == (Level.no_boost, Level.no_enhancer)
    feed(5.0, 30 * 30)
    assert dog.level is Level.full
    assert (dog.transitions[-1].from_level, dog.transitions[-1].to_level) == (Level.no_boost, Level.full)

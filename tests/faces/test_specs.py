"""The model-spec table: a swapper family is one row, and the whole face path follows it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vcamd.common.errors import ModelError
from vcamd.common.types import Face, Frame
from vcamd.config.reading import config_from_dict
from vcamd.faces import specs
from vcamd.faces.align import estimate_affine
from vcamd.faces.footprint import paste_region
from vcamd.faces.specs import ENHANCERS, SWAPPERS, CropSpec, SourceRule, SwapperSpec
from vcamd.models.pipeline import build_face_engine

SIMSWAP_LIKE = SwapperSpec("simswap_256_like", (), CropSpec("arcface", 224, 127.5, 127.5), SourceRule("emap"), denorm=True,
                           target_input="img", source_input="id")
"""A further family with another crop side, normalisation and input names (224 = 2 × 112 template)."""


def _inverting_swapper(path: Path, spec: SwapperSpec) -> Path:
    """A model of `spec`'s signature whose output is its input negated (in its own normalised space)."""
    side = spec.crop.size
    target = helper.make_tensor_value_info(spec.target_input, TensorProto.FLOAT, [1, 3, side, side])
    source = helper.make_tensor_value_info(spec.source_input, TensorProto.FLOAT, [1, spec.identity_dim])
    output = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, side, side])
    emap = numpy_helper.from_array(np.eye(spec.identity_dim, dtype=np.float32), "emap")
    graph = helper.make_graph([helper.make_node("Neg", [spec.target_input], ["out"])], "inverting", [target, source], [output], initializer=[emap])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return path


def test_crop_spec_round_trip_is_exact_for_every_model():
    rng = np.random.default_rng(3)
    for crop in (*(s.crop for s in SWAPPERS), *(s.crop for s in ENHANCERS if s.crop.size <= 512), specs.RECOGNIZER_CROP):
        pixels = rng.integers(0, 256, (crop.size, crop.size, 3), dtype=np.uint8)
        blob = crop.to_blob([pixels, pixels[::-1]])
        assert blob.shape == (2, 3, crop.size, crop.size) and blob.dtype == np.float32
        mean, std = specs.per_channel(crop.mean)[0], specs.per_channel(crop.std)[0]
        np.testing.assert_allclose(blob[0, 0], (pixels[..., 2] - mean) / std, rtol=1e-5, atol=1e-5)  # RGB order
        back = crop.to_crops(blob)
        np.testing.assert_array_equal(back[0], pixels)
        np.testing.assert_array_equal(back[1], pixels[::-1])


def test_a_second_swapper_family_is_one_row(monkeypatch, tmp_path, standins, assets, sessions, newton: Frame, newton_face: Face):
    model = _inverting_swapper(tmp_path / "other_family.onnx", SIMSWAP_LIKE)
    cfg = config_from_dict({
        "models": {"detector": str(standins.detector), "recognizer": str(standins.recognizer), "swapper": str(model), "providers": ["cpu"], "threads": 1},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True, "color_correction": False},
    })
    with pytest.raises(ModelError, match="is not a face swapper vcamd knows"):
        build_face_engine(cfg, sessions)
    # The 224-px input [1,3,224,224] is no family's: one more row makes it one.

    monkeypatch.setattr(specs, "SWAPPERS", (*SWAPPERS, SIMSWAP_LIKE))
    engine = build_face_engine(cfg, sessions)
    assert engine.swapper.spec is SIMSWAP_LIKE
    frame = newton.copy()
    result = engine.process_frame(frame)
    assert result.swapped == 1
    # The swapped crop went back through the family's own geometry: only its paste region changed,
    # and there the face is the negative (the model's output in its normalisation), not the original.
    region = paste_region(frame.shape, (224, 224), estimate_affine(newton_face.kps, 224, "arcface"))
    assert region is not None
    inside = np.zeros(frame.shape[:2], bool)
    inside[region.y0 : region.y1, region.x0 : region.x1] = True
    assert np.array_equal(frame[~inside], newton[~inside])
    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    cx, cy = (x1 + x2) // 2, (y1 + y2) // 2
    centre = (slice(cy - 10, cy + 10), slice(cx - 10, cx + 10))
    expected = 255 - newton[centre].astype(int)  # (x-127.5)/127.5 negated, back to pixels = 255 - x
    assert np.abs(frame[centre].astype(int) - expected).mean() < 12

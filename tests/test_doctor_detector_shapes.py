"""`vcamd doctor`'s detector input row: whether the detector runs at the camera's aspect and the
tracking crops' size, or falls back to its own input shape (an export with shapes fixed inside)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vcamd import doctor
from vcamd.config.schema import Config
from vcamd.doctor import Status


def _config(detector: Path, assets: Path) -> Config:
    return Config.model_validate({
        "models": {"detector": str(detector), "providers": ["cpu"]},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
    })


@pytest.fixture(scope="module")
def third_party_export(tmp_path_factory, models_dir: Path) -> Path:
    from support.scrfd_exports import fixed_inside

    return fixed_inside(models_dir / "scrfd_2.5g_kps.onnx", tmp_path_factory.mktemp("export") / "third_party_scrfd.onnx")


def test_doctor_says_an_export_with_shapes_fixed_inside_runs_at_its_own_shape(third_party_export, assets):
    result = doctor.check_detector_shapes(_config(third_party_export, assets))
    assert result is not None and result.status is Status.warn, result
    assert result.name == "detector input (third_party_scrfd.onnx)"
    assert result.detail.startswith("runs at its own input shape 640×640 only")
    assert "rewritten to 640×384" in result.detail and "Incompatible dimensions" in result.detail
    assert "vcamd models pull" in result.fix


@pytest.mark.parametrize("model", ["scrfd_500m_kps.onnx", "scrfd_2.5g_kps.onnx"])
def test_doctor_says_a_fully_convolutional_export_takes_the_camera_aspect(models_dir, assets, model):
    result = doctor.check_detector_shapes(_config(models_dir / model, assets))
    assert result is not None and result.status is Status.ok, result
    assert "640×384 for 1280×720" in result.detail and "192² tracking crops" in result.detail
    assert "same faces as at its own shape" in result.detail


def test_doctor_leaves_a_missing_detector_to_the_models_row(tmp_path, assets):
    assert doctor.check_detector_shapes(_config(tmp_path / "nope.onnx", assets)) is None

"""Bad source-face photos through `load_source_identity` (what `run`, `swap`, `set-face` and the
config reload all use): FaceError naming the file, before any model work on garbage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vcamd.common.errors import FaceError


@pytest.fixture(scope="module")
def models(assets: Path, standin_dir: Path):
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Recognizer
    from vcamd.inference.runtime import Sessions

    sessions = Sessions(["cpu"], threads=1)
    return FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", sessions, size=320), Recognizer(standin_dir / "recognizer.onnx", sessions)


@pytest.mark.parametrize("kind", ["zero-size", "not-an-image", "huge-header", "animated", "folder", "missing"])
def test_bad_photo_is_refused_by_name(models, bad_images: dict[str, Path], kind: str) -> None:
    from vcamd.faces.identity import load_source_identity

    path = bad_images[kind]
    with pytest.raises(FaceError) as info:
        load_source_identity(path, *models)
    assert str(path) in str(info.value) and "source face" in str(info.value)


def test_photo_without_a_face_is_refused(models, tmp_path: Path) -> None:
    import cv2

    from vcamd.faces.identity import load_source_identity

    path = tmp_path / "wall.png"
    gradient = np.tile(np.linspace(0, 255, 320, dtype=np.uint8), (240, 1))
    cv2.imwrite(str(path), cv2.merge([gradient, gradient, gradient]))
    with pytest.raises(FaceError, match="no face") as info:
        load_source_identity(path, *models)
    assert str(path) in str(info.value)


def test_a_real_photo_loads(models, assets: Path) -> None:
    from vcamd.faces.identity import load_source_identity

    identity = load_source_identity(assets / "images" / "newton.png", *models)
    assert identity.embedding.shape == (512,) and abs(float(np.linalg.norm(identity.embedding)) - 1.0) < 1e-4

"""Fixtures for the blend / enhance / process / `vcamd swap` tests: real photos, real SCRFD, stand-in
swap models built once per session in a temp dir (never in the repo)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.faces.detect import FaceDetector
from vcamd.runtime import Sessions
from vcamd.types import Face, Frame


@dataclass(frozen=True)
class StandIns:
    """Paths of the stand-in models a test config points at."""

    detector: Path
    recognizer: Path
    swapper: Path
    enhancer: Path
    identity_swapper: Path


def _build_identity_swapper(path: Path) -> Path:
    """An inswapper-shaped model whose output IS its input: the perfect swap for measuring paste
    damage, because the ideal composite is then exactly the original frame."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    target = helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, 128, 128])
    source = helper.make_tensor_value_info("source", TensorProto.FLOAT, [1, 512])
    output = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 128, 128])
    emap = numpy_helper.from_array(np.eye(512, dtype=np.float32), "emap")
    graph = helper.make_graph([helper.make_node("Identity", ["target"], ["output"])], "identity_swap", [target, source], [output], initializer=[emap])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return path


@pytest.fixture(scope="session")
def standins(tmp_path_factory: pytest.TempPathFactory, assets: Path) -> StandIns:
    from vcamd.bench.standins import build_enhancer, build_recognizer, build_swapper

    folder = tmp_path_factory.mktemp("standin_models")
    return StandIns(
        detector=assets / "models" / "scrfd_500m_kps.onnx",
        recognizer=build_recognizer(folder / "recognizer.onnx"),
        swapper=build_swapper(folder / "swapper.onnx"),
        enhancer=build_enhancer(folder / "enhancer.onnx"),
        identity_swapper=_build_identity_swapper(folder / "identity_swapper.onnx"),
    )


@pytest.fixture(scope="session")
def sessions() -> Sessions:
    return Sessions(["cpu"], threads=1)


@pytest.fixture(scope="session")
def detector(sessions: Sessions, assets: Path) -> FaceDetector:
    return FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", sessions)


@pytest.fixture(scope="session")
def newton(assets: Path) -> Frame:
    image = cv2.imread(str(assets / "images" / "newton.png"), cv2.IMREAD_COLOR)
    assert image is not None
    image.setflags(write=False)  # tests paste into copies
    return image


@pytest.fixture(scope="session")
def newton_face(detector: FaceDetector, newton: Frame) -> Face:
    faces = detector.detect(newton)
    assert len(faces) == 1
    return faces[0]


@pytest.fixture(scope="session")
def solvay(assets: Path) -> Frame:
    image = cv2.imread(str(assets / "images" / "solvay_conference_1927.png"), cv2.IMREAD_COLOR)
    assert image is not None
    image.setflags(write=False)
    return image


@pytest.fixture(scope="session")
def solvay_faces(detector: FaceDetector, solvay: Frame) -> list[Face]:
    """The three largest faces of the Solvay photo (small, real, differently lit)."""
    faces = detector.detect(solvay, 1280)
    assert len(faces) >= 20
    return sorted(faces, key=lambda f: f.area, reverse=True)[:3]

"""Session-scoped fixtures for the face engine tests: real ONNX Runtime sessions on real photos.

Detection at 640² costs 15–100 ms per image on these CPUs, so sessions, detectors, decoded photos
and stand-in models are built once per test session.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.bench import standins
from vcamd.faces.detect import FaceDetector
from vcamd.faces.identity import Recognizer
from vcamd.runtime import Sessions
from vcamd.types import Face

SCRFD_MODELS = ("scrfd_500m_kps.onnx", "scrfd_2.5g_kps.onnx")


@pytest.fixture(scope="session")
def sessions() -> Sessions:
    return Sessions(["cpu"], threads=2)


@pytest.fixture(scope="session")
def models_dir(assets: Path) -> Path:
    return assets / "models"


@pytest.fixture(scope="session")
def detectors(sessions: Sessions, models_dir: Path) -> dict[str, FaceDetector]:
    return {name: FaceDetector(models_dir / name, sessions) for name in SCRFD_MODELS}


@pytest.fixture(scope="session")
def detector(detectors: dict[str, FaceDetector]) -> FaceDetector:
    """The fast one (scrfd_500m_kps)."""
    return detectors["scrfd_500m_kps.onnx"]


@pytest.fixture(scope="session")
def mobilefacenet(sessions: Sessions, models_dir: Path) -> Recognizer:
    return Recognizer(models_dir / "mobilefacenet.onnx", sessions)


@pytest.fixture(scope="session")
def newton(assets: Path) -> np.ndarray:
    return cv2.imread(str(assets / "images" / "newton.png"))


@pytest.fixture(scope="session")
def solvay(assets: Path) -> np.ndarray:
    return cv2.imread(str(assets / "images" / "solvay_conference_1927.png"))


@pytest.fixture(scope="session")
def solvay_faces(detector: FaceDetector, solvay: np.ndarray) -> list[Face]:
    return detector.detect(solvay)


@pytest.fixture(scope="session")
def newton_face(detector: FaceDetector, newton: np.ndarray) -> Face:
    (face,) = detector.detect(newton)
    return face


@pytest.fixture(scope="session")
def standin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Light stand-in models, built once (never inside the repo)."""
    d = tmp_path_factory.mktemp("standins")
    standins.build_swapper(d / "inswapper_128.onnx")
    standins.build_swapper(d / "inswapper_128_fp16.onnx", fp16=True)
    standins.build_swapper(d / "inswapper_128_batched.onnx", batch=True)
    standins.build_recognizer(d / "w600k_standin.onnx")
    standins.build_enhancer(d / "gfpgan_standin.onnx")
    return d

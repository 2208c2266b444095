"""Session-scoped fixtures for the face tests (detection, identity, swap, enhance, blend, FaceEngine):
real ONNX Runtime sessions on real photos (the photos, `models_dir`, `detector`,
`standins` and `standin_dir` are in tests/conftest.py).

Detection at 640² costs 15–100 ms per image on these CPUs, so sessions, detectors, decoded photos
and stand-in models are built once per test session.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vcamd.common.types import Face
from vcamd.faces.detect import FaceDetector
from vcamd.faces.identity import Recognizer
from vcamd.inference.runtime import Sessions

SCRFD_MODELS = ("scrfd_500m_kps.onnx", "scrfd_2.5g_kps.onnx")


@pytest.fixture(scope="session")
def detectors(sessions: Sessions, models_dir: Path) -> dict[str, FaceDetector]:
    return {name: FaceDetector(models_dir / name, sessions) for name in SCRFD_MODELS}


@pytest.fixture(scope="session")
def mobilefacenet(sessions: Sessions, models_dir: Path) -> Recognizer:
    return Recognizer(models_dir / "mobilefacenet.onnx", sessions)


@pytest.fixture(scope="session")
def solvay_faces(detector: FaceDetector, solvay: np.ndarray) -> list[Face]:
    return detector.detect(solvay)


@pytest.fixture(scope="session")
def solvay_largest_faces(detector: FaceDetector, solvay: np.ndarray) -> list[Face]:
    """The three largest faces of the Solvay photo (small, real, differently lit)."""
    faces = detector.detect(solvay, 1280)
    assert len(faces) >= 20
    return sorted(faces, key=lambda f: f.area, reverse=True)[:3]

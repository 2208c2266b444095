"""Fixtures for the privacy tests: the helper modules of this folder (measure.py, shared with
benchmarks/privacy.py; leaks.py), the real SCRFD detectors and MobileFaceNet, and the measured scenes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load(name: str) -> ModuleType:
    """A helper module of this folder (tests are imported in importlib mode: no package here)."""
    qualified = f"privacy_{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(qualified, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module  # dataclasses look their module up by name
        spec.loader.exec_module(module)
    return sys.modules[qualified]


# Registered when pytest imports this conftest, before it imports the test modules: a test module
# may then `import privacy_leaks` (tests are imported in importlib mode: this folder is no package).
_load("measure")
_load("leaks")


@pytest.fixture(scope="session")
def measure() -> ModuleType:
    return _load("measure")


@pytest.fixture(scope="session")
def checkers(assets: Path):
    """(both real SCRFD models, the real MobileFaceNet): what the end-to-end tests place the raw
    faces and check every published frame with."""
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Recognizer
    from vcamd.runtime import Sessions

    sessions = Sessions(["cpu"], threads=2)
    both = [FaceDetector(assets / "models" / name, sessions) for name in ("scrfd_500m_kps.onnx", "scrfd_2.5g_kps.onnx")]
    return both, Recognizer(assets / "models" / "mobilefacenet.onnx", sessions)


@pytest.fixture(scope="session")
def privacy_models(measure, assets: Path):
    return measure.load_models(assets)


@pytest.fixture(scope="session")
def privacy_scenes(measure, privacy_models, assets: Path) -> dict:
    """name → (picture, the faces either detector finds at 0.5 in it)."""
    return {name: (picture, measure.find_faces(privacy_models, picture)) for name, picture in measure.scenes(assets, privacy_models).items()}

"""Fixtures for the privacy tests: the real SCRFD detectors and MobileFaceNet, the stranger the
stand-in swapper pastes, and the measured scenes. How a face is measured and checked lives in the
package (`vcamd.bench.obscured`, `vcamd.bench.leaks`), which the privacy benchmarks use too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import cv2
import pytest

from vcamd.bench import leaks, obscured, standins
from vcamd.config.reading import config_from_dict
from vcamd.config.schema import Config


@pytest.fixture(scope="session")
def checkers(assets: Path):
    """(both real SCRFD models, the real MobileFaceNet): what the end-to-end tests place the raw
    faces and check every published frame with."""
    return leaks.load_checkers(assets / "models")


@pytest.fixture(scope="session")
def stranger(assets: Path, checkers):
    """The largest face of crowd_selfie.jpg, the face the stand-in swapper puts on every face:
    (aligned as a swapper returns a face, its embedding)."""
    both, recognizer = checkers
    return leaks.stranger(assets / "images", both[1], recognizer)


@pytest.fixture(scope="session")
def privacy_models(assets: Path) -> obscured.Models:
    return obscured.load_models(assets)


@pytest.fixture(scope="session")
def privacy_scenes(privacy_models, assets: Path) -> dict:
    """name → (picture, the faces either detector finds at 0.5 in it)."""
    return {name: (picture, obscured.find_faces(privacy_models, picture)) for name, picture in obscured.scenes(assets, privacy_models).items()}


@pytest.fixture(scope="session")
def beside_heads(assets: Path, checkers) -> Callable[[int], tuple]:
    """`beside_heads(height)`: two real people for `leaks.beside_frames` in frames `height` high:
    Newton's head (his face a third of the height) and a second person's (insightface's t1.jpg's
    largest face, a quarter)."""
    import insightface

    both, _ = checkers

    def head(image, face_px):
        return leaks.head_cut(image, max(both[1].detect(image), key=lambda f: f.area), face_px)

    def make(height: int) -> tuple:
        newton = head(cv2.imread(str(assets / "images" / "newton.png")), height / 3)
        second = head(cv2.imread(str(Path(insightface.__file__).parent / "data" / "images" / "t1.jpg")), height / 4)
        return newton, second

    return make


@pytest.fixture(scope="session")
def stranger_config(assets: Path, stranger) -> Callable[..., Config]:
    """`stranger_config(work, **sections)`: a `vcamd run` config with the real SCRFD-500M, the
    stand-in swapper that pastes the stranger on every face (built in `work`), Newton as the
    source face with consent, on_miss blur; `sections` update it (e.g. swap={"face_selection": "all"})."""

    def make(work: Path, **sections) -> Config:
        data = {
            "models": {"detector": str(assets / "models" / "scrfd_500m_kps.onnx"),
                       "swapper": str(leaks.build_identity_swapper(work / "stranger.onnx", stranger[0])),
                       "recognizer": str(standins.build_recognizer(work / "recognizer.onnx")), "providers": ["cpu"], "threads": 1},
            "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True, "on_miss": "blur"},
            "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5},
        }
        for name, values in sections.items():
            data.setdefault(name, {}).update(values)
        return config_from_dict(data)

    return make

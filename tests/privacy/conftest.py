"""Fixtures for the privacy tests: the real SCRFD detectors and MobileFaceNet, the stranger the
stand-in swapper pastes, and the measured scenes. How a face is measured and checked lives in the
package (`vcamd.bench.obscured`, `vcamd.bench.leaks`), which the privacy benchmarks use too."""

from __future__ import annotations

from pathlib import Path

import pytest

from vcamd.bench import leaks, obscured


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

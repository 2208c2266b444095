"""Fixtures every test area shares: where the real test assets are."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_ASSETS = REPO.parent / "shared" / "assets"


@pytest.fixture(scope="session")
def assets() -> Path:
    """`../shared/assets`: real SCRFD detectors, a face-embedding net and real photos (read-only)."""
    if not SHARED_ASSETS.is_dir():
        pytest.fail(f"test assets not found at {SHARED_ASSETS}: clone the repo beside ../shared")
    return SHARED_ASSETS

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


@pytest.fixture(scope="session", autouse=True)
def isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory):
    """Every test (and every `vcamd` subprocess it starts) gets its own config, data, state and
    runtime dirs: no test reads the developer's real config, writes logs into their home, or finds
    a control socket of a daemon another test run left behind."""
    base = tmp_path_factory.mktemp("user-dirs")
    with pytest.MonkeyPatch.context() as mp:
        for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
            (base / var).mkdir()
            mp.setenv(var, str(base / var))
        runtime = base / "runtime"
        runtime.mkdir(mode=0o700)
        mp.setenv("VCAMD_RUNTIME_DIR", str(runtime))
        yield base

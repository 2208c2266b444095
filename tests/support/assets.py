"""Where the tests' real models and photos come from, in this order: `$VCAMD_TEST_ASSETS`, then
`../shared/assets` beside the checkout, then a user cache filled from the files' public addresses
and checked against the SHA-256 pinned below (the files are never committed to this repository).
With none of the three the tests that need them skip, all under one line of the summary saying
what is skipped and how to get them (`conftest.pytest_runtest_makereport` gives their skips one
place, which pytest folds into one line); with `VCAMD_REQUIRE_TEST_ASSETS=1` (set by `.ci/run`)
they fail instead, so CI cannot pass by skipping. `VCAMD_TEST_ASSETS_DOWNLOAD=0` leaves the network
alone (an offline machine, or a run that must not reach out).
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ENV_DIR = "VCAMD_TEST_ASSETS"
ENV_REQUIRE = "VCAMD_REQUIRE_TEST_ASSETS"
ENV_DOWNLOAD = "VCAMD_TEST_ASSETS_DOWNLOAD"
"""Set to 0 (or no, off, false): never download the assets; without a local copy the tests skip."""
FETCH_TIMEOUT_S = 30


@dataclass(frozen=True)
class Asset:
    path: str  # relative to the assets folder
    url: str  # a public copy, pinned to the commit the hash was taken from
    sha256: str


_HPC203 = "https://raw.githubusercontent.com/hpc203/scrfd-opencv/9e14b462707fe75105c99213fba911646366aebd"
_PHOTO_ANALYZE = "https://raw.githubusercontent.com/diandianti/photo_analyze/dca5ae5a3977e9c4d2206e246cc55775fa7a9ed1"
_COSPECTRUM = "https://raw.githubusercontent.com/cospectrum/scrfd"

# Origins and hashes as in the assets' SOURCES.md.
TEST_ASSETS: tuple[Asset, ...] = (
    Asset("models/scrfd_500m_kps.onnx", f"{_HPC203}/weights/scrfd_500m_kps.onnx",
          "517cb1980c72422e676738fc45431700fb7cbee56d0f825b623ee427b3e5ce58"),
    Asset("models/scrfd_2.5g_kps.onnx", f"{_HPC203}/weights/scrfd_2.5g_kps.onnx",
          "32d20c77b9e2dc1d07e94c2ab9d25bdd5cd05eddbe0b46e7b38e7a1eca22e99a"),
    Asset("models/mobilefacenet.onnx", f"{_PHOTO_ANALYZE}/models/mobilefacenet.onnx",
          "f055d9c9a4d826d198c42666590fdefa0fdc1374a75ccb6306c3d1b1bf8f74c5"),
    Asset("images/newton.png", f"{_COSPECTRUM}/91db934a02c5069ce03ec2814ffca552fc922e5f/images/newton.png",
          "91f24ec62161d131632ea78038f5fda8319abec1c78b82795be891f349e9c05a"),
    Asset("images/solvay_conference_1927.png", f"{_COSPECTRUM}/edd562cabe80b19a62b5c3c9ed33c3d1164c6e01/images/solvay_conference_1927.png",
          "b020889d153de21ed7a40a6a6254877702f2997300533f9887c3abfafe1a2025"),
    Asset("images/crowd_selfie.jpg", f"{_HPC203}/selfie.jpg",
          "5541c02b4654991569cde0caddd39feddac99a24a96818af55c533fced4b16b4"),
)

HOW_TO_GET = (
    f"set ${ENV_DIR} to a folder holding them, or place them in ../shared/assets, or let the tests "
    "download them (needs access to raw.githubusercontent.com); list and hashes in tests/support/assets.py"
)
WHAT_NEEDS_THEM = "the tests with real models and photos (two SCRFD detectors, a face embedding net, three photos; 14 MB)"
SKIP_PREFIX = "test assets not found"
"""How every skip for missing assets starts (the conftest gathers them under one line by it)."""


@dataclass(frozen=True)
class Found:
    folder: Path
    source: str  # where it came from, for the report header


@dataclass(frozen=True)
class Missing:
    reasons: tuple[str, ...]

    def line(self) -> str:
        return f"{SKIP_PREFIX} ({'; '.join(self.reasons)}), so {WHAT_NEEDS_THEM} skip: {HOW_TO_GET}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def absent_from(folder: Path, assets: tuple[Asset, ...]) -> list[str]:
    return [a.path for a in assets if not (folder / a.path).is_file()]


def fetch(asset: Asset, cache: Path, timeout_s: float = FETCH_TIMEOUT_S) -> Path:
    """Download one asset into `cache`; a file whose SHA-256 is not the pinned one is refused and
    not kept (it is written beside its final name and renamed only once its hash matched)."""
    target = cache / asset.path
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        with urllib.request.urlopen(asset.url, timeout=timeout_s) as response, partial.open("wb") as out:
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
        got = sha256_of(partial)
        if got != asset.sha256:
            raise ValueError(f"{asset.url}: SHA-256 {got} is not the pinned {asset.sha256}")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _cached(cache: Path, asset: Asset) -> bool:
    path = cache / asset.path
    return path.is_file() and sha256_of(path) == asset.sha256


def from_cache(cache: Path, assets: tuple[Asset, ...], timeout_s: float = FETCH_TIMEOUT_S) -> str | None:
    """Fill `cache` with whatever it lacks or holds with the wrong hash; None when it is complete,
    else why not (the first download that failed)."""
    for asset in assets:
        if _cached(cache, asset):
            continue
        (cache / asset.path).unlink(missing_ok=True)
        try:
            fetch(asset, cache, timeout_s)
        except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
            return f"download into {cache} failed: {exc}"
    return None


def locate(env: dict[str, str] | os._Environ, shared: Path, cache: Path,
           assets: tuple[Asset, ...] = TEST_ASSETS, timeout_s: float = FETCH_TIMEOUT_S) -> Found | Missing:
    """The first complete assets folder in the order above (downloading into `cache` last)."""
    reasons: list[str] = []
    if env.get(ENV_DIR):
        folder = Path(env[ENV_DIR]).expanduser()
        absent = absent_from(folder, assets)
        if not absent:
            return Found(folder, f"${ENV_DIR}")
        lacks = f"all {len(assets)} files" if len(absent) == len(assets) else ", ".join(absent)
        reasons.append(f"${ENV_DIR}={folder} lacks {lacks}")
    if not absent_from(shared, assets):
        return Found(shared, "../shared/assets")
    reasons.append(f"no {shared}")
    if env.get(ENV_DOWNLOAD, "").strip().lower() in ("0", "no", "off", "false"):
        if not [a for a in assets if not _cached(cache, a)]:
            return Found(cache, "the user cache (downloaded earlier, SHA-256 checked)")
        reasons.append(f"no download (${ENV_DOWNLOAD}={env[ENV_DOWNLOAD]})")
        return Missing(tuple(reasons))
    failure = from_cache(cache, assets, timeout_s)
    if failure is None:
        return Found(cache, "the user cache (downloaded, SHA-256 checked)")
    reasons.append(failure)
    return Missing(tuple(reasons))


def require_or_skip(found: Found | Missing, env: dict[str, str] | os._Environ) -> Path:
    """The assets folder; else skip the test (or fail it where `VCAMD_REQUIRE_TEST_ASSETS=1`)."""
    if isinstance(found, Found):
        return found.folder
    if env.get(ENV_REQUIRE) == "1":
        pytest.fail(f"{found.line()} (${ENV_REQUIRE}=1: they must be here)", pytrace=False)
    pytest.skip(found.line())

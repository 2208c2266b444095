"""Fixtures every test area shares: where the real test assets are, the real photos and SCRFD
detector the face tests work on, and stand-in swap models built once per session in a temp dir
(never in the repo)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import platformdirs
import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_ASSETS = REPO.parent / "shared" / "assets"
# Taken before `isolated_user_dirs` points XDG_CACHE_HOME at a per-run temp dir: a download is kept.
ASSETS_CACHE = platformdirs.user_cache_path("vcamd") / "test-assets"


def _register_support() -> None:
    """tests/support as the package `support` (importlib mode puts no test folder on sys.path)."""
    if "support" in sys.modules:
        return
    folder = Path(__file__).resolve().parent / "support"
    spec = importlib.util.spec_from_file_location("support", folder / "__init__.py", submodule_search_locations=[str(folder)])
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["support"] = module
    spec.loader.exec_module(module)


_register_support()

from support import assets as test_assets  # noqa: E402  (registered just above)
from support.heap import ReturnHeap  # noqa: E402
from support.order import longest_first  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache folder of the test's own (VCAMD_CACHE_DIR): what one test keeps, no other finds.
    (test_ortcache and test_source_cache give the name a folder of their own.)"""
    folder = tmp_path / "cache"
    monkeypatch.setenv("VCAMD_CACHE_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def assets() -> Path:
    """Real SCRFD detectors, a face-embedding net and real photos (read-only), from
    `$VCAMD_TEST_ASSETS`, `../shared/assets` or the user cache (see support/assets.py); the tests
    that need them skip without them (fail under `VCAMD_REQUIRE_TEST_ASSETS=1`, as in `.ci/run`),
    their skips reported here, as one line of the summary (`pytest_runtest_makereport`)."""
    found = test_assets.locate(os.environ, SHARED_ASSETS, ASSETS_CACHE)
    return test_assets.require_or_skip(found, os.environ)


ASSETS_FIXTURE_PLACE = (__file__, next(n for n, line in enumerate(Path(__file__).read_text(encoding="utf-8").splitlines())
                                       if line.startswith("def assets(")))
"""Where the skips for missing assets are reported: the `assets` fixture (file, 0-based line)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Every skip for missing assets is reported at the `assets` fixture, not at its test: pytest's
    summary folds skips of one place and reason into one line ("SKIPPED [669] tests/conftest.py:…:
    test assets not found …, so … skip: how to get them") instead of one line per test."""
    outcome = yield
    report = outcome.get_result()
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3 and str(longrepr[2]).startswith(
            ("Skipped: " + test_assets.SKIP_PREFIX, test_assets.SKIP_PREFIX)):
        report.longrepr = (ASSETS_FIXTURE_PLACE[0], ASSETS_FIXTURE_PLACE[1], longrepr[2])


def pytest_configure(config: pytest.Config) -> None:
    """Each test process hands back, between tests, the heap its engines left (support/heap.py)."""
    plugin = ReturnHeap.here()
    if plugin is not None:
        config.pluginmanager.register(plugin, "vcamd-return-heap")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The suite's longest files start first (support/order.py): with `-n N --dist loadfile` the short
    files then fill every worker up to the end. Last of the hooks, so it moves whole files only."""
    order = longest_first([item.nodeid for item in items])
    items[:] = [items[i] for i in order]


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


# -- real photos, the real detector, stand-in models (face engine, `vcamd swap`) ------------------


@pytest.fixture(scope="session")
def models_dir(assets: Path) -> Path:
    return assets / "models"


@pytest.fixture(scope="session")
def sessions():
    from vcamd.inference.runtime import Sessions

    return Sessions(["cpu"], threads=2)


@pytest.fixture(scope="session")
def detector(sessions, assets: Path):
    """The fast SCRFD (scrfd_500m_kps)."""
    from vcamd.faces.detect import FaceDetector

    return FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", sessions)


@pytest.fixture(scope="session")
def newton(assets: Path) -> np.ndarray:
    image = cv2.imread(str(assets / "images" / "newton.png"), cv2.IMREAD_COLOR)
    assert image is not None
    image.setflags(write=False)  # tests paste into copies
    return image


@pytest.fixture(scope="session")
def newton_face(detector, newton: np.ndarray):
    faces = detector.detect(newton)
    assert len(faces) == 1
    return faces[0]


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of Debian's chromium (apt-get install chromium); the browser tests skip without it."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture(scope="session")
def solvay(assets: Path) -> np.ndarray:
    image = cv2.imread(str(assets / "images" / "solvay_conference_1927.png"), cv2.IMREAD_COLOR)
    assert image is not None
    image.setflags(write=False)
    return image


@dataclass(frozen=True)
class StandIns:
    """Paths of the stand-in models a test config points at."""

    detector: Path
    recognizer: Path
    swapper: Path
    enhancer: Path
    identity_swapper: Path


@pytest.fixture(scope="session")
def standins(tmp_path_factory: pytest.TempPathFactory, assets: Path) -> StandIns:
    from vcamd.bench.standins import build_enhancer, build_identity_swapper, build_recognizer, build_swapper

    folder = tmp_path_factory.mktemp("standin_models")
    return StandIns(
        detector=assets / "models" / "scrfd_500m_kps.onnx",
        recognizer=build_recognizer(folder / "recognizer.onnx"),
        swapper=build_swapper(folder / "swapper.onnx"),
        enhancer=build_enhancer(folder / "enhancer.onnx"),
        identity_swapper=build_identity_swapper(folder / "identity_swapper.onnx"),
    )


@pytest.fixture(scope="session")
def standin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Light stand-in models, built once (never inside the repo)."""
    from vcamd.bench import standins

    d = tmp_path_factory.mktemp("standins")
    standins.build_swapper(d / "inswapper_128.onnx")
    standins.build_swapper(d / "inswapper_128_fp16.onnx", fp16=True)
    standins.build_swapper(d / "inswapper_128_batched.onnx", batch=True)
    standins.build_recognizer(d / "w600k_standin.onnx")
    standins.build_enhancer(d / "gfpgan_standin.onnx")
    return d


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A real 256 KiB tmpfs at a private mount point, unmounted after the test (needs root and mount
    permission; skipped cleanly otherwise): a disk that fills up."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)

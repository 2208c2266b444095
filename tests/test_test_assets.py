"""Where the tests' real models and photos come from (tests/support/assets.py): `$VCAMD_TEST_ASSETS`,
then `../shared/assets`, then a download into a user cache checked against pinned SHA-256 — served
here by a real HTTP server on 127.0.0.1 — and a skip (a failure under CI) with none of the three."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import assets as test_assets
from support.assets import Asset, Found, Missing

A_MODEL = b"\x08\x07 not really onnx, but bytes with a known hash"
A_PHOTO = b"\x89PNG and some more bytes"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving tmp_path/www; yields its base address."""
    www = tmp_path / "www"
    (www / "weights").mkdir(parents=True)
    (www / "weights" / "model.onnx").write_bytes(A_MODEL)
    (www / "photo.png").write_bytes(A_PHOTO)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)  # a prompt shutdown()
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _assets(base: str, model_sha: str = _sha(A_MODEL)) -> tuple[Asset, ...]:
    return (Asset("models/model.onnx", f"{base}/weights/model.onnx", model_sha),
            Asset("images/photo.png", f"{base}/photo.png", _sha(A_PHOTO)))


def _place(folder: Path, assets: tuple[Asset, ...]) -> Path:
    for asset in assets:
        (folder / asset.path).parent.mkdir(parents=True, exist_ok=True)
        (folder / asset.path).write_bytes(b"present")
    return folder


def test_env_folder_comes_first(tmp_path: Path) -> None:
    assets = _assets("http://127.0.0.1:9")
    env_dir = _place(tmp_path / "mine", assets)
    shared = _place(tmp_path / "shared", assets)
    found = test_assets.locate({"VCAMD_TEST_ASSETS": str(env_dir)}, shared, tmp_path / "cache", assets)
    assert found == Found(env_dir, "$VCAMD_TEST_ASSETS")


def test_shared_folder_when_env_unset_or_incomplete(tmp_path: Path) -> None:
    assets = _assets("http://127.0.0.1:9")
    shared = _place(tmp_path / "shared", assets)
    incomplete = tmp_path / "mine"
    incomplete.mkdir()
    assert test_assets.locate({}, shared, tmp_path / "cache", assets) == Found(shared, "../shared/assets")
    found = test_assets.locate({"VCAMD_TEST_ASSETS": str(incomplete)}, shared, tmp_path / "cache", assets)
    assert found == Found(shared, "../shared/assets")
    assert not (tmp_path / "cache").exists(), "nothing downloaded while a local folder has them"


def test_download_with_matching_hashes_is_kept_and_reused(tmp_path: Path, server: str) -> None:
    assets = _assets(server)
    cache = tmp_path / "cache"
    found = test_assets.locate({}, tmp_path / "no-shared", cache, assets, timeout_s=5)
    assert isinstance(found, Found) and found.folder == cache
    assert (cache / "models" / "model.onnx").read_bytes() == A_MODEL
    assert (cache / "images" / "photo.png").read_bytes() == A_PHOTO
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == ["model.onnx", "photo.png"]
    # The second run needs no server: the cached files' hashes still match.
    offline = _assets("http://127.0.0.1:9")
    assert test_assets.locate({}, tmp_path / "no-shared", cache, offline, timeout_s=5) == found


def test_download_with_the_wrong_hash_is_refused_and_not_kept(tmp_path: Path, server: str) -> None:
    assets = _assets(server, model_sha=_sha(b"some other model"))
    cache = tmp_path / "cache"
    found = test_assets.locate({}, tmp_path / "no-shared", cache, assets, timeout_s=5)
    assert isinstance(found, Missing)
    assert "is not the pinned" in found.line()
    assert not any(p.is_file() for p in (cache / "models").rglob("*")), "a file with the wrong hash stays"


def test_a_cached_file_with_the_wrong_hash_is_fetched_again(tmp_path: Path, server: str) -> None:
    assets = _assets(server)
    cache = _place(tmp_path / "cache", assets)  # right names, wrong bytes
    assert isinstance(test_assets.locate({}, tmp_path / "no-shared", cache, assets, timeout_s=5), Found)
    assert (cache / "models" / "model.onnx").read_bytes() == A_MODEL


def test_none_of_the_three_skips_with_one_line_or_fails_under_ci(tmp_path: Path) -> None:
    unreachable = _assets("http://127.0.0.1:9")  # the discard port: connection refused
    found = test_assets.locate({"VCAMD_TEST_ASSETS": str(tmp_path / "nowhere")}, tmp_path / "no-shared",
                               tmp_path / "cache", unreachable, timeout_s=5)
    assert isinstance(found, Missing)
    line = found.line()
    assert "\n" not in line
    for says in ("VCAMD_TEST_ASSETS", "../shared/assets", "download", "nowhere"):
        assert says in line
    with pytest.raises(pytest.skip.Exception, match="test assets not found"):
        test_assets.require_or_skip(found, {})
    with pytest.raises(pytest.fail.Exception, match="VCAMD_REQUIRE_TEST_ASSETS=1"):
        test_assets.require_or_skip(found, {"VCAMD_REQUIRE_TEST_ASSETS": "1"})


def test_the_pinned_hashes_are_those_of_the_shared_files(assets: Path) -> None:
    """The table in support/assets.py matches the files the team's runs use."""
    for asset in test_assets.TEST_ASSETS:
        assert test_assets.sha256_of(assets / asset.path) == asset.sha256, asset.path


def test_ci_requires_the_assets() -> None:
    """`.ci/run` turns the skip into a failure, so CI cannot pass without the real assets."""
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert "export VCAMD_REQUIRE_TEST_ASSETS=1" in ci


def test_no_download_when_told_so(tmp_path: Path, server: str) -> None:
    """`VCAMD_TEST_ASSETS_DOWNLOAD=0`: the network is left alone (an offline run, or one that must
    not reach out); a complete cache from an earlier download is still used."""
    assets = _assets(server)
    cache = tmp_path / "cache"
    found = test_assets.locate({"VCAMD_TEST_ASSETS_DOWNLOAD": "0"}, tmp_path / "no-shared", cache, assets, timeout_s=5)
    assert isinstance(found, Missing) and "no download ($VCAMD_TEST_ASSETS_DOWNLOAD=0)" in found.line()
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*")), "downloaded although told not to"
    assert isinstance(test_assets.locate({}, tmp_path / "no-shared", cache, assets, timeout_s=5), Found)  # the server works
    again = test_assets.locate({"VCAMD_TEST_ASSETS_DOWNLOAD": "no"}, tmp_path / "no-shared", cache, assets, timeout_s=5)
    assert again == Found(cache, "the user cache (downloaded earlier, SHA-256 checked)")


def test_without_the_assets_their_skips_are_one_line_of_the_summary(tmp_path: Path) -> None:
    """Issue 42: a newcomer without the assets read one 400-character skip line per test (433 of
    them). The real conftest, in a checkout with no ../shared beside it and downloads off: the
    tests needing the assets skip under ONE line saying what is skipped and how to get them."""
    import os
    import shutil
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    checkout = tmp_path / "fresh" / "tests"  # no tmp_path / "shared" beside "fresh"
    shutil.copytree(tests / "support", checkout / "support")
    shutil.copy(tests / "conftest.py", checkout / "conftest.py")
    # Three tests in three places (pytest folds skips of one place by itself), one without assets.
    (checkout / "test_three.py").write_text(
        "".join(f"def test_needs_{n}(assets):\n    assert assets.is_dir()\n\n\n" for n in "abc")
        + "def test_does_not():\n    assert True\n", encoding="utf-8")
    env = {**os.environ, "VCAMD_TEST_ASSETS": str(tmp_path / "empty"), "VCAMD_TEST_ASSETS_DOWNLOAD": "0",
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("VCAMD_REQUIRE_TEST_ASSETS", None)
    (tmp_path / "empty").mkdir()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-ra", "--import-mode=importlib", "-p", "no:cacheprovider",
                           "--rootdir", str(checkout.parent), str(checkout)], capture_output=True, text=True, env=env,
                          cwd=checkout.parent, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, done.stdout
    assert skipped[0].startswith("SKIPPED [3] tests/conftest.py:"), skipped[0]
    for says in ("test assets not found", "no download ($VCAMD_TEST_ASSETS_DOWNLOAD=0)", "set $VCAMD_TEST_ASSETS", "../shared/assets"):
        assert says in skipped[0], skipped[0]
    assert "1 passed, 3 skipped" in done.stdout

"""A cut-off model download is never installed or pinned (issue 10, item 1).

The mirror is a real HTTP server on 127.0.0.1. Its worst case: half of `gfpgan_1.4` (whose hash
is not published) sent with no Content-Length and a clean close — to the client that looks like
a complete download. The store must prove the byte count (Content-Length / Content-Range total,
or the manifest's exact size) and load the file as an ONNX model of its role before pinning it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vcamd.common.errors import ModelError
from vcamd.modelstore.store import ModelStore
from vcamd.modelstore.verify import STATE_FILE

GFPGAN_PATH = "/facefusion/models-3.0.0/resolve/main/gfpgan_1.4.onnx"


def store_for(tmp_path: Path, entries: dict) -> ModelStore:
    return ModelStore(tmp_path / "models", "", {"models": entries})


def everything_in(folder: Path) -> list[str]:
    """Every name in the models dir except the state file: downloads, partials, lock files."""
    return sorted(p.name for p in folder.iterdir() if p.name != STATE_FILE) if folder.exists() else []


def pins(folder: Path) -> dict:
    path = folder / STATE_FILE
    return json.loads(path.read_text()).get("pinned", {}) if path.exists() else {}


@pytest.fixture
def config_file(tmp_path, file_server) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[models]\ndir = "models"\nmirror = "{file_server.base}"\n')
    return path


def test_cli_half_of_gfpgan_without_content_length_is_refused_and_nothing_stays(
    config_file, file_server, enhancer_onnx, vcamd_cli
) -> None:
    data, _ = enhancer_onnx(400_000)
    file_server.serve(GFPGAN_PATH, data, send_length=False, truncate_after=len(data) // 2)
    models = config_file.parent / "models"

    pulled = vcamd_cli("models", "pull", "gfpgan_1.4", "--no-progress", "--config", str(config_file))

    assert pulled.returncode == 2, pulled.stdout
    [line] = pulled.stderr.splitlines()
    assert line.startswith("vcamd: error: gfpgan_1.4: 127.0.0.1:") and "without a Content-Length" in line
    assert "nothing was installed" in line
    assert file_server.hits[-1].body_bytes == len(data) // 2
    assert everything_in(models) == []  # no model, no .part, no empty lock file
    assert pins(models) == {}
    verified = vcamd_cli("models", "verify", "--config", str(config_file))
    assert (verified.returncode, verified.stdout) == (0, f"no model files in {models}; to get them, run `vcamd models pull`, or copy them in by hand: `vcamd models list` says where each file comes from and where it goes\n")


def test_whole_file_without_content_length_is_still_unproven_for_an_unpublished_model(
    tmp_path, file_server, enhancer_onnx, manifest_entry
) -> None:
    # The same shape of answer as a cut-off one: without a length or a hash, a complete body
    # cannot be told from half of one, so it is refused too (loading alone is no proof: a cut at
    # a field boundary can still parse).
    data, _ = enhancer_onnx(200_000)
    url = file_server.serve("/gfp.onnx", data, send_length=False)
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer", approx_size=200_000)})
    with pytest.raises(ModelError, match=r"gfp: 127\.0\.0\.1:\d+ sent [\d,]+ bytes without a Content-Length"):
        store.pull(["gfp"], progress=False)
    assert everything_in(store.dir) == [] and pins(store.dir) == {}


def test_manifest_exact_size_proves_the_byte_count_without_content_length(
    tmp_path, file_server, enhancer_onnx, manifest_entry
) -> None:
    data, sha = enhancer_onnx(200_000)
    url = file_server.serve("/gfp.onnx", data, send_length=False)
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", size=len(data), role="enhancer")})
    [result] = store.pull(["gfp"], progress=False)
    assert result.pinned == ((store.dir / "gfp.onnx", sha),)
    assert (store.dir / "gfp.onnx").read_bytes() == data
    assert everything_in(store.dir) == ["gfp.onnx"]


def test_proven_length_but_not_a_model_of_its_role_is_refused(tmp_path, file_server, assets, manifest_entry) -> None:
    # Complete bytes, Content-Length right — but a face recognizer served as the enhancer.
    data = (assets / "models" / "mobilefacenet.onnx").read_bytes()
    url = file_server.serve("/gfp.onnx", data)
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer")})
    with pytest.raises(ModelError, match=r"gfp: the [\d,]+ bytes from .* are not a usable enhancer model \(.*not a face enhancer"):
        store.pull(["gfp"], progress=False)
    assert everything_in(store.dir) == [] and pins(store.dir) == {}


def test_random_bytes_with_right_length_are_not_pinned(tmp_path, file_server, blob, manifest_entry) -> None:
    data, _ = blob(100_000)
    url = file_server.serve("/gfp.onnx", data)
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer")})
    with pytest.raises(ModelError, match=r"not a usable enhancer model .*cannot be loaded by ONNX Runtime"):
        store.pull(["gfp"], progress=False)
    assert everything_in(store.dir) == [] and pins(store.dir) == {}


def test_truncated_model_with_a_published_hash_without_content_length_is_refused(
    tmp_path, file_server, blob, manifest_entry
) -> None:
    data, sha = blob(600_000)
    url = file_server.serve("/m.onnx", data, send_length=False, truncate_after=250_000)
    store = store_for(tmp_path, {"m": manifest_entry(url, "m.onnx", sha)})
    with pytest.raises(ModelError, match=r"m: the file from .* does not match the manifest .*sent 250,000 bytes without saying how many"):
        store.pull(["m"], progress=False)
    assert everything_in(store.dir) == []


def test_content_length_mismatch_is_an_error_and_nothing_is_installed(tmp_path, file_server, enhancer_onnx, manifest_entry) -> None:
    data, _ = enhancer_onnx(300_000)
    url = file_server.serve("/gfp.onnx", data, truncate_after=100_000)  # says 300 kB, sends 100 kB
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer")})
    with pytest.raises(ModelError, match=r"gfp: (127\.0\.0\.1:\d+ closed the connection|download interrupted) at 0\.1 MB of 0\.3 MB"):
        store.pull(["gfp"], progress=False)
    assert not (store.dir / "gfp.onnx").exists() and pins(store.dir) == {}
    # The partial stays for the resume, which completes and proves it (Content-Range total).
    file_server.files["/gfp.onnx"].truncate_after = None
    [result] = store.pull(["gfp"], progress=False)
    assert file_server.hits[-1].status == 206
    assert (store.dir / "gfp.onnx").read_bytes() == data and result.pinned


def test_verify_rechecks_a_pin_recorded_from_a_truncated_download(tmp_path, file_server, enhancer_onnx, manifest_entry) -> None:
    # The state an older vcamd left: half a model installed and its hash pinned as the truth.
    data, sha = enhancer_onnx(300_000)
    half = data[: len(data) // 2]
    url = file_server.serve("/gfp.onnx", data)
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer")})
    store.dir.mkdir(parents=True)
    (store.dir / "gfp.onnx").write_bytes(half)
    import hashlib

    half_sha = hashlib.sha256(half).hexdigest()
    (store.dir / STATE_FILE).write_text(json.dumps({"pinned": {"gfp.onnx": {"sha256": half_sha, "size": len(half)}}, "verified": {}}))

    [r] = store.verify()
    assert r.status == "invalid" and r.expected == half_sha and "cannot be loaded by ONNX Runtime" in r.problem
    assert pins(store.dir) == {}  # the bad pin is dropped...

    [result] = store.pull(["gfp"], progress=False)  # ...so the next pull replaces the file
    assert result.action == "downloaded" and (store.dir / "gfp.onnx").read_bytes() == data
    assert pins(store.dir)["gfp.onnx"]["sha256"] == sha


def test_pull_rechecks_an_old_pin_before_calling_it_present(tmp_path, file_server, enhancer_onnx, manifest_entry) -> None:
    data, sha = enhancer_onnx(300_000)
    half = data[: len(data) // 2]
    url = file_server.serve("/gfp.onnx", data)
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer")})
    store.dir.mkdir(parents=True)
    (store.dir / "gfp.onnx").write_bytes(half)
    import hashlib

    st = (store.dir / "gfp.onnx").stat()
    half_sha = hashlib.sha256(half).hexdigest()
    (store.dir / STATE_FILE).write_text(json.dumps({
        "pinned": {"gfp.onnx": {"sha256": half_sha, "size": len(half)}},
        "verified": {"gfp.onnx": {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": half_sha}},
    }))
    [result] = store.pull(["gfp"], progress=False)
    assert result.action == "downloaded" and (store.dir / "gfp.onnx").read_bytes() == data
    assert pins(store.dir)["gfp.onnx"]["sha256"] == sha


def test_cli_verify_reports_the_invalid_pinned_file_in_one_line(config_file, enhancer_onnx, vcamd_cli) -> None:
    models = config_file.parent / "models"
    models.mkdir()
    data, _ = enhancer_onnx(200_000)
    (models / "gfpgan_1.4.onnx").write_bytes(data[: len(data) // 2])
    result = vcamd_cli("models", "verify", "--config", str(config_file))
    assert result.returncode == 2
    assert "gfpgan_1.4 (enhancer)" in result.stdout and "NOT A USABLE MODEL" in result.stdout
    assert result.stderr.splitlines() == [
        "vcamd: error: model check failed: gfpgan_1.4.onnx invalid — run `vcamd models pull gfpgan_1.4` to download it again, "
        "or copy it in by hand: `vcamd models list` says where each file comes from and where it goes"
    ]


@pytest.mark.parametrize("failure", ["404", "truncated", "unproven"])
def test_a_failed_pull_leaves_no_lock_file(tmp_path, file_server, enhancer_onnx, manifest_entry, failure) -> None:
    data, _ = enhancer_onnx(100_000)
    behaviour = {"truncated": {"truncate_after": 10_000}, "unproven": {"send_length": False}}.get(failure)
    url = file_server.base + "/missing.onnx" if behaviour is None else file_server.serve("/gfp.onnx", data, **behaviour)
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer")})
    with pytest.raises(ModelError):
        store.pull(["gfp"], progress=False)
    assert [p for p in everything_in(store.dir) if p.endswith(".lock")] == []


def test_a_successful_pull_leaves_no_lock_file(tmp_path, file_server, enhancer_onnx, manifest_entry) -> None:
    data, _ = enhancer_onnx(100_000)
    store = store_for(tmp_path, {"gfp": manifest_entry(file_server.serve("/gfp.onnx", data), "gfp.onnx", "", role="enhancer")})
    store.pull(["gfp"], progress=False)
    assert everything_in(store.dir) == ["gfp.onnx"]


def test_the_published_crc32_checks_a_first_download(tmp_path, file_server, enhancer_onnx, manifest_entry, caplog) -> None:
    """No SHA-256 published: FaceFusion's `.hash` beside the model (its CRC32) decides before the
    SHA-256 is pinned — a different file is deleted; no `.hash` to be had is said, and the other
    proofs (length, loading as its role) still decide."""
    import zlib

    data, sha = enhancer_onnx(200_000)
    url = file_server.serve("/m/gfp.onnx", data)
    right = file_server.serve("/m/gfp.hash", format(zlib.crc32(data), "08x").encode())
    wrong = file_server.serve("/m/other.hash", b"deadbeef\n")
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer", crc32_url=wrong),
                                 "ok": manifest_entry(url, "ok.onnx", "", role="enhancer", crc32_url=right),
                                 "unpublished": manifest_entry(url, "unpublished.onnx", "", role="enhancer",
                                                               crc32_url=url.replace("gfp.onnx", "missing.hash"))})
    with pytest.raises(ModelError, match=rf"gfp: the file's CRC32 is {format(zlib.crc32(data), '08x')}, but .*/m/other.hash publishes deadbeef"):
        store.pull(["gfp"], progress=False)
    assert everything_in(store.dir) == [] and pins(store.dir) == {}

    [ok] = store.pull(["ok"], progress=False)
    assert ok.crc32 == format(zlib.crc32(data), "08x") and ok.pinned == ((store.dir / "ok.onnx", sha),)

    [unchecked] = store.pull(["unpublished"], progress=False)
    assert unchecked.crc32 == "" and unchecked.pinned == ((store.dir / "unpublished.onnx", sha),)
    assert "no published CRC32 from" in caplog.text and "not checked against its published CRC32" in caplog.text

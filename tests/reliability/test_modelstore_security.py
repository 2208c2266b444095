"""The model store writes only inside the models dir and never keeps a file whose hash is wrong.

A manifest or a mirror is input from outside: a manifest entry naming `../x`, a zip from a mirror
with `../../` members, a symlink planted in the models dir, a mirror serving other bytes. Each is
refused (ModelError) or contained (nothing written outside the models dir). Downloads go to a real
HTTP server on 127.0.0.1 acting as the `[models] mirror`.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest

from vcamd.common.errors import ModelError
from vcamd.modelstore.store import ModelStore

PAYLOAD = b"ONNX-ish model bytes " * 100


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry(file: str = "model.onnx", data: bytes = PAYLOAD, **extra) -> dict:
    return {
        "role": "swapper",
        "file": file,
        "size": len(data),
        "sha256": sha(data),
        "license": "test",
        "url": f"https://models.example.invalid/files/{file}",
        **extra,
    }


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


@pytest.mark.parametrize(
    "bad_name",
    ["../evil.onnx", "/tmp/evil.onnx", "sub/evil.onnx", "..", ".", "sub\\evil.onnx", "C:evil.onnx", "evil\x00.onnx", ""],
)
def test_manifest_file_names_that_leave_the_models_dir_are_refused(tmp_path: Path, bad_name: str) -> None:
    with pytest.raises(ModelError, match=r"manifest.*\[models\.m\]"):
        ModelStore(tmp_path / "models", manifest={"models": {"m": entry(file=bad_name)}})


@pytest.mark.parametrize("bad_name", ["../det.onnx", "/etc/det.onnx", "a/det.onnx"])
def test_manifest_extract_members_that_leave_the_models_dir_are_refused(tmp_path: Path, bad_name: str) -> None:
    pack = entry(file="pack.zip", role="detector", extract={"detector": {"file": bad_name, "sha256": ""}})
    with pytest.raises(ModelError, match="manifest"):
        ModelStore(tmp_path / "models", manifest={"models": {"pack": pack}})


@pytest.mark.parametrize("bad_name", ["../x", "a..b/../../c", "x/y"])
def test_manifest_model_names_are_plain(tmp_path: Path, bad_name: str) -> None:
    with pytest.raises(ModelError):
        ModelStore(tmp_path / "models", manifest={"models": {bad_name: entry()}})


@pytest.mark.parametrize(
    "mirror",
    ["file:///etc", "ftp://mirror.example.org", "https://mirror.example.org/../..", "https://mirror.example.org/?x=1", "mirror.example.org", "https://"],
)
def test_unusable_mirrors_are_refused(tmp_path: Path, mirror: str) -> None:
    with pytest.raises(ModelError, match="mirror"):
        ModelStore(tmp_path / "models", mirror=mirror, manifest={"models": {"m": entry()}})


def test_mirror_serving_other_bytes_leaves_nothing_behind(tmp_path: Path, file_server) -> None:
    models = tmp_path / "models"
    file_server.files["/files/model.onnx"] = b"X" * len(PAYLOAD)  # right size, wrong content
    store = ModelStore(models, mirror=file_server.url, manifest={"models": {"m": entry()}})
    with pytest.raises(ModelError, match="does not match") as info:
        store.pull(["m"], progress=False)
    assert "m" in str(info.value)
    assert file_server.requests == ["/files/model.onnx"], "the mirror replaces the host, not the file path"
    leftovers = {p.name for p in models.iterdir()} - {".model.onnx.lock"}
    assert leftovers <= {"vcamd-models.json"}, f"a bad download stayed on disk: {leftovers}"


def test_verify_reports_a_file_whose_hash_does_not_match(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "model.onnx").write_bytes(b"Y" * len(PAYLOAD))  # right size: only the hash can tell
    store = ModelStore(models, manifest={"models": {"m": entry()}})
    [result] = store.verify(["m"])
    assert result.status == "mismatch" and result.expected == sha(PAYLOAD)
    assert result.path == models / "model.onnx"


def test_zip_from_mirror_with_traversal_members_stays_inside(tmp_path: Path, file_server) -> None:
    # A pack whose members try to land outside the models dir (zip-slip): `../../outside/…` and
    # an absolute path. Only the member the manifest names is extracted, under its plain name.
    detector = b"detector bytes " * 50
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../../outside/det.onnx", detector)
        zf.writestr("../../outside/evil.sh", b"#!/bin/sh\necho pwned\n")
        zf.writestr("/tmp/h8-absolute-evil.onnx", b"evil")
    pack_bytes = buf.getvalue()
    pack = entry(
        file="pack.zip",
        data=pack_bytes,
        role="detector",
        extract={"detector": {"file": "det.onnx", "size": len(detector), "sha256": sha(detector)}},
    )
    file_server.files["/files/pack.zip"] = pack_bytes
    root = tmp_path / "root"
    models = root / "a" / "models"
    before = files_under(tmp_path)
    store = ModelStore(models, mirror=file_server.url, manifest={"models": {"pack": pack}})
    store.pull(["pack"], progress=False)
    assert (models / "det.onnx").read_bytes() == detector
    new_outside = {p for p in files_under(tmp_path) - before if models not in p.parents and p != models}
    assert new_outside <= {root, root / "a"}, f"written outside the models dir: {new_outside}"
    assert not Path("/tmp/h8-absolute-evil.onnx").exists()


def test_symlink_at_the_model_name_is_not_written_through(tmp_path: Path, file_server) -> None:
    models = tmp_path / "models"
    models.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep me")
    (models / "model.onnx").symlink_to(outside)
    file_server.files["/files/model.onnx"] = PAYLOAD
    store = ModelStore(models, mirror=file_server.url, manifest={"models": {"m": entry()}})
    with pytest.raises(ModelError, match="outside"):
        store.pull(["m"], progress=False)
    assert outside.read_bytes() == b"keep me"


def test_symlink_at_the_partial_download_name_is_not_written_through(tmp_path: Path, file_server) -> None:
    # `<file>.part` is where the download lands before its hash is checked. A symlink there
    # (planted, or left by a tool) must not redirect the download onto a file outside.
    models = tmp_path / "models"
    models.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep me")
    (models / "model.onnx.part").symlink_to(outside)
    file_server.files["/files/model.onnx"] = PAYLOAD
    store = ModelStore(models, mirror=file_server.url, manifest={"models": {"m": entry()}})
    try:
        store.pull(["m"], progress=False)
    except ModelError:
        pass
    assert outside.read_bytes() == b"keep me", "the download was written through a symlink to a file outside the models dir"
    assert not (models / "model.onnx").is_symlink()


def test_a_good_pull_from_the_mirror_works(tmp_path: Path, file_server) -> None:
    # Shows the refusals above are about the input, not a store that cannot download at all.
    models = tmp_path / "models"
    file_server.files["/files/model.onnx"] = PAYLOAD
    store = ModelStore(models, mirror=file_server.url, manifest={"models": {"m": entry()}})
    [result] = store.pull(["m"], progress=False)
    assert result.action == "downloaded" and (models / "model.onnx").read_bytes() == PAYLOAD
    assert os.stat(models / "model.onnx").st_size == len(PAYLOAD)

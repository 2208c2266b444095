"""A model pull onto a disk that fills up: a clear ModelError, no half file under the final name,
and a later pull completes once there is room. The disk is a real 256 KiB tmpfs (needs root and
mount permission; skipped cleanly otherwise)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from vcamd.errors import ModelError
from vcamd.modelstore.store import ModelStore

PAYLOAD = os.urandom(1_000_000)


@pytest.fixture
def tiny_disk(tmp_path: Path):
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


def test_pull_onto_a_full_disk_fails_clearly_and_resumes_later(tiny_disk: Path, file_server) -> None:
    manifest = {
        "models": {
            "big": {
                "role": "swapper", "file": "big.onnx", "size": len(PAYLOAD),
                "sha256": hashlib.sha256(PAYLOAD).hexdigest(), "license": "test",
                "url": "https://models.example.invalid/big.onnx",
            }
        }
    }
    file_server.files["/big.onnx"] = PAYLOAD
    models = tiny_disk / "models"
    store = ModelStore(models, mirror=file_server.url, manifest=manifest)
    with pytest.raises(ModelError) as info:
        store.pull(["big"], progress=False)
    message = str(info.value)
    assert "big" in message and ("space" in message or "No space" in message), message
    assert not (models / "big.onnx").exists(), "a partial download must never sit under the final name"

    # The fault clears: the disk grows. The next pull completes and verifies.
    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_disk)], check=True)
    [result] = store.pull(["big"], progress=False)
    assert result.action == "downloaded"
    assert (models / "big.onnx").read_bytes() == PAYLOAD
    assert [r.status for r in store.verify(["big"])] == ["ok"]


def test_verify_on_a_full_disk_reports_instead_of_crashing(tiny_disk: Path) -> None:
    # verify() records what it checked in vcamd-models.json; on a full disk that write fails.
    # The hash results are still good to report: only a ModelError (or the results) may come out.
    data = b"model" * 1000
    models = tiny_disk / "models"
    models.mkdir()
    (models / "m.onnx").write_bytes(data)
    manifest = {"models": {"m": {"role": "swapper", "file": "m.onnx", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                 "license": "test", "url": "https://models.example.invalid/m.onnx"}}}
    filler = tiny_disk / "filler"
    with filler.open("wb") as out:  # fill the disk to the last byte
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    store = ModelStore(models, manifest=manifest)
    try:
        results = store.verify(["m"])
    except ModelError as err:
        assert "vcamd-models.json" in str(err) or "space" in str(err), str(err)
    else:
        assert [r.status for r in results] == ["ok"]

"""The source photo's face kept on disk (`vcamd.faces.source_cache`), with the real detector and
recogniser: a start that read the photo before skips detection and embedding and gets the same face;
another photo, another model or a damaged entry is read afresh."""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.faces import source_cache
from vcamd.faces.detect import FaceDetector
from vcamd.faces.identity import SourceIdentity, load_source_identity


class CountingDetector(FaceDetector):
    """The real detector, counting its calls (a cache hit makes none)."""

    calls = 0

    def detect(self, frame, input_size=None, threshold=None):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().detect(frame, input_size, threshold)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VCAMD_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "faces"


@pytest.fixture
def photo(tmp_path: Path, assets: Path) -> Path:
    copy = tmp_path / "me.png"
    shutil.copyfile(assets / "images" / "newton.png", copy)
    return copy


@pytest.fixture
def counting(sessions, models_dir: Path) -> CountingDetector:
    return CountingDetector(models_dir / "scrfd_500m_kps.onnx", sessions)


def _same(a: SourceIdentity, b: SourceIdentity) -> None:
    assert a.raw_embedding is not None and b.raw_embedding is not None
    np.testing.assert_array_equal(a.raw_embedding, b.raw_embedding)
    np.testing.assert_array_equal(a.embedding, b.embedding)
    assert a.face.box == b.face.box and a.face.score == b.face.score
    np.testing.assert_array_equal(a.face.kps, b.face.kps)
    assert a.faces_in_photo == b.faces_in_photo
    assert a.photo is not None and b.photo is not None
    np.testing.assert_array_equal(a.photo, b.photo)


def test_a_photo_read_before_is_not_detected_again_and_gives_the_same_face(cache, photo, counting, mobilefacenet):
    fresh = load_source_identity(photo, counting, mobilefacenet)
    assert counting.calls == 1
    entries = list(cache.glob("*.npz"))
    assert len(entries) == 1
    if os.name == "posix":  # an embedding of the user's face is as private as the photo
        assert stat.S_IMODE(entries[0].stat().st_mode) == 0o600
        assert stat.S_IMODE(cache.stat().st_mode) == 0o700

    kept = load_source_identity(photo, counting, mobilefacenet)
    assert counting.calls == 1  # neither detected nor embedded again
    _same(kept, fresh)


def test_a_group_photo_kept_still_says_which_face(cache, tmp_path, assets, counting, mobilefacenet, caplog):
    group = tmp_path / "group.png"
    shutil.copyfile(assets / "images" / "solvay_conference_1927.png", group)
    fresh = load_source_identity(group, counting, mobilefacenet)
    with caplog.at_level(logging.INFO, logger="vcamd.faces.identity"):
        kept = load_source_identity(group, counting, mobilefacenet)
    assert counting.calls == 1
    _same(kept, fresh)
    assert kept.faces_in_photo > 1 and "the largest of the" in caplog.text


def test_a_changed_photo_at_the_same_path_is_read_again(cache, photo, assets, counting, mobilefacenet):
    newton = load_source_identity(photo, counting, mobilefacenet)
    group = cv2.imread(str(assets / "images" / "solvay_conference_1927.png"), cv2.IMREAD_COLOR)
    other = next(f for f in counting.detect(group) if f.width > 40)
    x1, y1, x2, y2 = (int(v) for v in other.box)
    pad = x2 - x1
    cv2.imwrite(str(photo), group[max(0, y1 - pad): y2 + pad, max(0, x1 - pad): x2 + pad])
    calls = counting.calls

    changed = load_source_identity(photo, counting, mobilefacenet)
    assert counting.calls == calls + 1
    shutil.rmtree(cache)
    _same(changed, load_source_identity(photo, counting, mobilefacenet))  # what a fresh read of the new photo gives
    assert float(changed.embedding @ newton.embedding) < 0.65  # not Newton's face


def test_another_detector_misses_the_entry(cache, photo, sessions, models_dir, counting, mobilefacenet):
    load_source_identity(photo, counting, mobilefacenet)
    other = CountingDetector(models_dir / "scrfd_2.5g_kps.onnx", sessions)
    load_source_identity(photo, other, mobilefacenet)
    assert other.calls == 1
    assert len(list(cache.glob("*.npz"))) == 2


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "another_key", "misshapen"])
def test_a_damaged_entry_is_logged_and_rebuilt(cache, photo, counting, mobilefacenet, caplog, damage):
    fresh = load_source_identity(photo, counting, mobilefacenet)
    (entry,) = cache.glob("*.npz")
    whole = entry.read_bytes()
    with np.load(entry, allow_pickle=False) as kept:
        arrays = {name: kept[name] for name in kept.files}
    if damage == "garbage":
        entry.write_bytes(b"\x00not an npz" * 40)
    elif damage == "truncated":
        entry.write_bytes(whole[: len(whole) // 2])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "another_key":  # a whole entry, with someone else's embedding under a key that is not this one
        np.savez(entry.with_suffix(""), **(arrays | {"key": np.array("{}"), "raw_embedding": np.ones(128, np.float32)}))
    else:
        np.savez(entry.with_suffix(""), **(arrays | {"kps": np.zeros((3, 2), np.float32)}))

    with caplog.at_level(logging.INFO, logger="vcamd.faces.source_cache"):
        again = load_source_identity(photo, counting, mobilefacenet)
    assert counting.calls == 2  # read afresh
    _same(again, fresh)
    assert "unreadable" in caplog.text and str(entry) in caplog.text
    with np.load(entry, allow_pickle=False) as rebuilt:  # and kept again, whole
        np.testing.assert_array_equal(rebuilt["raw_embedding"], fresh.raw_embedding)
    assert load_source_identity(photo, counting, mobilefacenet) is not None and counting.calls == 2


def test_a_cache_that_cannot_be_written_leaves_the_fresh_read(cache, photo, counting, mobilefacenet, caplog):
    cache.parent.mkdir(parents=True)
    cache.write_text("a file where the folder goes")
    with caplog.at_level(logging.INFO, logger="vcamd.faces.source_cache"):
        first = load_source_identity(photo, counting, mobilefacenet)
        second = load_source_identity(photo, counting, mobilefacenet)
    assert counting.calls == 2
    _same(first, second)
    assert "could not keep the source face" in caplog.text


def test_a_lookup_never_hashes_a_model(cache, photo, counting, mobilefacenet, monkeypatch):
    """A start finds the models' hashes remembered; one not remembered misses rather than hashing."""
    load_source_identity(photo, counting, mobilefacenet)

    def no_hashing(path):  # type: ignore[no-untyped-def]
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr("vcamd.files.digests.sha256_file", no_hashing)
    readers = source_cache.Readers(counting.path, counting.size, counting.threshold, mobilefacenet.path,
                                   (mobilefacenet.mean, mobilefacenet.std), mobilefacenet.dim)
    image = cv2.imread(str(photo), cv2.IMREAD_COLOR)
    import hashlib

    assert source_cache.lookup(image, hashlib.sha256(photo.read_bytes()).hexdigest(), readers) is not None
    assert not (cache.parent / "int8").exists()  # the int8 cache's folder is not this cache's
    shutil.rmtree(cache.parent / "hashes")  # the model hashes' one home (`vcamd.inference.modelhashes`)
    assert source_cache.lookup(image, hashlib.sha256(photo.read_bytes()).hexdigest(), readers) is None


def test_a_hit_keeps_what_the_photo_told_the_detector_of_its_rewritten_shapes(cache, photo, sessions, models_dir, mobilefacenet):
    """A fixed-size detector compares its rewritten shapes with its own on the first frame with a face
    (`FaceDetector.shape_verdict`); at a start that is the source photo. A start that reads the photo
    from the cache takes that verdict, so the first camera frame does not pay the comparison (or fall
    back on a frame the photo would have passed)."""
    first = CountingDetector(models_dir / "scrfd_500m_kps.onnx", sessions)
    assert first.shape_verdict() == (False, None)
    load_source_identity(photo, first, mobilefacenet)
    assert first.shape_verdict() == (True, None)

    restarted = CountingDetector(models_dir / "scrfd_500m_kps.onnx", sessions)
    load_source_identity(photo, restarted, mobilefacenet)
    assert restarted.calls == 0 and restarted.shape_verdict() == (True, None)

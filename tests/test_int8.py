"""The swapper's int8 copy: built with ONNX Runtime's quantiser on real aligned faces (`vcamd.models.quantize`),
checked against the float model (`vcamd.inference.fidelity`), kept by the model file's SHA-256
(`vcamd.inference.int8cache`), and `vcamd models quantize`. Small stand-ins only: the 554 MB one is the bench's."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.cli import one_clear_line, run_vcamd

from vcamd.inference import modelhashes
from vcamd.inference.fidelity import THRESHOLDS, compare, psnr_db


@pytest.fixture(scope="module")
def calibration(assets, tmp_path_factory):
    """Real aligned faces (newton, the 1927 Solvay photo) and the stand-in recogniser's (512-d) view of them."""
    from vcamd.bench.standins import build_recognizer
    from vcamd.faces.calibration import faces_from_photos
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Recognizer
    from vcamd.faces.specs import SWAPPERS
    from vcamd.inference.runtime import Sessions

    sessions = Sessions(["cpu"], 1)
    recognizer = build_recognizer(tmp_path_factory.mktemp("recognizer") / "recognizer.onnx")
    faces = faces_from_photos([assets / "images" / "newton.png", assets / "images" / "solvay_conference_1927.png"],
                              FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", sessions), Recognizer(recognizer, sessions),
                              SWAPPERS[0].crop, limit=6)
    return recognizer, faces


# ---- the check -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mobilefacenet(assets):
    """The real face-embedding net: the identity half of the check, on real faces."""
    from vcamd.faces.identity import Recognizer
    from vcamd.inference.runtime import Sessions

    return Recognizer(assets / "models" / "mobilefacenet.onnx", Sessions(["cpu"], 1), normalisation=(127.0, 128.0))


def _arcface_crops(image, detector) -> list[np.ndarray]:
    from vcamd.faces.specs import RECOGNIZER_CROP

    return [RECOGNIZER_CROP.align(image, face.kps)[0] for face in sorted(detector.detect(image), key=lambda f: -f.area)]


def test_the_check_passes_what_a_cameras_jpeg_does_to_a_face_and_fails_another_face(solvay, newton, detector, mobilefacenet):
    """With the real recogniser: a face after JPEG at quality 95 (a camera's MJPG) is the same face
    by both halves of the check; a different person swapped in fails on identity whatever PSNR says."""
    faces = _arcface_crops(solvay, detector)[:6]
    jpeg = [cv2.imdecode(cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, 95])[1], cv2.IMREAD_COLOR) for f in faces]
    source = mobilefacenet.embed_crop(_arcface_crops(newton, detector)[0])
    same = compare(faces, jpeg, mobilefacenet.embed_crop, source)
    assert same.passed, same.summary()
    assert same.worst_psnr_db >= THRESHOLDS.psnr_db and same.worst_same_face > 0.99
    others = faces[1:] + faces[:1]  # each face's "int8 swap" is someone else
    other = compare(faces, others, mobilefacenet.embed_crop, source)
    assert not other.passed
    assert any("int8 face vs float face" in f for f in other.failures()) and other.worst_same_face < 0.6
    assert "failed on 6 faces" in other.summary()


def test_psnr_of_equal_crops_is_capped_and_of_noise_is_low():
    a = np.full((16, 16, 3), 100, np.uint8)
    assert psnr_db(a, a) == 99.0
    b = a.copy()
    b[::2] = 116  # ±16 on half the pixels: 10·log10(255² / 128) ≈ 27 dB
    assert psnr_db(a, b) == pytest.approx(27.06, abs=0.05)


# ---- building, checking, keeping -------------------------------------------------------------------


def test_a_swapper_that_quantises_well_passes_and_its_copy_is_kept_by_content(tmp_path, cache, calibration):
    from vcamd.bench.standins import build_swapper
    from vcamd.inference import int8cache
    from vcamd.inference.int8recipes import build_key
    from vcamd.inference.precision import swapper_choice
    from vcamd.models.quantize import build_checked

    recognizer, faces = calibration
    model = build_swapper(tmp_path / "a" / "swapper.onnx", heavy_convs=1)
    assert int8cache.lookup(model, build_key(False)) is None
    assert swapper_choice("auto", model, ["CPUExecutionProvider"]).runs == "float"
    built = build_checked(model, recognizer, faces, providers=["cpu"], threads=1)
    assert built.passed and len(built.attempts) == 1 and built.attempts[0].recipe.name.startswith("every")
    report = built.attempts[0].report
    assert len(report.faces) == len(faces.crops) and report.worst_psnr_db >= THRESHOLDS.psnr_db
    copy = built.kept.model
    assert copy is not None and copy.parent == cache / "int8" and copy.stat().st_size > 0
    assert modelhashes.sha256_of(model) in copy.name and oct(copy.stat().st_mode & 0o777) == "0o600"
    # Found at the next start without hashing: by the file's identity.
    kept = int8cache.lookup(model, build_key(False))
    assert kept is not None and kept.model == copy and kept.verdict.passed
    # The same bytes elsewhere: hashed once, then the kept copy, not another build.
    moved = tmp_path / "b" / "renamed.onnx"
    moved.parent.mkdir()
    shutil.copyfile(model, moved)
    assert int8cache.lookup(moved, build_key(False)) is None  # not hashed yet: a start does not hash
    again = build_checked(moved, recognizer, faces, providers=["cpu"], threads=1)
    assert again.attempts == [] and again.kept.model == copy
    # Another model file under the same name: its own entry.
    build_swapper(model, heavy_convs=2)
    assert int8cache.lookup(model, build_key(False)) is None
    other = build_checked(model, recognizer, faces, providers=["cpu"], threads=1)
    assert other.passed and other.kept.model != copy
    # Under another build key (other recipes, thresholds, ONNX Runtime, 7-bit weights): not this copy.
    assert int8cache.lookup(model, build_key(True)) is None


def test_a_swapper_whose_activations_8_bits_cannot_hold_fails_every_recipe_and_its_verdict_is_kept(tmp_path, cache, calibration):
    from vcamd.bench.standins import build_unquantizable_swapper
    from vcamd.inference import int8cache
    from vcamd.inference.int8recipes import RECIPES, build_key
    from vcamd.models.quantize import build_checked

    recognizer, faces = calibration
    model = build_unquantizable_swapper(tmp_path / "wide.onnx")
    built = build_checked(model, recognizer, faces, providers=["cpu"], threads=1)
    assert not built.passed and len(built.attempts) == len(RECIPES)
    for attempt in built.attempts:
        assert not attempt.report.passed and attempt.report.worst_psnr_db < 20.0, attempt.report.summary()
    assert built.kept.model is None and "failed" in built.kept.verdict.summary
    assert not list((cache / "int8").glob("*.onnx"))  # no copy that failed is kept
    kept = int8cache.lookup(model, build_key(False))
    assert kept is not None and not kept.verdict.passed and kept.record["attempts"][0]["check"]["passed"] is False
    assert build_checked(model, recognizer, faces, providers=["cpu"], threads=1).attempts == []  # not built again


def test_an_fp16_export_is_widened_to_float32_before_it_is_quantised(tmp_path, cache, calibration):
    """inswapper_128_fp16 (the default swapper) keeps float16 weights behind casts; ONNX Runtime's
    quantiser writes an invalid graph from those, so the copy is made from a float32 widening."""
    from vcamd.bench.standins import build_swapper
    from vcamd.models.quantize import build_checked

    recognizer, faces = calibration
    model = build_swapper(tmp_path / "swapper_fp16.onnx", fp16=True, heavy_convs=1)
    built = build_checked(model, recognizer, faces, providers=["cpu"], threads=1)
    assert built.passed, built.kept.verdict.summary


def test_the_cache_forgets_a_hash_when_the_file_changes(tmp_path, cache):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"one")
    sha = modelhashes.sha256_of(model)
    assert modelhashes.known_sha256(model) == sha
    model.write_bytes(b"two")
    os.utime(model, ns=(1, 1))
    assert modelhashes.known_sha256(model) is None
    assert modelhashes.sha256_of(model) != sha


def test_model_hashes_have_one_home_shared_with_the_source_face_and_old_records_are_still_found(tmp_path, cache, assets, monkeypatch):
    """The int8 copies and the source photo's kept face remember model hashes in one folder,
    `<cache>/hashes`; a record an older vcamd kept in `int8/hashes` or `faces/hashes` is found without hashing."""
    import json

    from vcamd.faces import source_cache

    swapper = tmp_path / "swapper.onnx"
    swapper.write_bytes(b"a swapper")
    modelhashes.sha256_of(swapper)
    detector, recognizer = assets / "models" / "scrfd_500m_kps.onnx", assets / "models" / "mobilefacenet.onnx"
    assert source_cache.Readers(detector, 640, 0.5, recognizer, (127.0, 128.0), 128).key("0" * 64, hash_models=True) is not None
    assert len(list((cache / "hashes").glob("*.json"))) == 3
    assert not (cache / "int8" / "hashes").exists() and not (cache / "faces" / "hashes").exists()
    for sha, model in ((modelhashes.known_sha256(m), m) for m in (swapper, detector, recognizer)):
        assert sha is not None and len(sha) == 64, model

    shutil.rmtree(cache / "hashes")  # as an older vcamd left them: one in each old folder
    for old, model in (("int8", swapper), ("faces", detector)):
        st = model.resolve().stat()
        record = {"identity": {"model": str(model.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}, "sha256": "ab" * 32}
        folder = cache / old / "hashes"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / modelhashes._record_name(model.resolve())).write_text(json.dumps(record))
    monkeypatch.setattr("vcamd.files.digests.sha256_file", lambda path: pytest.fail(f"hashed {path}"))
    assert modelhashes.known_sha256(swapper) == modelhashes.known_sha256(detector) == "ab" * 32
    assert modelhashes.known_sha256(recognizer) is None  # not remembered anywhere: unknown, not hashed


# ---- `vcamd models quantize` -------------------------------------------------------------------------


def _config(tmp_path: Path, assets: Path, swapper: Path, recognizer: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[models]\ndetector = "{assets / "models" / "scrfd_2.5g_kps.onnx"}"\nrecognizer = "{recognizer}"\n'
                    f'swapper = "{swapper}"\nthreads = 1\n[swap]\nsource_face = "{assets / "images" / "newton.png"}"\n')
    return path


def test_models_quantize_builds_prints_the_check_and_a_failed_copy_is_a_clear_refusal(tmp_path, assets, calibration):
    from vcamd.bench.standins import build_swapper, build_unquantizable_swapper

    recognizer, _ = calibration
    env = {**os.environ, "VCAMD_CACHE_DIR": str(tmp_path / "cache")}
    good = build_swapper(tmp_path / "good.onnx", heavy_convs=1)
    config = _config(tmp_path, assets, good, recognizer)
    solvay = assets / "images" / "solvay_conference_1927.png"
    proc = run_vcamd("models", "quantize", "--config", config, "--face", assets / "images" / "newton.png", "--face", solvay,
                     env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "calibrated and checked on 8 faces" in proc.stdout and "int8 dot-product units" in proc.stdout
    assert "face   PSNR dB" in proc.stdout and "→ passed" in proc.stdout and "passed: kept at" in proc.stdout
    assert "× faster" in proc.stdout
    again = run_vcamd("models", "quantize", "--config", config, env=env, timeout=300)
    assert again.returncode == 0 and "already built and checked" in again.stdout

    bad = build_unquantizable_swapper(tmp_path / "bad.onnx")
    proc = run_vcamd("models", "quantize", bad, "--config", config, env=env, timeout=300)
    one_clear_line(proc, "bad.onnx", "failed the fidelity check")
    assert "PSNR" in proc.stdout and "runs in float" in proc.stdout
    verdicts = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "int8").glob("*.json")]
    assert sorted(v["passed"] for v in verdicts if v["role"] != "detector") == [False, True]  # the config's detector has its own

    one_clear_line(run_vcamd("models", "quantize", recognizer, "--config", config, env=env), "not a face swapper, enhancer, parser or detector")


def test_faces_seen_are_kept_at_different_moments_up_to_the_limit_and_waited_for():
    import threading

    from vcamd.faces.calibration import SeenFaces

    now = [0.0]
    seen = SeenFaces(limit=3, every_s=0.5, clock=lambda: now[0])
    crop = np.zeros((128, 128, 3), np.uint8)
    stop = threading.Event()
    for t in (0.0, 0.1, 0.2, 0.6, 0.7, 1.2, 1.8, 2.5):
        now[0] = t
        crop[:] = int(t * 10)
        seen.offer([crop])
    kept = seen.wait(3, 0.0, stop)
    assert [int(c[0, 0, 0]) for c in kept] == [0, 6, 12]  # one per half second, copies, three at most
    assert len(SeenFaces().wait(5, 0.05, stop)) == 0  # nothing seen: what there is, after the wait
    stop.set()
    assert SeenFaces().wait(5, 60.0, stop) == []  # a stop ends the wait at once

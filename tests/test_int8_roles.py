"""The enhancer's and the face parser's int8 copies (`vcamd.models.int8roles`): told by their signatures,
calibrated on real faces aligned to their own crops, checked their own way (`vcamd.inference.fidelity`:
the enhancer like the swapper, the parser on its class maps), kept under their own key, chosen per role
(`vcamd.inference.precision.role_choice`), loaded by the pipeline, and `vcamd models quantize` covering
the roles. Small stand-ins with the production signatures; real faces and detectors from ../shared/assets."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from support.cli import one_clear_line, run_vcamd

from vcamd.inference.fidelity import PARSER_THRESHOLDS, THRESHOLDS, FidelityReport, ParserReport, compare_parses

CPU = "CPUExecutionProvider"


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory) -> Path:
    from vcamd.bench.standins import build_recognizer

    return build_recognizer(tmp_path_factory.mktemp("recognizer") / "recognizer.onnx")


def _faces(role: str, model: Path, assets: Path, recognizer: Path, limit: int = 6):
    """Real faces (newton, the 1927 Solvay photo) aligned to the `role` model's own crop."""
    from vcamd.faces.calibration import faces_from_photos
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Recognizer
    from vcamd.inference.runtime import Sessions
    from vcamd.models.int8roles import calibration_crop

    sessions = Sessions(["cpu"], 1)
    return faces_from_photos([assets / "images" / "newton.png", assets / "images" / "solvay_conference_1927.png"],
                             FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", sessions), Recognizer(recognizer, sessions),
                             calibration_crop(role, model), limit=limit)


def _reduce_range() -> bool:
    from vcamd.inference.precision import int8_units, needs_reduced_range

    return needs_reduced_range(int8_units())


def _build(role: str, model: Path, assets: Path, recognizer: Path):
    from vcamd.models.quantize import build_checked

    return build_checked(model, recognizer, _faces(role, model, assets, recognizer), role=role, providers=["cpu"], threads=1,
                         reduce_range=_reduce_range())


def test_each_role_is_told_by_its_signature_and_calibrated_on_its_own_crop(tmp_path, assets):
    from vcamd.bench.int8standins import build_conv_parser, build_residual_enhancer
    from vcamd.bench.standins import build_enhancer, build_parser, build_swapper
    from vcamd.common.errors import ModelError
    from vcamd.faces.parse import PARSER_CROP
    from vcamd.faces.specs import ENHANCER_CROP, SWAPPERS
    from vcamd.models.int8roles import calibration_crop, role_of

    made = {"swapper": [build_swapper(tmp_path / "s.onnx")], "enhancer": [build_enhancer(tmp_path / "e.onnx"),
            build_residual_enhancer(tmp_path / "re.onnx")], "parser": [build_parser(tmp_path / "p.onnx"), build_conv_parser(tmp_path / "cp.onnx")]}
    assert {role: [role_of(m) for m in models] for role, models in made.items()} == {role: [role] * len(m) for role, m in made.items()}
    assert calibration_crop("swapper", made["swapper"][0]) == SWAPPERS[0].crop
    assert calibration_crop("enhancer", made["enhancer"][0]) == ENHANCER_CROP and calibration_crop("parser", made["parser"][0]) == PARSER_CROP
    assert role_of(assets / "models" / "scrfd_500m_kps.onnx") == "detector"
    with pytest.raises(ModelError, match="not a face swapper, enhancer, parser or detector"):
        role_of(assets / "models" / "mobilefacenet.onnx")


def test_an_enhancer_copy_that_keeps_the_face_passes_and_is_kept_under_the_enhancers_own_key(tmp_path, cache, assets, recognizer):
    from vcamd.bench.int8standins import build_residual_enhancer
    from vcamd.inference import int8cache
    from vcamd.inference.int8recipes import build_key
    from vcamd.inference.precision import role_choice

    model = build_residual_enhancer(tmp_path / "enhancer.onnx")
    before = role_choice("enhancer", "int8", model, [CPU])
    assert before.runs == "float" and before.build and "being built" in (before.why or "")
    built = _build("enhancer", model, assets, recognizer)
    assert built.passed and built.attempts[0].recipe.name.startswith("every"), built.kept.verdict.summary
    report = built.attempts[0].report
    assert isinstance(report, FidelityReport) and len(report.faces) == 6
    assert report.worst_psnr_db >= THRESHOLDS.psnr_db and report.worst_same_face >= THRESHOLDS.same_face
    assert built.kept.record["role"] == "enhancer" and built.kept.model is not None and built.kept.model.parent == cache / "int8"
    assert int8cache.lookup(model, build_key(_reduce_range(), "enhancer")) is not None
    assert int8cache.lookup(model, build_key(_reduce_range())) is None  # not the swapper's key: never taken for a swapper copy
    after = role_choice("enhancer", "int8", model, [CPU])
    assert after.runs == "int8" and after.copy == built.kept.model and "PSNR" in (after.why or "")


def test_an_enhancer_whose_activations_8_bits_cannot_hold_stays_float_and_says_why(tmp_path, cache, assets, recognizer):
    from vcamd.bench.int8standins import build_unquantizable_enhancer
    from vcamd.inference.int8recipes import RECIPES
    from vcamd.inference.precision import role_choice

    model = build_unquantizable_enhancer(tmp_path / "wide_enhancer.onnx")
    built = _build("enhancer", model, assets, recognizer)
    assert not built.passed and len(built.attempts) == len(RECIPES)
    for attempt in built.attempts:  # the restored face is no longer the float one's, to the recogniser too
        assert attempt.report.worst_psnr_db < 20.0 and attempt.report.worst_same_face < THRESHOLDS.same_face, attempt.report.summary()
    assert not list((cache / "int8").glob("*.onnx"))
    choice = role_choice("enhancer", "int8", model, [CPU])
    assert choice.runs == "float" and choice.failed_check and not choice.build
    assert "failed the fidelity check" in (choice.why or "") and "int8 face vs float face" in (choice.why or "")


def test_a_parser_copy_is_checked_on_its_class_maps_and_one_8_bits_cannot_hold_stays_float(tmp_path, cache, assets, recognizer):
    from vcamd.bench.int8standins import build_conv_parser
    from vcamd.inference.precision import role_choice

    good = build_conv_parser(tmp_path / "parser.onnx")
    built = _build("parser", good, assets, recognizer)
    assert built.passed and built.attempts[0].recipe.name.startswith("every"), built.kept.verdict.summary
    report = built.attempts[0].report
    assert isinstance(report, ParserReport) and len(report.faces) == 6
    assert report.worst_off_edge <= PARSER_THRESHOLDS.off_edge and min(f.face_pixels for f in report.faces) > 10_000
    assert role_choice("parser", "int8", good, [CPU]).runs == "int8"

    bad = build_conv_parser(tmp_path / "wide_parser.onnx", unquantizable=True)
    failed = _build("parser", bad, assets, recognizer)
    assert not failed.passed
    assert all(a.report.worst_off_edge > 0.2 and a.report.worst_visible_change > 0.5 for a in failed.attempts), failed.kept.verdict.summary
    choice = role_choice("parser", "int8", bad, [CPU])
    assert choice.runs == "float" and choice.failed_check and "changes class" in (choice.why or "")


def test_the_parser_check_lets_a_boundary_move_a_few_pixels_but_not_half_the_parsers_cell(assets, detector, solvay, newton, tmp_path):
    """Real faces' class maps (the conv stand-in on newton and Solvay faces): each map moved by 2 px
    passes the check against itself; by 6 px it fails; a face whose core is no longer seen fails on `visible`."""
    from vcamd.bench.int8standins import build_conv_parser
    from vcamd.faces.parse import FACE_CLASSES, PARSER_CROP, FaceParser, face_core
    from vcamd.inference.runtime import Sessions

    parser = FaceParser(build_conv_parser(tmp_path / "parser.onnx"), Sessions(["cpu"], 1))
    faces = [(newton, f) for f in detector.detect(newton)] + [(solvay, f) for f in sorted(detector.detect(solvay), key=lambda f: -f.area)[:3]]
    maps = parser.classes([PARSER_CROP.align(image, face.kps)[0] for image, face in faces])
    core = face_core(PARSER_CROP)

    def moved(k: int) -> list[np.ndarray]:
        return [np.pad(m, ((0, 0), (k, 0)), mode="edge")[:, :-k] for m in maps]

    assert compare_parses(maps, maps, FACE_CLASSES, core).worst_off_edge == 0.0
    near = compare_parses(maps, moved(2), FACE_CLASSES, core)
    assert near.passed and near.worst_agreement < 1.0, near.summary()
    far = compare_parses(maps, moved(6), FACE_CLASSES, core)
    assert not far.passed and "changes class" in far.summary()
    blind = [m.copy() for m in maps]
    blind[0][core] = 0  # the newton face's core seen as background
    assert any("core seen as face changes" in f for f in compare_parses(maps, blind, FACE_CLASSES, core).failures())


def test_the_pipeline_runs_each_kept_copy_and_status_says_each_roles_precision(tmp_path, cache, assets, recognizer):
    """Kept copies of the enhancer (passed) and the parser (failed): the next start runs the enhancer's
    copy and the parser in float, and `precision_status` says so per role, with why."""
    from vcamd.bench.int8standins import build_conv_parser, build_residual_enhancer
    from vcamd.bench.standins import build_swapper
    from vcamd.config.reading import config_from_dict
    from vcamd.live.loading import load_face_pipeline

    enhancer = build_residual_enhancer(tmp_path / "enhancer.onnx")
    parser = build_conv_parser(tmp_path / "wide_parser.onnx", unquantizable=True)
    _build("enhancer", enhancer, assets, recognizer)
    _build("parser", parser, assets, recognizer)
    cfg = config_from_dict({"models": {"detector": str(assets / "models" / "scrfd_500m_kps.onnx"), "recognizer": str(recognizer),
                                       "swapper": str(build_swapper(tmp_path / "swapper.onnx")), "enhancer": str(enhancer),
                                       "parser": str(parser), "precision": "int8", "providers": ["cpu"], "threads": 1},
                            "enhancer": {"enabled": True},
                            "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True}})
    faces, _ = load_face_pipeline(cfg)
    assert faces.sessions.runs_copy(enhancer) and not faces.sessions.runs_copy(parser)
    runs, why = faces.precision_status()
    assert runs["enhancer"] == "int8" and runs["parser"] == "float" and runs["detector"] == "float"
    assert runs["swapper"] == "float" and "being built" in why["swapper"]
    assert "PSNR" in why["enhancer"] and "failed the fidelity check" in why["parser"]
    assert faces.precisions["parser"].failed_check and not faces.precisions["parser"].build
    faces.set_enhancer(False, 0.8)
    assert "enhancer" not in faces.precision_status()[0]
    off = load_face_pipeline(cfg.model_copy(update={"enhancer": cfg.enhancer.model_copy(update={"enabled": False})}))[0]
    assert "enhancer" not in off.precisions
    off.set_enhancer(True, 0.8)  # switched on while running (hot reload): loaded, and said to run in float
    assert off.precision_status()[0]["enhancer"] == "float"


def test_models_quantize_covers_the_configs_roles_and_names_the_one_that_stays_float(tmp_path, assets, recognizer):
    from vcamd.bench.int8standins import build_conv_parser, build_residual_enhancer
    from vcamd.bench.standins import build_swapper

    env = {**os.environ, "VCAMD_CACHE_DIR": str(tmp_path / "cache")}
    config = tmp_path / "config.toml"
    config.write_text(f'[models]\ndetector = "{assets / "models" / "scrfd_500m_kps.onnx"}"\nrecognizer = "{recognizer}"\n'
                      f'swapper = "{build_swapper(tmp_path / "swapper.onnx", heavy_convs=1)}"\n'
                      f'enhancer = "{build_residual_enhancer(tmp_path / "enhancer.onnx")}"\n'
                      f'parser = "{build_conv_parser(tmp_path / "wide_parser.onnx", unquantizable=True)}"\nthreads = 1\n'
                      f'[enhancer]\nenabled = true\n[swap]\nsource_face = "{assets / "images" / "newton.png"}"\n')
    proc = run_vcamd("models", "quantize", "--config", config, env=env, timeout=300)
    one_clear_line(proc, "wide_parser.onnx (parser)", "failed the fidelity check")
    out = proc.stdout
    for role in ("swapper swapper.onnx", "enhancer enhancer.onnx", "parser wide_parser.onnx", "detector scrfd_500m_kps.onnx"):
        assert f"{role}: int8 copy calibrated and checked on" in out
    detector_passed = "the detector runs in int8" in out  # SCRFD-500M's copy is seldom faster: its verdict is this machine's
    assert out.count("passed: kept at") == 2 + detector_passed and "the enhancer runs in int8" in out and "the parser runs in float" in out
    assert "detector scrfd_500m_kps.onnx: int8 copy calibrated and checked on 1 photo" in out and "extra sure / near" in out
    assert "same class / other class off the edges" in out and "face   PSNR dB" in out

    alone = run_vcamd("models", "quantize", tmp_path / "enhancer.onnx", "--config", config, env=env, timeout=300)
    assert alone.returncode == 0 and "enhancer enhancer.onnx" in alone.stdout and "already built and checked" in alone.stdout
    assert "swapper.onnx" not in alone.stdout

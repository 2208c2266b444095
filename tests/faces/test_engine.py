"""FaceEngine: the whole per-frame path on real photos with real SCRFD and stand-in swap models."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.errors import ConfigError, FaceError, VcamdError
from vcamd.common.quality import Level
from vcamd.common.types import Face, Frame
from vcamd.config.reading import config_from_dict
from vcamd.config.schema import Config
from vcamd.faces.align import estimate_affine
from vcamd.faces.engine import FaceEngine, require_consent
from vcamd.faces.footprint import paste_region
from vcamd.models.pipeline import build_face_engine


def _config(standins, assets: Path, **sections: dict) -> Config:  # type: ignore[no-untyped-def]
    data = {
        "models": {
            "detector": str(standins.detector),
            "recognizer": str(standins.recognizer),
            "swapper": str(standins.swapper),
            "enhancer": str(standins.enhancer),
            "providers": ["cpu"],
            "threads": 1,
        },
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return config_from_dict(data)


@pytest.fixture(scope="module")
def engine(standins, assets, sessions) -> FaceEngine:  # type: ignore[no-untyped-def]
    return build_face_engine(_config(standins, assets), sessions)


@pytest.fixture(scope="module")
def enhancing_engine(standins, assets, sessions) -> FaceEngine:  # type: ignore[no-untyped-def]
    return build_face_engine(_config(standins, assets, enhancer={"enabled": True, "strength": 1.0}), sessions)


def test_process_frame_swaps_the_face_and_touches_nothing_else(engine: FaceEngine, newton: Frame, newton_face: Face) -> None:
    frame = newton.copy()
    result = engine.process_frame(frame)
    assert result.frame is frame
    assert result.swapped == 1 and len(result.faces) == 1
    assert set(result.stage_ms) >= {"detect", "select", "align", "swap", "enhance", "blend"}
    assert result.stage_ms["enhance"] == 0.0  # no enhancer configured
    region = paste_region(frame.shape, (128, 128), estimate_affine(newton_face.kps, 128))
    assert region is not None
    inside = np.zeros(frame.shape[:2], bool)
    inside[region.y0 : region.y1, region.x0 : region.x1] = True
    assert np.array_equal(frame[~inside], newton[~inside])
    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    assert np.abs(frame[y1:y2, x1:x2].astype(np.int16) - newton[y1:y2, x1:x2]).mean() > 20


def test_the_enhancer_runs_at_full_quality_and_is_skipped_from_no_enhancer_down(enhancing_engine: FaceEngine, engine: FaceEngine, newton: Frame) -> None:
    full = enhancing_engine.process_frame(newton.copy(), Level.full)
    assert full.stage_ms["enhance"] > 0
    skipped = enhancing_engine.process_frame(newton.copy(), Level.no_enhancer)
    assert skipped.stage_ms["enhance"] == 0.0
    plain = engine.process_frame(newton.copy(), Level.full)
    assert np.array_equal(skipped.frame, plain.frame), "at no_enhancer the result is the plain swap"
    assert not np.array_equal(full.frame, plain.frame)


def test_low_res_level_detects_at_a_smaller_input(engine: FaceEngine) -> None:
    assert engine.detect_size(Level.full) == 640
    assert engine.detect_size(Level.no_enhancer) == 640
    assert engine.detect_size(Level.low_res) == 320
    assert engine.detect_size(Level.frame_skip) == 320


def test_a_swapped_face_recomposites_at_the_face_s_new_position(engine: FaceEngine, newton: Frame, newton_face: Face) -> None:
    swapped = engine.swap_faces(newton, [newton_face])
    assert len(swapped) == 1 and swapped[0].crop.shape == (128, 128, 3) and swapped[0].template == "arcface"
    here = newton.copy()
    engine.composite(here, swapped[0], newton_face)
    # The camera moved: the same picture 37 px right and 11 px down. Composite the SAME crop there.
    dx, dy = 37, 11
    shift = np.float32([[1, 0, dx], [0, 1, dy]])
    height, width = newton.shape[:2]
    moved_frame = cv2.warpAffine(newton, shift, (width, height))
    moved_face = Face((newton_face.box[0] + dx, newton_face.box[1] + dy, newton_face.box[2] + dx, newton_face.box[3] + dy), newton_face.score, newton_face.kps + np.float32([dx, dy]))
    engine.composite(moved_frame, swapped[0], moved_face)
    diff = np.abs(moved_frame[dy:, dx:].astype(np.int16) - here[: height - dy, : width - dx])
    assert diff.max() <= 2


def test_enhanced_swaps_are_512_ffhq_crops(enhancing_engine: FaceEngine, newton: Frame, newton_face: Face) -> None:
    swapped = enhancing_engine.swap_faces(newton, [newton_face], Level.full)
    assert swapped[0].crop.shape == (512, 512, 3) and swapped[0].enhanced
    plain = enhancing_engine.swap_faces(newton, [newton_face], Level.no_enhancer)
    assert plain[0].crop.shape == (128, 128, 3) and not plain[0].enhanced


def test_source_face_is_embedded_once_and_again_only_when_it_changes(standins, assets, sessions, tmp_path: Path, newton: Frame) -> None:  # type: ignore[no-untyped-def]
    photo = tmp_path / "me.png"
    shutil.copy(assets / "images" / "newton.png", photo)
    engine = build_face_engine(_config(standins, assets, swap={"source_face": str(photo)}), sessions)
    first = engine.source
    assert first is not None
    assert engine.set_source_face(photo) is first  # same file: no new embedding
    # A different photo under the same name: re-embedded.
    cv2.imwrite(str(photo), cv2.flip(newton, 1))
    second = engine.set_source_face(photo)
    assert second is not first
    assert float(second.embedding @ first.embedding) < 0.999


def test_a_bad_source_face_keeps_the_old_one(engine: FaceEngine, tmp_path: Path) -> None:
    before = engine.source
    blank = tmp_path / "wall.png"
    cv2.imwrite(str(blank), np.full((200, 200, 3), 128, np.uint8))
    with pytest.raises(FaceError, match="no face found in source face"):
        engine.set_source_face(blank)
    with pytest.raises(FaceError, match="does not exist"):
        engine.set_source_face(tmp_path / "missing.png")
    assert engine.source is before


def test_without_a_source_face_processing_is_refused(standins, assets, sessions, newton: Frame) -> None:  # type: ignore[no-untyped-def]
    cfg = _config(standins, assets, swap={"source_face": None})
    engine = build_face_engine(cfg, sessions)
    with pytest.raises(FaceError, match="no source face"):
        engine.process_frame(newton.copy())


def test_selection_all_swaps_every_face_and_reference_picks_the_matching_one(standins, assets, sessions, tmp_path: Path, solvay: Frame, solvay_largest_faces: list[Face]) -> None:  # type: ignore[no-untyped-def]
    # A strip of the Solvay photo with several people in it.
    ys = [f.box[1] for f in solvay_largest_faces] + [f.box[3] for f in solvay_largest_faces]
    top, bottom = max(0, int(min(ys)) - 60), int(max(ys)) + 60
    strip = np.ascontiguousarray(solvay[top:bottom])
    engine_all = build_face_engine(_config(standins, assets, swap={"face_selection": "all"}), sessions)
    faces = engine_all.detect(strip, 1280)
    assert len(faces) >= 3
    assert len(engine_all.select(faces, strip)) == len(faces)
    assert engine_all.process_frame(strip.copy()).swapped >= 3  # detect at 640 may miss the smallest

    # The reference photo: a crop around one of those faces.
    wanted = faces[len(faces) // 2]
    x1, y1, x2, y2 = (int(v) for v in wanted.box)
    pad = int(wanted.width)
    reference = tmp_path / "reference.png"
    cv2.imwrite(str(reference), strip[max(0, y1 - pad) : y2 + pad, max(0, x1 - pad) : x2 + pad])
    engine_ref = build_face_engine(_config(standins, assets, swap={"face_selection": "reference", "reference_face": str(reference)}), sessions)
    picked = engine_ref.select(faces, strip)
    assert len(picked) == 1 and picked[0].box == wanted.box


def test_reference_selection_without_a_reference_photo_is_a_config_error(standins, assets, sessions) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="reference_face"):
        build_face_engine(_config(standins, assets, swap={"face_selection": "reference"}), sessions)


def test_consent_is_required(standins, assets) -> None:  # type: ignore[no-untyped-def]
    refused = _config(standins, assets, swap={"source_consent": False})
    with pytest.raises(VcamdError, match="consent") as err:
        require_consent(refused, flag=False)
    assert "source_consent = true" in str(err.value) and "--i-have-consent" in str(err.value)
    require_consent(refused, flag=True)
    require_consent(_config(standins, assets), flag=False)


def test_the_swapper_loads_on_its_own_thread_beside_the_rest(standins, assets) -> None:  # type: ignore[no-untyped-def]
    """The swapper's session is created off the calling thread (`swapper-load`) and waits there
    (the test seam) until `warm_up` ran with the detector on the calling thread: were the parts
    loaded one after the other, the warm-up could not come first. The source face is embedded
    beside it too."""
    from vcamd.inference.runtime import Sessions

    warmed = threading.Event()
    loaded_on: dict[str, str] = {}
    niceness: dict[str, int] = {}
    intra_op: dict[str, int] = {}

    def wrap(session, path: Path):
        loaded_on[path.name] = threading.current_thread().name
        niceness[path.name] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        intra_op[path.name] = session.get_session_options().intra_op_num_threads
        if path.name == standins.swapper.name:
            assert warmed.wait(60), "the warm-up did not run while the swapper was loading"
        return session

    def warm_up(detector) -> None:
        assert detector.detect(np.zeros((64, 64, 3), np.uint8), 64) == []
        warmed.set()

    cfg = _config(standins, assets)
    engine = build_face_engine(cfg, Sessions(["cpu"], threads=0, wrap=wrap), warm_up=warm_up)
    assert loaded_on[standins.swapper.name] == "swapper-load"
    assert loaded_on[standins.detector.name] == threading.current_thread().name
    # The swap worker's model leaves the loop a core, at the loop's priority: a lower one starved it
    # against every other program (a call app) at normal priority. Where threads can choose their
    # cores its session has a thread per core, its pool pinned off the loop's (`vcamd.inference.cores`).
    from vcamd.inference.cores import core_split

    cores = os.cpu_count() or 1
    assert intra_op[standins.detector.name] == cores
    split = core_split(0)
    assert intra_op[standins.swapper.name] == (split.threads if split is not None else max(1, cores - 1))
    assert engine.core_split == split
    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert niceness[standins.detector.name] == niceness[standins.swapper.name] == caller
    assert engine.source is not None and engine.process_frame(cv2.imread(str(assets / "images" / "newton.png"))).swapped == 1


@pytest.mark.parametrize(("threads", "cores", "helper"), [(2, 2, 1), (1, 2, 1), (1, 1, 1), (8, 8, 7), (4, 16, 4)])
def test_a_model_beside_the_loop_leaves_it_a_core(threads: int, cores: int, helper: int) -> None:
    from vcamd.inference.runtime import helper_threads

    assert helper_threads(threads, cores) == helper


def _broken(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(bytes(range(256)) * 64)
    return path


@pytest.mark.parametrize("broken", ["detector", "recognizer", "swapper"])
def test_a_model_that_fails_beside_the_others_is_the_one_error(standins, assets, tmp_path: Path, broken: str) -> None:  # type: ignore[no-untyped-def]
    from vcamd.common.errors import ModelError
    from vcamd.inference.runtime import Sessions

    path = _broken(tmp_path, f"broken_{broken}.onnx")
    cfg = _config(standins, assets, models={broken: str(path)})
    with pytest.raises(ModelError) as info:
        build_face_engine(cfg, Sessions(["cpu"], threads=1))
    assert path.name in str(info.value) and "\n" not in info.value.message


def test_the_swapper_s_error_comes_before_the_source_face_s(standins, assets, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """As the parts are listed: a broken swapper is reported, not the photo without a face that was
    read beside it; with a good swapper the photo's error is the one."""
    from vcamd.common.errors import ModelError
    from vcamd.inference.runtime import Sessions

    wall = tmp_path / "wall.png"
    cv2.imwrite(str(wall), np.full((200, 200, 3), 128, np.uint8))
    swapper = _broken(tmp_path, "broken_swapper.onnx")
    with pytest.raises(ModelError, match="broken_swapper.onnx"):
        build_face_engine(_config(standins, assets, models={"swapper": str(swapper)}, swap={"source_face": str(wall)}), Sessions(["cpu"], threads=1))
    with pytest.raises(FaceError, match="no face found in source face"):
        build_face_engine(_config(standins, assets, swap={"source_face": str(wall)}), Sessions(["cpu"], threads=1))

"""The face parser keeps what is in front of the face in front (vcamd/faces/parse.py): a hand over a
real portrait stays the camera's hand, the rest of the face is swapped; with too little of the face
in view the face is covered, never shown raw. The parser is the rule-based stand-in with the real
signature (`standins.build_parser`: skin by colour), the hand a synthetic one of another colour."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.bench.hands import with_hand
from vcamd.common.errors import ModelError
from vcamd.common.quality import Level
from vcamd.config.reading import config_from_dict
from vcamd.faces.engine import FaceEngine
from vcamd.faces.parse import FaceParser, region_mask
from vcamd.models.pipeline import build_face_engine


@pytest.fixture(scope="module")
def parser_model(tmp_path_factory) -> Path:
    from vcamd.bench.standins import build_parser

    return build_parser(tmp_path_factory.mktemp("parser") / "parser_rule.onnx")


def _engine(standins, assets: Path, sessions, parser: Path | None, **mask) -> FaceEngine:
    cfg = config_from_dict({
        "models": {"detector": str(standins.detector), "recognizer": str(standins.recognizer), "swapper": str(standins.swapper),
                   "parser": str(parser) if parser else "", "providers": ["cpu"], "threads": 1},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
        "mask": mask,
    })
    return build_face_engine(cfg, sessions)


def test_a_hand_in_front_of_the_face_stays_in_front_and_the_rest_is_swapped(standins, assets, sessions, parser_model, newton, newton_face):
    frame, hand = with_hand(newton, newton_face, reach=0.35)
    engine = _engine(standins, assets, sessions, parser_model)
    [swapped] = engine.swap_faces(frame, [newton_face], Level.no_enhancer)
    assert swapped.shown and swapped.keep is not None
    out = frame.copy()
    engine.composite(out, swapped, newton_face)
    inner_hand = cv2.erode(hand.astype(np.uint8), np.ones((7, 7), np.uint8)).astype(bool)
    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    in_face = np.zeros_like(hand)
    in_face[y1:y2, x1:x2] = True
    # the hand over the face: the camera's own pixels, to the grey level
    assert np.abs(out[inner_hand & in_face].astype(int) - frame[inner_hand & in_face]).max() <= 1
    # the face beside the hand: swapped (the stand-in changes it visibly)
    cheek = in_face & ~cv2.dilate(hand.astype(np.uint8), np.ones((15, 15), np.uint8)).astype(bool)
    cheek[: int(y1 + 0.3 * (y2 - y1))] = False  # below the hair line
    assert np.abs(out[cheek].astype(int) - frame[cheek]).mean() > 15
    # without the parser the swap is pasted over the hand (what other tools show)
    plain = _engine(standins, assets, sessions, None)
    [over] = plain.swap_faces(frame, [newton_face], Level.no_enhancer)
    assert over.keep is None
    covered = frame.copy()
    plain.composite(covered, over, newton_face)
    assert np.abs(covered[inner_hand & in_face].astype(int) - frame[inner_hand & in_face]).mean() > 15


def test_with_most_of_the_face_hidden_it_is_covered_never_shown_raw(standins, assets, sessions, parser_model, newton, newton_face):
    frame, _hand = with_hand(newton, newton_face, reach=0.95)
    engine = _engine(standins, assets, sessions, parser_model)
    [swapped] = engine.swap_faces(frame, [newton_face], Level.no_enhancer)
    assert not swapped.shown
    # the live worker gives no swap for it (compose then holds or obscures it, by on_miss) ...
    from vcamd.live.measures.stats import LiveStats
    from vcamd.live.swapworker import SwapJob, SwapWorker

    worker = SwapWorker(engine, LiveStats(), lambda: 0.0)
    result = worker._work(SwapJob(frame, [newton_face], [newton_face], Level.no_enhancer, 0.0))
    assert result is not None and result.swapped == [None]
    # ... and `vcamd swap` (process_frame) obscures it: the face is neither raw nor left as it was
    out = engine.process_frame(frame.copy(), Level.no_enhancer).frame
    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    face_now, face_before = out[y1:y2, x1:x2].astype(int), frame[y1:y2, x1:x2].astype(int)
    assert np.abs(face_now - face_before).mean() > 15
    # the face in view again: pasted
    [back] = engine.swap_faces(newton, [newton_face], Level.no_enhancer)
    assert back.shown


def test_regions_choose_the_classes_and_the_mask_stays_inside_them():
    classes = np.zeros((512, 512), np.uint8)
    classes[100:400, 100:400] = 1  # skin
    classes[200:260, 150:350] = 6  # glasses
    without = region_mask(classes, ["skin"], 512)
    with_glasses = region_mask(classes, ["skin", "glasses"], 512)
    assert without[230, 250] == 0.0 and with_glasses[230, 250] == 1.0  # glasses in front unless chosen
    assert without[300, 250] == 1.0
    assert without[:100].max() == 0.0 and without[:, 400:].max() == 0.0  # never past the region
    assert 0.0 < without[103, 250] < 1.0  # soft just inside its edge
    small = region_mask(classes, ["skin"], 128)
    assert small.shape == (128, 128) and small.dtype == np.float32


def test_a_model_that_is_no_face_parser_is_a_clear_error(standins, sessions):
    with pytest.raises(ModelError, match="not a face parser") as err:
        FaceParser(standins.swapper, sessions, ["skin"], 0.6)
    assert err.value.fix and "parser" in err.value.fix


def test_the_parser_is_a_model_the_config_uses_only_when_named(tmp_path):
    from vcamd.modelstore.roles import roles_in_use
    from vcamd.modelstore.store import ModelStore

    assert "parser" not in [role.name for role in roles_in_use(config_from_dict({}))]
    cfg = config_from_dict({"models": {"parser": "bisenet_resnet_34", "dir": str(tmp_path)}})
    assert roles_in_use(cfg)[-1].name == "parser"
    with pytest.raises(ModelError) as err:  # named but not downloaded: the fix says how to get it
        ModelStore.from_config(cfg.models).path_for("bisenet_resnet_34", "parser")
    assert "vcamd models pull bisenet_resnet_34" in (err.value.fix or "")

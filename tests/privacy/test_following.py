"""FollowedFace (face_selection = "largest" keeps the face it chose) and `[swap] others` in
`FaceEngine.process_frame`, on frames made of real photos: the user (Newton, a face 146 px high)
and a larger real face (315 px, from crowd_selfie.jpg), found by the real SCRFD and told apart by
the real MobileFaceNet. The end-to-end run through `vcamd run` is test_selection_e2e.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.bench import leaks
from vcamd.common.types import Face, Frame
from vcamd.config.reading import config_from_dict
from vcamd.config.schema import FaceSelection
from vcamd.faces.detect import FaceDetector
from vcamd.faces.following import IDENTITY_RETRY_FRAMES, RELEASE_FRAMES, FollowedFace
from vcamd.faces.identity import Recognizer
from vcamd.inference.runtime import Sessions
from vcamd.models.pipeline import build_face_engine

WIDTH, HEIGHT = 1280, 720


@dataclass
class Heads:
    detector: FaceDetector
    recognizer: Recognizer
    user: tuple[Frame, tuple[float, float]]
    larger: tuple[Frame, tuple[float, float]]

    def frame(self, user_at: float | None, larger_at: float | None) -> tuple[Frame, list[Face]]:
        """The user and the larger face centred at these shares of the width (None: not in view),
        and the faces the detector finds, left to right."""
        frame = np.full((HEIGHT, WIDTH, 3), leaks.BACKGROUND, np.uint8)
        for (head, (hx, hy)), at in ((self.user, user_at), (self.larger, larger_at)):
            if at is not None:
                leaks.paste(frame, head, int(at * WIDTH - hx), int(HEIGHT / 2 - hy))
        faces = sorted((f for f in self.detector.detect(frame) if f.score >= 0.5), key=lambda f: f.box[0])
        assert len(faces) == (user_at is not None) + (larger_at is not None)
        return frame, faces


@dataclass
class Selecting:
    """What FollowedFace asks of the face engine: the selection, the recogniser, `select`."""

    recognizer: Recognizer
    selection: FaceSelection = FaceSelection.largest

    def select(self, faces: list[Face], frame: Frame) -> list[Face]:
        """FaceEngine's rule: the largest under "largest", every face under "all"."""
        return [max(faces, key=lambda f: f.area)] if self.selection is FaceSelection.largest else list(faces)


@pytest.fixture(scope="module")
def heads(assets: Path) -> Heads:
    sessions = Sessions(["cpu"], threads=2)
    detector = FaceDetector(assets / "models" / "scrfd_2.5g_kps.onnx", sessions)
    recognizer = Recognizer(assets / "models" / "mobilefacenet.onnx", sessions)
    newton = cv2.imread(str(assets / "images" / "newton.png"))
    crowd = cv2.imread(str(assets / "images" / "crowd_selfie.jpg"))
    crowd_faces = sorted(detector.detect(crowd), key=lambda f: -f.area)
    return Heads(detector, recognizer, leaks.head_cut(newton, detector.detect(newton)[0], HEIGHT / 5),
                 leaks.head_cut(crowd, crowd_faces[3], HEIGHT / 2.6, margin=(0.8, 0.75)))


def _is(face: Face, other: Face) -> bool:
    return face.box == other.box


def test_a_larger_face_coming_into_view_never_takes_the_swap(heads: Heads) -> None:
    engine, follow = Selecting(heads.recognizer), FollowedFace()
    frame, (user,) = heads.frame(0.25, None)
    assert follow.select(engine, [user], frame, 0) == [user]
    for index, larger_at in enumerate((0.95, 0.85, 0.72), start=1):  # sliding in from the edge
        frame, faces = heads.frame(0.25, larger_at)
        assert faces[1].area > 3 * faces[0].area
        assert [_is(f, faces[0]) for f in follow.select(engine, faces, frame, index)] == [True]
    # Gone for a frame, then back at once; then the user moves to where the larger face was, and
    # the larger one to where the user was: places cannot say, who they are does.
    frame, faces = heads.frame(0.25, None)
    assert _is(follow.select(engine, faces, frame, 4)[0], faces[0])
    frame, faces = heads.frame(0.25, 0.72)
    assert _is(follow.select(engine, faces, frame, 5)[0], faces[0])
    frame, faces = heads.frame(0.72, 0.25)
    assert [_is(f, faces[1]) for f in follow.select(engine, faces, frame, 6)] == [True]


def test_while_the_user_is_gone_nothing_is_swapped_and_the_lock_ends_after_release_frames(heads: Heads) -> None:
    engine, follow = Selecting(heads.recognizer), FollowedFace()
    frame, (user,) = heads.frame(0.25, None)
    follow.select(engine, [user], frame, 0)
    alone, (larger,) = heads.frame(None, 0.72)
    for index in range(1, RELEASE_FRAMES + 1):
        assert follow.select(engine, [larger], alone, index) == []  # the larger face is not the user
    assert follow.select(engine, [larger], alone, RELEASE_FRAMES + 1) == [larger]  # chosen anew


def test_the_user_coming_back_elsewhere_is_found_again_by_identity(heads: Heads) -> None:
    engine, follow = Selecting(heads.recognizer), FollowedFace()
    frame, (user,) = heads.frame(0.25, None)
    follow.select(engine, [user], frame, 0)
    alone, (larger,) = heads.frame(None, 0.72)
    assert follow.select(engine, [larger], alone, 1) == []
    back, faces = heads.frame(0.6, 0.85)
    found = [follow.select(engine, faces, back, index) for index in range(2, 2 + IDENTITY_RETRY_FRAMES)]
    assert found[-1] and _is(found[-1][0], faces[0])
    assert all(not f or _is(f[0], faces[0]) for f in found)


def test_the_other_selections_are_left_to_the_face_engine(heads: Heads) -> None:
    frame, faces = heads.frame(0.25, 0.72)
    assert FollowedFace().select(Selecting(heads.recognizer, FaceSelection.all), faces, frame, 0) == faces


@pytest.mark.parametrize("others", ["obscure", "show"])
def test_vcamd_swap_obscures_the_faces_it_does_not_swap_unless_asked_to_show_them(heads: Heads, standins, assets: Path, sessions,
                                                                                   others: str) -> None:
    cfg = config_from_dict({
        "models": {"detector": str(assets / "models" / "scrfd_2.5g_kps.onnx"), "recognizer": str(standins.recognizer),
                   "swapper": str(standins.swapper), "providers": ["cpu"], "threads": 1},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True, "others": others},
    })
    engine = build_face_engine(cfg, sessions)
    raw, (smaller, larger) = heads.frame(0.25, 0.72)
    frame = raw.copy()
    result = engine.process_frame(frame)  # a photo: the largest face is swapped
    assert result.swapped == 1
    assert float(heads.recognizer.embed(frame, larger) @ heads.recognizer.embed(raw, larger)) < 0.9
    cosine = float(heads.recognizer.embed(frame, smaller) @ heads.recognizer.embed(raw, smaller))
    if others == "obscure":
        assert cosine <= leaks.MAX_COSINE, f"the face not swapped is still recognisable (cosine {cosine:.2f})"
    else:
        x0, y0, x1, y1 = (int(v) for v in smaller.box)
        assert np.array_equal(frame[y0:y1, x0:x1], raw[y0:y1, x0:x1])


def test_a_face_pipeline_rebuilt_with_the_same_recogniser_keeps_the_lock(heads: Heads) -> None:
    """A reload that rebuilds the pipeline for another key (mouth_mask, the detector) builds a new
    recogniser object from the same model: the user keeps the swap."""
    follow = FollowedFace()
    frame, (user,) = heads.frame(0.25, None)
    follow.select(Selecting(heads.recognizer), [user], frame, 0)
    rebuilt = Selecting(Recognizer(heads.recognizer.path, Sessions(["cpu"], threads=1)))
    frame, faces = heads.frame(0.25, 0.72)
    assert [_is(f, faces[0]) for f in follow.select(rebuilt, faces, frame, 1)] == [True]

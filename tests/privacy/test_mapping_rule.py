"""The privacy rule with a face map (`Scene.sources`, `Held.sources`): each target wants one source;
a swap made from another source is never pasted on it, and a cover holds the last good output only
where that output showed the same source there. A face whose identity is not known (UNKNOWN_SOURCE),
a lost face and an unsure place are obscured, never held. Checked by pixels: each source pastes its
own colour, so a face showing another person's source is seen in the published frame."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vcamd.common.types import Face, Frame
from vcamd.config.schema import OnMiss
from vcamd.privacy.rule import UNKNOWN_SOURCE, FaceOutcome, Held, Scene, compose

W, H, CELL = 480, 120, 120
COLOURS = {"x": (0, 0, 255), "y": (255, 0, 0), "z": (0, 255, 0)}


@dataclass(frozen=True)
class Swapped:
    source: str


def face_at(cell: int, dx: int = 0) -> Face:
    x0 = cell * CELL + 40 + dx
    return Face(box=(x0, 40, x0 + 40, 80), score=0.9, kps=np.array([[x0 + 12, 52], [x0 + 28, 52], [x0 + 20, 60], [x0 + 14, 70], [x0 + 26, 70]], np.float32))


def paste(frame: Frame, swapped: Swapped, face: Face) -> None:
    x0, y0, x1, y1 = (int(v) for v in face.box)
    frame[y0:y1, x0:x1] = COLOURS[swapped.source]


def camera() -> Frame:
    rng = np.random.default_rng(0)
    return rng.integers(100, 140, (H, W, 3), dtype=np.uint8)  # no source's colour anywhere


def shown_source(frame: Frame, face: Face) -> str | None:
    x0, y0, x1, y1 = (int(v) for v in face.box)
    centre = frame[(y0 + y1) // 2, (x0 + x1) // 2]
    return next((name for name, colour in COLOURS.items() if tuple(int(c) for c in centre) == colour), None)


def held_frame(faces: list[Face], sources: list[str]) -> Held:
    frame = camera()
    for face, source in zip(faces, sources):
        paste(frame, Swapped(source), face)
    return Held(frame, faces, tuple(sources))


def test_a_swap_of_another_source_is_not_pasted_and_the_face_is_covered() -> None:
    faces = [face_at(0), face_at(1)]
    scene = Scene(frame=camera(), enabled=True, on_miss=OnMiss.blur, known=True, targets=faces,
                  swaps=[Swapped("y"), Swapped("y")], sources=["x", "y"])
    composed = compose(scene, paste)
    assert composed.faces == [FaceOutcome.obscured, FaceOutcome.swapped]
    assert [shown_source(composed.frame, f) for f in faces] == [None, "y"]


def test_a_cover_holds_only_the_same_source_and_an_unknown_face_is_never_held() -> None:
    faces = [face_at(0), face_at(1), face_at(2)]
    held = held_frame(faces, ["x", "y", "x"])
    scene = Scene(frame=camera(), enabled=True, on_miss=OnMiss.hold, known=True, targets=faces,
                  swaps=[None, None, None], sources=["x", "x", UNKNOWN_SOURCE], held=held, lost=[face_at(3)])
    composed = compose(scene, paste)
    assert composed.faces == [FaceOutcome.held, FaceOutcome.obscured, FaceOutcome.obscured, FaceOutcome.obscured]
    assert [shown_source(composed.frame, f) for f in faces] == ["x", None, None]


def test_without_a_map_nothing_changes() -> None:
    faces = [face_at(0)]
    held = held_frame(faces, ["x"])
    composed = compose(Scene(frame=camera(), enabled=True, on_miss=OnMiss.hold, known=True, targets=faces, swaps=[None], held=held), paste)
    assert composed.faces == [FaceOutcome.held]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["x", "y", "z", UNKNOWN_SOURCE]), st.sampled_from([None, "x", "y", "z"]),
                          st.sampled_from([None, "x", "y", "z"]), st.integers(-8, 8)), min_size=1, max_size=4),
       st.sampled_from([OnMiss.hold, OnMiss.blur]))
def test_no_face_ever_shows_a_source_it_does_not_want(cases, on_miss: OnMiss) -> None:
    """Any wants, any swaps (or none), any last good output (each face's place showing any source,
    moved a little since): a face shows the source it wants, or none."""
    faces = [face_at(i, dx) for i, (_, _, _, dx) in enumerate(cases)]
    held_at = [(face_at(i), h) for i, (_, _, h, _) in enumerate(cases) if h is not None]
    held = held_frame([f for f, _ in held_at], [h for _, h in held_at]) if held_at else None
    scene = Scene(frame=camera(), enabled=True, on_miss=on_miss, known=True, targets=faces,
                  swaps=[Swapped(s) if s else None for _, s, _, _ in cases], sources=[w for w, _, _, _ in cases], held=held)
    composed = compose(scene, paste)
    for face, (want, _, _, _) in zip(faces, cases):
        assert shown_source(composed.frame, face) in (want, None)


def test_the_covers_rectangles_in_one_array_pass_are_regions_own_integers():
    """`_cover` takes a crowd's rectangles from `regions` (one array computation): the same
    integers `region` gives face by face, at the frame's edges and past them too."""
    from vcamd.privacy.rule import region, regions

    rng = np.random.default_rng(0)
    frame = np.zeros((1080, 1920, 3), np.uint8)
    covers = []
    for _ in range(3000):
        x, y, s = rng.uniform(-80, 1960), rng.uniform(-80, 1120), rng.uniform(1, 300)
        face = Face(box=(x, y, x + s, y + s * rng.uniform(0.8, 1.4)), score=0.5, kps=np.zeros((5, 2), np.float32))
        covers.append((face, float(rng.choice([1.3, 2.0, 2.6]))))
    assert regions(frame, covers) == [region(frame, [face], scale) for face, scale in covers]
    assert regions(frame, []) == []

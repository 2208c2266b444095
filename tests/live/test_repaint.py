"""`output.repaint.Repaint`: the last frame's covers and swaps put back where nothing they depend on
changed — the same picture as drawing them again, or more covered, never less."""

from __future__ import annotations

import numpy as np

from vcamd.common.types import Face
from vcamd.config.schema import OnMiss
from vcamd.faces.footprint import PasteRegion
from vcamd.live.output.repaint import Repaint
from vcamd.privacy.rule import Held, Scene, compose

H, W = 240, 320


def _face(x: float, y: float, size: float = 30.0) -> Face:
    kps = np.array([[x + 0.3 * size, y + 0.4 * size], [x + 0.7 * size, y + 0.4 * size], [x + 0.5 * size, y + 0.6 * size],
                    [x + 0.35 * size, y + 0.8 * size], [x + 0.65 * size, y + 0.8 * size]], np.float32)
    return Face(box=(x, y, x + size, y + size), score=0.9, kps=kps)


def _camera(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (H, W, 3), dtype=np.uint8)


class Paster:
    """A stand-in composite that draws the swap's colour over a rectangle around the face and
    counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, frame: np.ndarray, swapped: object, face: Face) -> PasteRegion:
        self.calls += 1
        x0, y0, x1, y1 = (int(v) for v in face.box)
        region = PasteRegion(max(0, x0 - 4), max(0, y0 - 4), min(W, x1 + 4), min(H, y1 + 4))
        roi = frame[region.y0 : region.y1, region.x0 : region.x1]
        roi[...] = (roi // 2 + np.asarray(swapped, np.uint8) // 2)  # depends on what lies beneath
        return region


def _draw(scene_args: dict, camera: np.ndarray, paste: Paster, memo: Repaint | None) -> np.ndarray:
    frame = camera.copy()
    scene = Scene(frame=frame, enabled=True, on_miss=OnMiss.blur, known=True, **scene_args)
    if memo is None:
        return compose(scene, paste).frame
    painter = memo.painter(frame, paste)
    out = compose(scene, paste, painter).frame
    painter.finish()
    return out


def test_a_still_frame_is_put_back_whole_and_is_the_same_picture():
    camera = _camera()
    a, b, lost, unsure = _face(20, 20), _face(40, 30), _face(200, 100), _face(250, 30)
    swaps = [(0, 200, 0), (200, 0, 0)]
    args = dict(targets=[a, b], swaps=swaps, lost=[lost], unsure=[unsure], unseen=[(100, 150, 180, 220)])
    memo, paste = Repaint(), Paster()
    first = _draw(args, camera, paste, memo)
    again = _draw(args, camera, paste, memo)
    assert paste.calls == 2  # the second frame pasted nothing: both swaps were put back
    assert memo.put_back == 5  # two swaps, the lost face's and the unsure place's covers, the changed region
    direct = _draw(args, camera, Paster(), None)
    assert np.array_equal(first, direct) and np.array_equal(again, direct)


def test_a_face_that_moved_is_drawn_again_and_so_is_what_lies_over_it():
    camera = _camera(1)
    a, b, c = _face(20, 20), _face(40, 30), _face(200, 150)  # a and b overlap; c stands apart
    swaps = [(0, 200, 0), (200, 0, 0), (0, 0, 200)]
    memo, paste = Repaint(), Paster()
    _draw(dict(targets=[a, b, c], swaps=swaps), camera, paste, memo)
    a_moved = _face(24, 20)
    args = dict(targets=[a_moved, b, c], swaps=swaps)
    paste.calls = 0
    out = _draw(args, camera, paste, memo)
    # a is new (drawn); b is drawn after a and overlaps it, so it is drawn again too; c is put back.
    assert paste.calls == 2 and memo.put_back == 1
    assert np.array_equal(out, _draw(args, camera, Paster(), None))


def test_a_new_cover_beneath_a_swap_makes_it_drawn_again():
    """Covers go first: a lost face's cover new in this frame, under a swap put back, would be
    overwritten by the swap's old rectangle — the swap is drawn again over it instead."""
    camera = _camera(2)
    a, b = _face(20, 20), _face(45, 25)
    memo, paste = Repaint(), Paster()
    _draw(dict(targets=[a, b], swaps=[(0, 200, 0), (200, 0, 0)]), camera, paste, memo)
    args = dict(targets=[a], swaps=[(0, 200, 0)], lost=[b])
    paste.calls = 0
    out = _draw(args, camera, paste, memo)
    assert paste.calls == 1 and memo.put_back == 0
    assert np.array_equal(out, _draw(args, camera, Paster(), None))


def test_what_was_drawn_over_a_thing_put_back_comes_back_with_it_never_the_camera_beneath():
    """b's swap went over a's rectangle last frame; b is gone now (it left): a is put back with
    the end of the last frame's pixels in its rectangle — b's swap where it overlapped — not the
    camera's pixels there (more covered than drawing a again, never less)."""
    camera = _camera(3)
    a, b = _face(20, 20), _face(40, 30)
    memo, paste = Repaint(), Paster()
    last = _draw(dict(targets=[a, b], swaps=[(0, 200, 0), (200, 0, 0)]), camera, paste, memo)
    out = _draw(dict(targets=[a], swaps=[(0, 200, 0)]), camera, paste, memo)
    assert memo.put_back == 1
    x0, y0, x1, y1 = 16, 16, 54, 54  # a's rectangle
    assert np.array_equal(out[y0:y1, x0:x1], last[y0:y1, x0:x1])


def test_identity_not_equality_another_face_object_at_the_same_place_is_drawn():
    """A paste is put back only for the same Face object: the tracker hands on the same object only
    for a face it found unmoved by its pixels; a new detection at the same coordinates is drawn."""
    camera = _camera(4)
    memo, paste = Repaint(), Paster()
    _draw(dict(targets=[_face(20, 20)], swaps=[(0, 200, 0)]), camera, paste, memo)
    _draw(dict(targets=[_face(20, 20)], swaps=[(0, 200, 0)]), camera, paste, memo)
    assert paste.calls == 2 and memo.put_back == 0


def test_a_held_region_is_put_back_only_for_the_same_held_frame_and_a_new_size_forgets():
    camera = _camera(5)
    a = _face(20, 20)
    held = Held(_camera(6), [a])
    memo = Repaint()
    args = dict(targets=[a], swaps=[None], held=held)
    frame = camera.copy()
    for _ in range(2):
        frame = camera.copy()
        painter = memo.painter(frame, Paster())
        compose(Scene(frame=frame, enabled=True, on_miss=OnMiss.hold, known=True, **args), Paster(), painter)
        painter.finish()
    assert memo.put_back == 1
    other = Held(_camera(7), [a])
    painter = memo.painter(camera.copy(), Paster())
    compose(Scene(frame=camera.copy(), enabled=True, on_miss=OnMiss.hold, known=True, targets=[a], swaps=[None], held=other),
            Paster(), painter)
    assert memo.put_back == 1  # another last good output: copied from it
    small = np.zeros((100, 100, 3), np.uint8)
    assert memo.painter(small, Paster())._memo._last == {}  # another frame size: nothing to put back

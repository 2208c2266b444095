"""`output.repaint.Repaint`: the last frame's covers and swaps put back where nothing they depend on
changed — the same picture as drawing them again, or more covered, never less."""

from __future__ import annotations

import numpy as np

from vcamd.common.types import Face
from vcamd.config.schema import OnMiss
from vcamd.faces.footprint import PasteRegion
from vcamd.live.output.repaint import NEW_SWAPS_PER_FRAME, PLACE_WIDTHS, Repaint
from vcamd.live.tracking.changes import CHANGE_LIMIT
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


def _draw(scene_args: dict, camera: np.ndarray, paste: Paster, memo: Repaint | None, makers: dict | None = None) -> np.ndarray:
    frame = camera.copy()
    scene = Scene(frame=frame, enabled=True, on_miss=OnMiss.blur, known=True, **scene_args)
    if memo is None:
        return compose(scene, paste).frame
    painter = memo.painter(frame, paste, makers=makers)
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


def test_swaps_that_come_back_in_another_order_put_back_only_those_no_overlapping_swap_came_after():
    """Last frame a, b, c in that order, c over a's edge; now c, b, a: c and b are put back (nothing
    beneath them changed), a is pasted again over c's layer — c, put back before it, lay over it
    last frame, so a's layer would show a's edge where c's lies now. (The order is checked only
    where a swap put back before came after another one last frame; the marks it reads are written
    then.)"""
    camera = _camera(11)
    a, b, c = _face(20, 20), _face(200, 150), _face(40, 30)
    swaps = [(0, 200, 0), (200, 0, 0), (0, 0, 200)]
    memo, paste = Repaint(), Paster()
    first = _draw(dict(targets=[a, b, c], swaps=swaps), camera, paste, memo)
    paste.calls = 0
    out = _draw(dict(targets=[c, b, a], swaps=swaps[::-1]), camera, paste, memo)
    assert paste.calls == 1 and memo.put_back == 2
    expected = camera.copy()
    for x0, y0, x1, y1 in ((196, 146, 234, 184), (36, 26, 74, 64)):  # b's and c's layers (Paster: the box grown by 4)
        expected[y0:y1, x0:x1] = first[y0:y1, x0:x1]
    Paster()(expected, swaps[0], a)
    assert np.array_equal(out, expected)


def test_a_layer_is_what_the_thing_drew_so_a_neighbour_gone_leaves_the_same_picture_as_drawing_again():
    """b's swap went over a's rectangle last frame; b is gone now (it left): a's layer is what a
    drew (before b), so putting it back gives the picture drawing a again gives."""
    camera = _camera(3)
    a, b = _face(20, 20), _face(40, 30)
    memo, paste = Repaint(), Paster()
    _draw(dict(targets=[a, b], swaps=[(0, 200, 0), (200, 0, 0)]), camera, paste, memo)
    args = dict(targets=[a], swaps=[(0, 200, 0)])
    out = _draw(args, camera, paste, memo)
    assert memo.put_back == 1 and paste.calls == 2
    assert np.array_equal(out, _draw(args, camera, Paster(), None))


def test_a_still_face_detected_again_a_pixel_away_keeps_its_layer_and_one_that_moved_is_drawn():
    """The same swap at a new `Face` object (a look found the same face again, its keypoints
    jittered by a pixel) over a camera that did not change: put back, not pasted again. Before,
    only the same object was: every look at a crowd's faces re-pasted them. A face that moved by
    more than PLACE_WIDTHS of its width is pasted where it is now."""
    camera = _camera(4)
    swap = (0, 200, 0)
    memo, paste = Repaint(), Paster()
    first = _draw(dict(targets=[_face(20, 20)], swaps=[swap]), camera, paste, memo)
    again = _draw(dict(targets=[_face(21, 20)], swaps=[swap]), camera, paste, memo)
    assert paste.calls == 1 and memo.put_back == 1
    assert np.array_equal(again, first)
    moved = dict(targets=[_face(20 + 30 * PLACE_WIDTHS + 1, 20)], swaps=[swap])
    out = _draw(moved, camera, paste, memo)
    assert paste.calls == 2 and np.array_equal(out, _draw(moved, camera, Paster(), None))


def test_where_the_camera_changed_under_a_still_face_its_swap_is_pasted_again_over_the_new_pixels():
    """The same face object and the same swap, but the camera's pixels under its paste changed (a
    hand came up beside the face): the last frame's layer would show the old pixels — it is pasted
    again. Before, the same face object was enough to put it back."""
    camera = np.full((H, W, 3), 90, np.uint8)
    face, swap = _face(100, 100), (0, 200, 0)
    memo, paste = Repaint(), Paster()
    _draw(dict(targets=[face], swaps=[swap]), camera, paste, memo)
    changed = camera.copy()
    changed[96:112, 96:140] = 200  # inside the paste's rectangle (the face's box grown by 4 px)
    out = _draw(dict(targets=[face], swaps=[swap]), changed, paste, memo)
    assert paste.calls == 2 and memo.put_back == 0
    assert np.array_equal(out, _draw(dict(targets=[face], swaps=[swap]), changed, Paster(), None))


def test_a_noisy_camera_still_gets_its_layers_back_and_a_slow_drift_is_drawn_once_it_adds_up():
    """Sensor noise (σ 6 levels a pixel, new every frame) moves the change detector's cell means by
    far less than CHANGE_LIMIT: a noisy still picture's swaps and covers are put back frame after
    frame. A brightness drift of 2 levels a frame is compared with the frame each layer was drawn
    on, not the last one: it is drawn again once the drift passes the limit, never later."""
    rng = np.random.default_rng(9)
    base = np.full((720, 1280, 3), 100, np.int16)  # a camera's size: the cells average 16×16 pixels
    faces, swaps = [_face(20, 20), _face(150, 60), _face(40, 150)], [(0, 200, 0), (200, 0, 0), (0, 0, 200)]
    args = dict(targets=faces, swaps=swaps, unsure=[_face(250, 160)])
    memo, paste = Repaint(), Paster()

    def noisy(level: int) -> np.ndarray:
        return np.clip(base + level + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)

    _draw(args, noisy(0), paste, memo)
    for _ in range(5):
        _draw(args, noisy(0), paste, memo)
    assert paste.calls == 3 and memo.put_back == 5 * 4
    drawn_at = None
    for step in range(1, 8):
        before = paste.calls
        _draw(args, noisy(2 * step), paste, memo)
        if paste.calls > before:
            drawn_at = step
            break
    # Each frame moved by 2 levels only (under the limit): drawn once the drift from the layer's own
    # frame, with the noise, passes CHANGE_LIMIT — not at 2 levels, at the latest past the limit.
    assert drawn_at is not None and 2 <= drawn_at and 2 * drawn_at <= CHANGE_LIMIT + 2


def test_one_cover_changed_in_a_crowd_of_overlapping_covers_is_drawn_alone():
    """Covers hide what lies beneath whole: a cover drawn anew (its place moved) does not make the
    covers that overlap it drawn again in turn — before, one changed cover in a crowd redrew every
    cover overlapping it, and every one overlapping those."""
    camera = _camera(10)
    row = [_face(10 + 18 * i, 60, 20) for i in range(12)]  # covers 2× the box: each overlaps its neighbours
    memo = Repaint()
    _draw(dict(targets=[], swaps=[], unsure=row), camera, Paster(), memo)
    row2 = [row[0].__class__(box=(4.0, 40.0, 24.0, 60.0), score=0.9, kps=row[0].kps - np.float32([6, 20]))] + row[1:]
    drawn = memo.drawn
    _draw(dict(targets=[], swaps=[], unsure=row2), camera, Paster(), memo)
    assert memo.drawn - drawn == 1 and memo.put_back == 11


def test_new_swaps_of_unchanged_faces_are_pasted_a_few_a_frame_the_others_keep_their_older_swap():
    """The swap worker refreshes a crowd's still faces together: at most NEW_SWAPS_PER_FRAME of
    them get the new swap pasted a frame, the others keep the layer of their older swap (the same
    face, the camera unchanged) until their turn — every face is swapped in every frame, and all
    show the new swap within a few frames. A face that moved gets its new swap at once. Before,
    every new swap was pasted in the frame it came."""
    camera = _camera(11)
    n = NEW_SWAPS_PER_FRAME * 2 + 3
    faces = [_face(5 + 35 * (i % 9), 5 + 45 * (i // 9)) for i in range(n)]
    memo, paste = Repaint(), Paster()
    _draw(dict(targets=faces, swaps=[np.array([0, 200, 0]) for _ in faces]), camera, paste, memo)
    new = [np.array([0, 0, 200]) for _ in faces]  # a swap object per face, as the worker makes them
    moved = _face(faces[-1].box[0] + 12, faces[-1].box[1])
    targets = faces[:-1] + [moved]
    counts = []
    for _ in range(3):
        paste.calls = 0
        out = _draw(dict(targets=targets, swaps=new), camera, paste, memo)
        counts.append(paste.calls)
    assert counts == [NEW_SWAPS_PER_FRAME + 1, NEW_SWAPS_PER_FRAME, 2]
    assert np.array_equal(out, _draw(dict(targets=targets, swaps=new), camera, Paster(), None))


class Shown(np.ndarray):
    """A swap's colour that also says which face map source it shows (`SwappedFace.source`)."""

    source: str


def _shown(colour: tuple[int, int, int], source: str) -> Shown:
    swap = np.array(colour).view(Shown)
    swap.source = source
    return swap


def test_a_new_source_photos_swaps_show_on_every_still_face_in_the_frame_they_come():
    """The NEW_SWAPS_PER_FRAME turns are for a refresh of the same picture: swaps another source
    photo (another face pipeline) made are pasted at once on every face, never held back behind an
    older swap of the old identity. Before, 2 of 19 still faces showed the new source in that frame."""
    camera = _camera(13)
    n = NEW_SWAPS_PER_FRAME * 2 + 3
    faces = [_face(5 + 35 * (i % 9), 5 + 45 * (i // 9)) for i in range(n)]
    memo, paste = Repaint(), Paster()
    old_maker, new_maker = (object(), object()), (object(), object())
    for _ in range(2):
        old = [np.array([0, 200, 0]) for _ in faces]
        _draw(dict(targets=faces, swaps=old), camera, paste, memo, {id(s): old_maker for s in old})
    new = [np.array([200, 0, 200]) for _ in faces]
    paste.calls = 0
    out = _draw(dict(targets=faces, swaps=new), camera, paste, memo, {id(s): new_maker for s in new})
    assert paste.calls == n
    assert np.array_equal(out, _draw(dict(targets=faces, swaps=new), camera, Paster(), None))
    # The same maker's refresh still takes turns.
    again = [np.array([200, 0, 200]) for _ in faces]
    paste.calls = 0
    _draw(dict(targets=faces, swaps=again), camera, paste, memo, {id(s): new_maker for s in again})
    assert paste.calls == NEW_SWAPS_PER_FRAME


def test_a_face_maps_new_person_shows_at_once_on_the_faces_given_to_them():
    """A face map gives some still faces another person: their swaps of that person are pasted at
    once, the others' refreshes of the same person take turns. Before, faces given to bob could show
    alice's older layer."""
    camera = _camera(14)
    n = NEW_SWAPS_PER_FRAME + 12
    faces = [_face(5 + 35 * (i % 9), 5 + 45 * (i // 9)) for i in range(n)]
    memo, paste = Repaint(), Paster()
    for _ in range(2):
        _draw(dict(targets=faces, swaps=[_shown((0, 200, 0), "alice") for _ in faces], sources=["alice"] * n), camera, paste, memo)
    wants = ["bob"] * 12 + ["alice"] * NEW_SWAPS_PER_FRAME
    swaps = [_shown((200, 0, 200), "bob") for _ in range(12)] + [_shown((0, 200, 0), "alice") for _ in range(NEW_SWAPS_PER_FRAME)]
    out = _draw(dict(targets=faces, swaps=swaps, sources=wants), camera, paste, memo)
    direct = _draw(dict(targets=faces, swaps=swaps, sources=wants), camera, Paster(), None)
    for face in faces[:12]:
        x0, y0, x1, y1 = (int(v) for v in face.box)
        assert np.array_equal(out[y0:y1, x0:x1], direct[y0:y1, x0:x1])


def test_faces_covered_last_frame_and_swapped_now_keep_their_cover_until_their_turn():
    """The watchdog let every face of a crowd be swapped again (faces_per_round lifted): the faces
    obscured last frame as the ones it left out get their swap a few a frame, each keeping its
    cover — hiding it whole — until its turn; never raw. Before, all were pasted in one frame."""
    camera = _camera(14)
    n = NEW_SWAPS_PER_FRAME + 5
    faces = [_face(5 + 35 * (i % 9), 5 + 45 * (i // 9)) for i in range(n)]
    swaps = [np.array([0, 200, 0]) for _ in faces]
    memo, paste = Repaint(), Paster()
    _draw(dict(targets=faces[:1], swaps=swaps[:1], others=faces[1:]), camera, paste, memo)
    counts = []
    for _ in range(3):
        paste.calls = 0
        out = _draw(dict(targets=faces, swaps=swaps), camera, paste, memo)
        counts.append(paste.calls)
        for face in faces:  # every face swapped (the stand-in's colour) or its cover: never the camera's pixels
            x0, y0, x1, y1 = (int(v) for v in face.box)
            assert not np.array_equal(out[y0:y1, x0:x1], camera[y0:y1, x0:x1])
    # The first frame: its turns, and the one face swapped before drawn again over the covers gone.
    assert counts[0] <= NEW_SWAPS_PER_FRAME + 1 and counts[0] + counts[1] >= n - 1 and counts[2] == 0
    assert np.array_equal(out, _draw(dict(targets=faces, swaps=swaps), camera, Paster(), None))


def test_after_a_frame_covered_whole_the_faces_swaps_come_in_turns_each_face_covered_until_its_own():
    """Positions unknown, the whole frame obscured: every face was covered. When they are known
    again — each a little off its last place, so no layer is put back — at most
    NEW_SWAPS_PER_FRAME are pasted a frame, the others covered (their miss region obscured, then
    that cover kept) until their turn: never the camera's pixels. Before, all were pasted at once."""
    camera = _camera(15)
    n = NEW_SWAPS_PER_FRAME * 2 + 3
    faces = [_face(5 + 35 * (i % 9), 5 + 45 * (i // 9)) for i in range(n)]
    swaps = [np.array([0, 200, 0]) for _ in faces]
    memo, paste = Repaint(), Paster()
    _draw(dict(targets=faces, swaps=swaps), camera, paste, memo)
    frame = camera.copy()
    painter = memo.painter(frame, paste)
    compose(Scene(frame=frame, enabled=True, on_miss=OnMiss.blur, known=False, targets=faces, swaps=swaps), paste, painter)
    painter.finish(covered_whole=True)
    moved = [_face(f.box[0] + 4, f.box[1]) for f in faces]
    counts = []
    for _ in range(4):
        paste.calls = 0
        out = _draw(dict(targets=moved, swaps=swaps), camera, paste, memo)
        counts.append(paste.calls)
        for face in moved:
            x0, y0, x1, y1 = (int(v) for v in face.box)
            assert not np.array_equal(out[y0:y1, x0:x1], camera[y0:y1, x0:x1])
    assert counts[0] == NEW_SWAPS_PER_FRAME and counts[1] >= NEW_SWAPS_PER_FRAME and sum(counts) >= n and counts[3] == 0, counts
    assert np.array_equal(out, _draw(dict(targets=moved, swaps=swaps), camera, Paster(), None))


def test_a_frame_compose_drew_nothing_on_keeps_the_layers_for_the_next():
    """A frame held or obscured whole (positions unknown) draws nothing through the painter: the
    frame after it puts the layers back as they were. Before, that frame forgot them and the next
    redrew a whole crowd at once."""
    camera = _camera(12)
    args = dict(targets=[_face(20, 20), _face(120, 80)], swaps=[(0, 200, 0), (200, 0, 0)], unsure=[_face(250, 30)])
    memo, paste = Repaint(), Paster()
    _draw(args, camera, paste, memo)
    frame = camera.copy()
    painter = memo.painter(frame, paste)
    compose(Scene(frame=frame, enabled=True, on_miss=OnMiss.blur, known=False, **args), paste, painter)
    painter.finish()
    _draw(args, camera, paste, memo)
    assert paste.calls == 2 and memo.put_back == 3


def test_an_unsure_place_that_jittered_inside_its_last_cover_keeps_it():
    """An unsure place's box moved by a pixel between two looks: inside the last frame's cover around
    it (grown 2×), that cover is put back — it covers the new place whole; one reaching past it is drawn."""
    camera = _camera(13)
    memo = Repaint()
    _draw(dict(targets=[], swaps=[], unsure=[_face(100, 100, 40)]), camera, Paster(), memo)
    _draw(dict(targets=[], swaps=[], unsure=[_face(101, 101, 38)]), camera, Paster(), memo)  # its cover: (82, 82, 159, 159)
    assert memo.put_back == 1 and memo.drawn == 1  # inside the last one, (80, 80, 161, 161): that one put back
    out = _draw(dict(targets=[], swaps=[], unsure=[_face(103, 100, 40)]), camera, Paster(), memo)
    assert memo.drawn == 2
    assert not np.array_equal(out[80:121, 83:124], camera[80:121, 83:124])


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


def test_a_large_cover_is_kept_as_its_mosaic_and_put_back_as_the_same_pixels_over_a_new_camera_frame():
    """A cover of MOSAIC_KEPT_FROM pixels or more (a moving body's, half a 1080p frame) is kept as its
    mosaic, not a copy of its rectangle; put back over the next camera frame — whose pixels changed
    beneath it — it shows exactly what it showed, as does a small cover kept as a copy beside it,
    and nothing else of the new frame is touched."""
    from vcamd.live.output.repaint import MOSAIC_KEPT_FROM

    first, second = (np.random.default_rng(seed).integers(0, 256, (720, 1280, 3), dtype=np.uint8) for seed in (21, 22))
    big, small = (100, 80, 900, 600), (1000, 500, 1060, 560)
    assert (big[2] - big[0]) * (big[3] - big[1]) >= MOSAIC_KEPT_FROM > (small[2] - small[0]) * (small[3] - small[1])
    memo = Repaint()

    def draw(camera: np.ndarray) -> np.ndarray:
        frame = camera.copy()
        painter = memo.painter(frame, Paster())
        out = compose(Scene(frame=frame, enabled=True, on_miss=OnMiss.blur, known=True, targets=[], swaps=[],
                            unseen=[big, small]), Paster(), painter).frame
        painter.finish()
        return out

    shown = draw(first)
    again = draw(second)
    assert memo.put_back == 2 and memo.drawn == 2
    outside = np.ones(second.shape[:2], bool)
    for x0, y0, x1, y1 in (big, small):
        assert np.array_equal(again[y0:y1, x0:x1], shown[y0:y1, x0:x1])
        assert not np.array_equal(shown[y0:y1, x0:x1], first[y0:y1, x0:x1])  # covered, not the camera's pixels
        outside[y0:y1, x0:x1] = False
    assert np.array_equal(again[outside], second[outside])

"""Where the periodic full detection looks (`vcamd.live.tracking.changes`): only where the picture changed
since it last looked there, with real photos and the real detector."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest

from vcamd.common.types import Face
from vcamd.faces.detect import input_shape_for
from vcamd.live.measures.stats import LiveStats
from vcamd.live.tracking import changes
from vcamd.live.tracking.changes import WHOLE, ChangeMap, Region, RegionImage, area_shrunk, downscaled
from vcamd.live.tracking.full import FullDetector, scaled
from vcamd.live.tracking.tracker import LiveTracker

W, H, SIZE = 1280, 720, 640


@pytest.fixture(scope="module")
def room(assets) -> np.ndarray:
    """A still 720p picture with texture and no face: the crowd photo's sky and wall, blurred."""
    crowd = cv2.imread(str(assets / "images" / "crowd_selfie.jpg"))
    return cv2.GaussianBlur(cv2.resize(crowd[: crowd.shape[0] // 5], (W, H)), (0, 0), 9)


@pytest.fixture(scope="module")
def detector(assets):
    """The fast SCRFD on sessions of this module's own: its tests compare a region's detection with the
    whole frame's to within 1 % of a face's width, and the worker's shared detector and sessions carry
    what other tests of the worker left in them (its input shape's verdict, a model's int8 copy)."""
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions

    return FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", Sessions(["cpu"], threads=2))


def look_at(seen: ChangeMap, frame: np.ndarray, size: int, **kw):
    """`seen`'s answer for a frame as a full detection at `size` sees it."""
    return seen.where_to_look(*downscaled(frame, size), **kw)


def with_face(frame: np.ndarray, face: np.ndarray, x: int, y: int) -> np.ndarray:
    out = frame.copy()
    out[y : y + face.shape[0], x : x + face.shape[1]] = face
    return out


@pytest.mark.parametrize(("width", "height", "size"), [
    (1920, 1080, (640, 360)),  # 1080p for the full detection: k = 3, the box blur
    (3200, 1800, (640, 360)),  # k = 5
    (1280, 720, (640, 360)),  # k = 2: OpenCV's own fast path
    (1600, 900, (640, 360)),  # not a whole factor
    (1921, 1080, (640, 360)),  # almost: not a whole factor either
])
def test_the_detection_downscale_is_inter_area_bit_for_bit(assets, width, height, size) -> None:
    photo = cv2.imread(str(assets / "images" / "solvay_conference_1927.png"))
    noise = np.random.default_rng(3).integers(0, 256, (height, width, 3), dtype=np.uint8)
    for image in (cv2.resize(photo, (width, height)), noise, noise[:, :, 0]):
        expected = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        assert np.array_equal(area_shrunk(image, size), expected)


def test_a_still_picture_needs_no_run_and_the_whole_frame_comes_back_every_still_whole_every_looks(room):
    """The backstop's look every WHOLE_EVERY looks would see what the last whole look saw: not run.
    A still picture is looked at whole every STILL_WHOLE_EVERY looks all the same."""
    every = changes.STILL_WHOLE_EVERY
    assert every > changes.WHOLE_EVERY
    seen = ChangeMap()
    answers = [look_at(seen, room, SIZE) for _ in range(2 * every + 1)]
    assert answers == ([WHOLE] + [None] * (every - 1)) * 2 + [WHOLE]
    skipped = every - changes.WHOLE_EVERY  # the backstop's turns, from the WHOLE_EVERY-th look to the last before `every`
    assert seen.looks == {"whole": 3, "region": 0, "moved": 0, "none": 2 * (every - 1), "still": 2 * skipped, "unshown": 0}


def test_a_still_picture_before_a_noisy_camera_holds_still(room):
    """A camera's noise (±3 levels a pixel, new in every frame) is no change for the backstop either."""
    rng = np.random.default_rng(5)
    seen = ChangeMap()
    answers = [look_at(seen, cv2.add(room, rng.integers(0, 7, room.shape, dtype=np.uint8)), SIZE)
               for _ in range(3 * changes.WHOLE_EVERY)]
    assert answers == [WHOLE] + [None] * (3 * changes.WHOLE_EVERY - 1)
    assert seen.looks["still"] == 2 * changes.WHOLE_EVERY


def test_a_change_too_faint_for_a_region_look_brings_the_backstops_whole_look(room, newton):
    """A face coming in faint — its cells moved by more than STILL_LIMIT but not past CHANGE_LIMIT (no
    region look) — is what the backstop is for: looked at whole at its next turn, as before."""
    seen = ChangeMap()
    assert look_at(seen, room, SIZE) is WHOLE
    face = cv2.resize(newton, (240, 135))
    faint = cv2.addWeighted(room, 0.975, with_face(room, face, 700, 330), 0.025, 0.0)
    cells = changes.largest_change(changes.thumbnail(downscaled(faint, SIZE)[0]), changes.thumbnail(downscaled(room, SIZE)[0]))
    assert changes.STILL_LIMIT < cells.max() <= changes.CHANGE_LIMIT  # the case: faint, not a region look's change
    answers = [look_at(seen, faint, SIZE) for _ in range(changes.WHOLE_EVERY)]
    assert answers == [None] * (changes.WHOLE_EVERY - 1) + [WHOLE]
    assert seen.looks["still"] == 0


def test_the_backstop_looks_only_at_what_is_shown_uncovered(room, newton):
    """Told what the frame shows covered (`unseen`'s boxes), the backstop looks at the cells that changed
    past the camera's noise outside them — a region around a faint face, not the whole frame — and not
    at all when they are covered (what is covered is looked at once it holds still: `unseen`)."""
    face = cv2.resize(newton, (240, 135))
    faint = cv2.addWeighted(room, 0.975, with_face(room, face, 700, 330), 0.025, 0.0)
    over_it = (700 - 32, 330 - 32, 940 + 32, 465 + 32)  # frame pixels
    for covered, expected in (([], "region"), ([over_it], None), ([(0, 0, 200, 200)], "region")):
        seen = ChangeMap()
        assert look_at(seen, room, SIZE) is WHOLE
        answers = [look_at(seen, faint, SIZE, covered=covered) for _ in range(2 * changes.WHOLE_EVERY)]
        turn = changes.WHOLE_EVERY - 1
        assert answers[:turn] == [None] * turn, covered  # too faint for a region look
        if expected is None:
            assert answers[turn:] == [None] * (len(answers) - turn) and seen.looks["still"] == len(answers) - turn
            continue
        look = answers[turn]
        assert look is not None and look.region is not None, (covered, look)
        assert look.region.contains(820, 400) and not look.region.contains(100, 100), look.region
        assert seen.looks["unshown"] == 1 and seen.looks["whole"] == 1
        assert answers[turn + 1:] == [None] * (len(answers) - turn - 1)  # looked at: nothing left to look at


def test_a_face_that_came_and_went_since_the_whole_look_leaves_nothing_to_look_at(room, newton):
    """A face stepped in (looked at there), then out again: the picture is back to what the whole
    look saw, so the backstop's turn is not run — and what changed since the region's look is that
    picture, seen whole (`SeenPicture`): nothing there either. In again, it is looked at again."""
    seen = ChangeMap()
    assert look_at(seen, room, SIZE) is WHOLE
    face = cv2.resize(newton, (240, 135))
    stepped_in = look_at(seen, with_face(room, face, 700, 330), SIZE)
    assert stepped_in is not None and stepped_in.region is not None
    for _ in range(changes.WHOLE_EVERY - 2):
        assert look_at(seen, with_face(room, face, 700, 330), SIZE) is None
    assert look_at(seen, room, SIZE) is None  # the backstop's turn
    assert seen.looks["still"] == 1 and seen.looks["moved"] == 1, seen.looks
    again = look_at(seen, with_face(room, face, 700, 330), SIZE)  # in again: not the whole look's picture
    assert again is WHOLE


def test_camera_noise_is_no_change(room):
    seen = ChangeMap()
    look_at(seen, room, SIZE)
    noisy = cv2.add(room, np.random.default_rng(1).integers(0, 6, room.shape, dtype=np.uint8))  # ±3 levels a pixel
    assert look_at(seen, noisy, SIZE) is None


def test_a_face_stepping_in_is_looked_for_where_it_stepped_in_and_found_as_the_whole_frame_finds_it(room, newton, detector):
    seen = ChangeMap()
    assert look_at(seen, room, SIZE) is WHOLE
    face = cv2.resize(newton, (240, 135))  # a 16:9 portrait whose face is ~50 px wide
    frame = with_face(room, face, 700, 330)
    look = look_at(seen, frame, SIZE)
    assert look is not None and look.region is not None
    r = look.region
    x0, y0, x1, y1 = r.frame_box()
    assert x0 <= 700 and y0 <= 330 and 700 + 240 <= x1 and 330 + 135 <= y1, r
    whole_shape = input_shape_for((H, W), SIZE)
    assert r.shape[0] * r.shape[1] < changes.WHOLE_SHARE * whole_shape[0] * whole_shape[1]
    # What the full detector does with it, against what it does with the whole frame.
    small, scale = downscaled(frame, SIZE)
    cut = RegionImage.cut(small, r)
    in_region = [cut.placed(f) for f in detector.detect(cut.image, cut.input_size) if not cut.cuts(f)]
    in_whole = [scaled(f, 1.0 / scale) for f in detector.detect(small, SIZE)]
    assert len(in_region) == len(in_whole) == 1
    width = in_whole[0].width
    # The same pixels, seen by the same anchors: the same face (only context far from it differs).
    assert np.abs(in_region[0].kps - in_whole[0].kps).max() < 0.01 * width
    # Looked at: the same picture again is no change.
    assert look_at(seen, frame, SIZE) is None


def sliding(picture: np.ndarray, x: int, y: int) -> np.ndarray:
    """`picture` on grey at (x, y) of a 720p frame, through the camera's JPEG round trip."""
    frame = np.full((H, W, 3), 128, np.uint8)
    frame[y : y + picture.shape[0], x : x + picture.shape[1]] = picture
    return cv2.imdecode(cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 85])[1], cv2.IMREAD_COLOR)


def test_a_picture_that_only_moved_is_not_looked_at_again_only_what_it_uncovered(newton):
    """A still picture sliding on a wall (the bench's camera): everything it covers changes between
    two looks, and all of it is what the last whole look saw, moved — not looked at again. Only the
    strip of wall it uncovered behind it is new (it could hide anything): looked at, that strip
    alone. The backstop's whole look still comes every WHOLE_EVERY looks."""
    picture = cv2.resize(newton, (845, 475))
    seen = ChangeMap()
    looks = []
    for k in range(2 * changes.WHOLE_EVERY):
        x = 40 + 31 * k
        look = look_at(seen, sliding(picture, x, 120 + (5 if k % 2 else 0)), SIZE)
        looks.append(look)
        if k % changes.WHOLE_EVERY == 0:
            assert look is WHOLE, (k, look)
        else:  # the strip behind the picture's left edge, not the picture
            assert look is None or (look.region is not None and not look.region.contains(x + 845 / 2, H / 2)), (k, look)
    assert seen.looks["moved"] + seen.looks["region"] == 2 * (changes.WHOLE_EVERY - 1), looks


def test_what_enters_a_moving_picture_is_looked_at_where_it_entered_and_found_there(room, newton, detector):
    """A pan: the picture moves and new content enters at its edge — only that strip is looked at.
    A face stepping into a sliding picture is no part of what was seen: looked at, and found
    as the whole frame finds it."""
    wide = cv2.resize(room, (W + 240, H))
    seen = ChangeMap()
    assert look_at(seen, np.ascontiguousarray(wide[:, :W]), SIZE) is WHOLE
    look = look_at(seen, np.ascontiguousarray(wide[:, 40 : 40 + W]), SIZE)  # panned 40 px: new at the right edge
    assert look is not None and look.region is not None, look
    assert look.region.contains(W - 10, H / 2) and not look.region.contains(W / 2, H / 2), look.region

    picture = cv2.resize(newton, (845, 475))
    seen = ChangeMap()
    assert look_at(seen, sliding(picture, 40, 120), SIZE) is WHOLE
    frame = with_face(sliding(picture, 71, 125), cv2.resize(newton, (256, 144)), 960, 520)  # moved, and a face stepped in
    look = look_at(seen, frame, SIZE)
    assert look is not None and look.region is not None, look
    small, _ = downscaled(frame, SIZE)
    cut = RegionImage.cut(small, look.region)
    in_region = [cut.placed(f) for f in detector.detect(cut.image, cut.input_size) if not cut.cuts(f)]
    assert [f for f in in_region if f.box[0] >= 960 and f.box[1] >= 520], in_region


def test_a_slow_change_adds_up_against_what_was_last_looked_at(room):
    seen = ChangeMap()
    look_at(seen, room, SIZE)
    step = changes.CHANGE_LIMIT * 0.7  # below the limit from one look to the next
    lamp = room.copy()
    lamp[100:260, 900:1100] = cv2.add(lamp[100:260, 900:1100], np.full((160, 200, 3), step, np.uint8))
    assert look_at(seen, lamp, SIZE) is None
    brighter = room.copy()
    brighter[100:260, 900:1100] = cv2.add(brighter[100:260, 900:1100], np.full((160, 200, 3), 2 * step, np.uint8))
    look = look_at(seen, brighter, SIZE)
    assert look is not None and look.region is not None and look.region.contains(1000, 180)
    assert not look.region.contains(200, 600)


def test_region_shapes_are_few_and_never_larger_than_the_whole_frame(room):
    rng = np.random.default_rng(3)
    shapes = set()
    whole_h, whole_w = input_shape_for((H, W), SIZE)
    for _ in range(200):
        seen = ChangeMap()
        look_at(seen, room, SIZE)
        frame = room.copy()
        x, y = int(rng.integers(0, W - 40)), int(rng.integers(0, H - 40))
        w, h = int(rng.integers(16, 400)), int(rng.integers(16, 300))
        frame[y : y + h, x : x + w] = 255 - frame[y : y + h, x : x + w]
        look = look_at(seen, frame, SIZE)
        assert look is not None  # something changed: looked at somewhere
        if look.region is not None:
            r = look.region
            x0, y0, x1, y1 = r.frame_box()
            assert 0 <= x0 and 0 <= y0 and x1 < W + 64 and y1 < H + 64  # past the edge by less than a grid step
            assert x0 <= x and y0 <= y and min(W, x + w) <= x1 and min(H, y + h) <= y1  # the change, all of it
            assert r.x0 % 32 == 0 and r.y0 % 32 == 0  # on the anchor grid
            assert r.shape[0] <= whole_h and r.shape[1] <= whole_w
            shapes.add(r.shape)
    assert 1 < len(shapes) <= 12, shapes
    assert all(h % changes.REGION_STEP == 0 or h == whole_h for h, _ in shapes)


def test_after_a_failed_run_another_size_or_another_frame_size_the_whole_frame_is_looked_at(room):
    moved = with_face(room, np.zeros((50, 50, 3), np.uint8), 100, 100)
    seen = ChangeMap()
    look_at(seen, room, SIZE)
    look = look_at(seen, moved, SIZE)
    assert look is not None and look.region is not None  # what a change gets when the map can vouch for the rest
    seen = ChangeMap()
    look_at(seen, room, SIZE)
    seen.failed()  # the detection of that look failed: nothing was seen
    assert look_at(seen, moved, SIZE) is WHOLE
    seen = ChangeMap()
    look_at(seen, room, SIZE)
    assert look_at(seen, room, 320) is WHOLE  # the watchdog's lower size: never compared with 640's look
    assert look_at(seen, cv2.resize(room, (640, 360)), 320) is WHOLE  # the camera's size changed
    seen.reset()
    assert look_at(seen, cv2.resize(room, (640, 360)), 320) is WHOLE


def test_a_region_not_ready_is_looked_at_whole_and_asked_for(room):
    seen = ChangeMap()
    look_at(seen, room, SIZE)
    frame = with_face(room, np.zeros((60, 60, 3), np.uint8), 600, 300)
    assert look_at(seen, frame, SIZE, ready=lambda shape: False) is WHOLE
    assert seen.wanted is not None and seen.wanted[0] % changes.REGION_STEP == 0 and seen.wanted[1] % changes.REGION_STEP == 0


def test_a_face_the_region_cuts_is_not_reported_one_at_the_frame_edge_is():
    small = np.zeros((H // 2, W // 2, 3), np.uint8)
    cut = RegionImage.cut(small, Region(0, 50, 128, 178, scale=0.5))  # frame (0, 100)–(256, 356)
    assert cut.image.shape[:2] == (128, 128)
    kps = np.zeros((5, 2), np.float32) + 20
    at_frame_edge = Face(box=(0.0, 10.0, 40.0, 50.0), score=0.9, kps=kps)  # x0 = 0 is the frame's own edge
    assert not cut.cuts(at_frame_edge)
    assert cut.placed(at_frame_edge).box == (0.0, 120.0, 80.0, 200.0)
    across_the_bottom = Face(box=(10.0, 100.0, 50.0, 140.0), score=0.9, kps=kps)  # past y1 = 128 (frame 356 < 720)
    across_the_right = Face(box=(100.0, 10.0, 130.0, 40.0), score=0.9, kps=kps)
    assert cut.cuts(across_the_bottom) and cut.cuts(across_the_right)
    # A cut face's box often ends at the side, a fraction of a pixel inside (the detector sees no further).
    at_the_right = Face(box=(100.0, 10.0, 127.8, 40.0), score=0.9, kps=kps)
    near_the_right = Face(box=(100.0, 10.0, 125.0, 40.0), score=0.9, kps=kps)
    assert cut.cuts(at_the_right) and not cut.cuts(near_the_right)


def test_faces_stepping_into_a_tracked_still_scene_are_found_by_the_next_due_detection(room, newton, live_config, face_engine_factory):
    """End to end through the tracker and its full-detector thread: one face tracked in a still
    room; due detections with nothing changed do not run; faces step in one after another, and
    the next due detection — whole, or only where they stepped in once that region's detector
    shape is built — reports each of them."""
    engine = face_engine_factory(live_config())
    frames = [with_face(room, cv2.resize(newton, (400, 225)), 80, 250)]
    for x, y in ((768, 40), (768, 448), (1024, 256)):  # each face ~60 px wide, a 256×144 portrait
        frames.append(with_face(frames[-1], cv2.resize(newton, (256, 144)), x, y))
    step_ins = {8: 1, 18: 2, 28: 3}  # frame index → how many faces stepped in so far
    full = FullDetector(engine, LiveStats(), time.monotonic)
    full.start()
    tracker = LiveTracker(engine, full, full_every=5)
    looks: list[str] = []
    found_at: dict[int, int] = {}  # faces in view → first frame the tracker reported that many
    try:
        shown = 0
        for index in range(1, 36):
            shown = step_ins.get(index, shown)
            before = dict(tracker.changes.looks)
            report = tracker.update(frames[shown], index, full_size=SIZE, track_size=192, deadline_s=30.0)
            found_at.setdefault(len(report.faces), index)
            looks.append(next((k for k, v in tracker.changes.looks.items() if v != before[k]), "-"))
            _settle(tracker, full)  # this frame's detection (and any session build) lands before the next frame
    finally:
        tracker.stop()
        full.stop()
    due = {index: looks[index - 1] for index in range(1, 36, 5)}  # frames 1, 6, 11, … (full_every = 5)
    assert due[1] == "whole" and due[6] == "none", looks  # the still room: no run
    # Each face is reported by the look due after it stepped in (its result lands a frame later).
    assert found_at.get(2, 99) <= 12 and found_at.get(3, 99) <= 22 and found_at.get(4, 99) <= 32, (found_at, looks)
    assert "region" in (due[11], due[21], due[31]), looks  # once its shape is built, only where it changed


def _settle(tracker: LiveTracker, full: FullDetector) -> None:
    for _ in range(3000):  # a bound for a broken thread, not a timing
        # The session warm-up thread (`warming` itself clears only at the next update).
        if full.idle and not tracker._warm.busy:
            return
        time.sleep(0.01)
    raise AssertionError("the full detector or the session warm-up never finished")


def test_a_region_look_that_cut_a_face_sends_the_next_look_to_the_whole_frame_at_once(room, newton, live_config, face_engine_factory):
    """A region whose side runs through a face drops it (`RegionImage.cuts`): that look did not see
    the face whole. The detection says so (`FullDetection.cut`, `vouches`), and the tracker's next
    frame looks at the whole frame, due or not. A region that held the face whole does not, nor
    one that cut only a face the tracker follows (`without_cut_of`: the newcomer, tracked by then)."""
    engine = face_engine_factory(live_config())
    tracked = with_face(room, cv2.resize(newton, (400, 225)), 80, 250)
    frame = with_face(tracked, cv2.resize(newton, (512, 288)), 700, 300)  # someone new, ~120 px wide
    small, scale = downscaled(frame, SIZE)
    found = sorted(engine.detect(small, SIZE), key=lambda f: f.box[0])
    assert len(found) == 2 and found[1].box[0] > 300, [f.box for f in found]

    def through(face: Face, height: int = 256) -> tuple[Region, Region]:
        """A region whose right side runs through `face` (a quarter of it outside), and one holding it."""
        x0, y0, x1, y1 = face.box
        right, top = int(x1 - 0.25 * (x1 - x0)), max(0, int((y0 + y1) / 2) - height // 2)
        return Region(right - 128, top, right, top + height, scale), Region(right - 128, top, right + 128, top + height, scale)

    cutting, holding = through(found[1])
    cutting_tracked, _ = through(found[0])
    full = FullDetector(engine, LiveStats(), time.monotonic)
    full.start()
    tracker = LiveTracker(engine, full, full_every=30)
    verdicts = []
    try:
        for index in (1, 2):  # the tracked face found by the first (whole) look
            tracker.update(tracked, index, full_size=SIZE, track_size=192, deadline_s=30.0)
            _settle(tracker, full)
        for index, region in ((3, cutting), (4, holding), (5, cutting_tracked)):
            full.submit_downscaled(small, scale, index, SIZE, changes.Look(region))
            _settle(tracker, full)
            before = tracker.changes.looks["whole"]
            tracker.update(frame, index, full_size=SIZE, track_size=192, deadline_s=30.0)
            verdicts.append((len(tracker.looked[0].cut), tracker.looked[0].vouches, tracker.changes.looks["whole"] - before))
            _settle(tracker, full)
    finally:
        tracker.stop()
        full.stop()
    assert verdicts == [(1, False, 1), (0, True, 0), (0, True, 0)], verdicts


def test_the_tracker_hands_the_frames_covers_to_the_backstop(room, newton, live_config, face_engine_factory):
    """`LiveTracker.update(covered=…)`: the boxes the last frame showed covered (frame pixels) reach the
    change map at the detector's scale. A faint newcomer (too faint for a region look) under a cover
    is not looked at by the backstop; shown uncovered, it is looked at in a region around it; with
    no covers known the backstop looks at the whole frame, as before."""
    engine = face_engine_factory(live_config())
    tracked = with_face(room, cv2.resize(newton, (400, 225)), 80, 250)
    faint = cv2.addWeighted(tracked, 0.975, with_face(tracked, cv2.resize(newton, (240, 135)), 700, 330), 0.025, 0.0)
    over_it = (680, 310, 960, 485)
    answers = {}
    for name, covered in (("covered", [over_it]), ("shown", []), ("unknown", None)):
        full = FullDetector(engine, LiveStats(), time.monotonic)
        full.start()
        tracker = LiveTracker(engine, full, full_every=2)  # a look every other frame, landing the frame after
        looks: list[str] = []
        try:
            for index in range(1, 4 + 4 * changes.WHOLE_EVERY):
                before = dict(tracker.changes.looks)
                tracker.update(tracked if index <= 3 else faint, index, full_size=SIZE, track_size=192, deadline_s=30.0,
                               covered=covered)
                looks += [k for k in ("whole", "region") if tracker.changes.looks[k] != before[k]]
                _settle(tracker, full)
            answers[name] = (looks, tracker.changes.looks)
        finally:
            tracker.stop()
            full.stop()
    assert answers["covered"][0] == ["whole"] and answers["covered"][1]["still"] >= 1, answers  # the first look only
    # Looked at (a region, or the whole frame while the region's detector shape is built: `ready`).
    assert len(answers["shown"][0]) == 2 and answers["shown"][1]["unshown"] == 1, answers
    assert answers["unknown"][0] == ["whole", "whole"] and answers["unknown"][1]["unshown"] == 0, answers

"""Property tests of the privacy rule: the tracker's bookkeeping (`TrackedFaces`) and `compose`, the
real code, driven by random worlds — faces drifting, jumping, vanishing and coming back, detections
full (at the full or a lower size, fresh or a few frames late; of the whole frame or, as the
change map asks for, of a region of it — drawn anywhere here), crop re-detections (that blink, or
that find a neighbour instead of the face), late detectors,
swap results late, failing or NaN, swapping toggled, 1 to 30 faces; and, as the live loop does with
`[swap] cover_changes` on (the default), what changed away from the known faces since a detection
looked there obscured (`UnseenChanges`, the real code).

Each "real face" is a distinct random texture, so a leak is checkable pixel-wise: a published face
leaks when most of its visible pixels are exactly the raw pattern. The property: while swapping is
on (and on_miss is not the user's explicit passthrough opt-out), no published frame shows a face
raw — every face is swapped (the stand-in paste fills it green), held, or obscured.

The world's limits, which are the engine's: a face appears at a full detection at the full size
and the first detection runs at the full size (a face nobody has detected yet cannot be covered
individually, only while no face is known at all); a face too small for the lower
detection size does not jump (once lost, only a detection at its size can say where it went);
no face appears within JUMP_FRAMES of another turning away (it would be taken for that face having
jumped: see `TrackedFaces.take_full`); a face turned away (no detector finds it) stays where it was lost, and turns only where a full
detection has seen it since it last jumped (turned at a place no detector ever saw it, it is not
known to be there); faces keep apart (one per cell
of a grid).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vcamd.common.types import Face, Outcome
from vcamd.config.schema import OnMiss, Others
from vcamd.faces.footprint import PasteRegion
from vcamd.live.output.repaint import Repaint
from vcamd.live.tracking.changes import Region
from vcamd.live.tracking.full import FullDetection
from vcamd.live.tracking.trackedfaces import JUMP_FRAMES, LOST_KEEP_FRAMES, TrackedFaces
from vcamd.live.tracking.unseen import UnseenChanges
from vcamd.privacy.obscure import obscure_frame
from vcamd.privacy.rule import FaceOutcome, Held, Scene, compose, lost_to_cover, match_swaps

W, H, CELL = 640, 480, 96
COLS, ROWS = W // CELL, H // CELL  # 6 × 5 = 30 cells, one face each at most
FULL, LOW = 640, 320
SMALL = 22  # faces this size or smaller are missed by a detection at LOW
GREEN = np.array([0, 255, 0], np.uint8)


@dataclass
class RealFace:
    ident: int
    cell: int
    dx: int
    dy: int
    size: int
    pattern: np.ndarray
    visible: bool = True
    turned: int = 0  # frames left during which no detector finds it (turned away), yet it is shown
    seen_here: bool = True  # a full detection has seen it since it last jumped
    placed: tuple[tuple[int, int, int, int], Face] | None = None  # the box `face()` last made a Face for, and that Face

    @property
    def detectable(self) -> bool:
        return self.visible and self.turned == 0

    @property
    def small(self) -> bool:
        return self.size <= SMALL

    def box(self) -> tuple[int, int, int, int]:
        cx = (self.cell % COLS) * CELL + CELL // 2 + self.dx
        cy = (self.cell // COLS) * CELL + CELL // 2 + self.dy
        x0, y0 = cx - self.size // 2, cy - self.size // 2
        return x0, y0, x0 + self.size, y0 + self.size

    def face(self) -> Face:
        """The face where it is; the same object while it stays there (as the tracker hands on a
        face it followed unmoved: `output.repaint` puts a paste back only for the same object)."""
        box = self.box()
        if self.placed is not None and self.placed[0] == box:
            return self.placed[1]
        x0, y0, x1, y1 = box
        w = x1 - x0
        kps = np.array([[x0 + 0.3 * w, y0 + 0.4 * w], [x0 + 0.7 * w, y0 + 0.4 * w], [x0 + 0.5 * w, y0 + 0.6 * w],
                        [x0 + 0.35 * w, y0 + 0.8 * w], [x0 + 0.65 * w, y0 + 0.8 * w]], np.float32)
        face = Face(box=(float(x0), float(y0), float(x1), float(y1)), score=0.9, kps=kps)
        self.placed = (box, face)
        return face


@dataclass
class World:
    faces: list[RealFace] = field(default_factory=list)

    def render(self) -> np.ndarray:
        frame = np.full((H, W, 3), 128, np.uint8)
        for f in self.faces:
            if f.visible:
                x0, y0, x1, y1 = f.box()
                frame[y0:y1, x0:x1] = f.pattern
        return frame

    def snapshot(self) -> list[tuple[Face, bool, bool]]:
        """(face, visible, small) of every face, as a detection of this frame would see them."""
        return [(f.face(), f.detectable, f.small) for f in self.faces]


def paste_green(frame: np.ndarray, swapped: object, face: Face) -> PasteRegion:
    """The stand-in composite: the swapped face covers the face's box (a real paste covers the
    face's keypoint region the same way); the rectangle it drew on, as `Blender.paste` says it."""
    x0, y0, x1, y1 = (int(v) for v in face.box)
    region = PasteRegion(max(0, x0 - 1), max(0, y0 - 1), min(W, x1 + 1), min(H, y1 + 1))
    frame[region.y0 : region.y1, region.x0 : region.x1] = GREEN
    return region


def crop_find(looked_for: Face, world: World) -> Face | None:
    """The crop re-detection: the visible face nearest the crop's centre inside a crop twice the
    face's size (vcamd.live.tracking.cropplan.CROP_FACTOR)."""
    cx, cy = (looked_for.box[0] + looked_for.box[2]) / 2, (looked_for.box[1] + looked_for.box[3]) / 2
    half = max(looked_for.width, looked_for.height)
    best, best_d = None, None
    for f in world.faces:
        if not f.detectable:
            continue
        face = f.face()
        fx, fy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
        if abs(fx - cx) < half and abs(fy - cy) < half:
            d = (fx - cx) ** 2 + (fy - cy) ** 2
            if best_d is None or d < best_d:
                best, best_d = face, d
    return best


def crop_answer(draw: int, looked_for: Face, world: World) -> Face | None:
    """What one crop re-detection says, by `draw` (0–9): mostly the face in its crop (`crop_find`);
    0: nothing (a blink); 1: someone else — in a group a detector that misses the face may find
    half a neighbour at the crop's edge; here the nearest other face of the frame, the worst case."""
    own = crop_find(looked_for, world)
    if draw == 0:
        return None
    if draw == 1:
        cx, cy = (looked_for.box[0] + looked_for.box[2]) / 2, (looked_for.box[1] + looked_for.box[3]) / 2
        others = [f.face() for f in world.faces if f.detectable and (own is None or f.face().box != own.box)]
        if others:
            return min(others, key=lambda o: ((o.box[0] + o.box[2]) / 2 - cx) ** 2 + ((o.box[1] + o.box[3]) / 2 - cy) ** 2)
    return own


def inside(face: Face, region: Region | None) -> bool:
    """Whether a region's detection reports this face: wholly inside it (`changes.RegionImage.cuts`
    drops a face the region cuts)."""
    if region is None:
        return True
    x0, y0, x1, y1 = face.box
    rx0, ry0, rx1, ry1 = region.frame_box()
    return rx0 <= x0 and ry0 <= y0 and x1 <= rx1 and y1 <= ry1


def draw_region(pick) -> Region:
    """Any rectangle of the frame (the change map's regions follow changes; here they are drawn
    anywhere, the worst case for the bookkeeping)."""
    x0, y0 = 32 * pick("region x", range(0, W // 32)), 32 * pick("region y", range(0, H // 32))
    return Region(x0, y0, min(W, x0 + 32 * pick("region w", range(1, W // 32 + 1))), min(H, y0 + 32 * pick("region h", range(1, H // 32 + 1))), scale=1.0)


def leaks(published: np.ndarray, world: World, raw: np.ndarray) -> list[int]:
    """Faces with over 10 % of their pixels exactly raw in the published frame (a random texture:
obscured, held or swapped pixels practically never equal the raw ones)."""
    out = []
    for f in world.faces:
        if not f.visible:
            continue
        x0, y0, x1, y1 = f.box()
        same = np.all(published[y0:y1, x0:x1] == raw[y0:y1, x0:x1], axis=2)
        if same.mean() > 0.1:
            out.append(f.ident)
    return out


def drawing(data):
    """`pick(label, options)` for simulate(), drawn by hypothesis (so it shrinks failures). Each
    strategy is built once (a run draws ~47,000 times; building one per draw cost a quarter of it)."""
    strategies: dict[tuple, st.SearchStrategy] = {}

    def pick(label: str, options):
        key = ("range", options.start, options.stop) if isinstance(options, range) else ("of", *options)
        if key not in strategies:
            strategies[key] = (st.integers(options.start, options.stop - 1) if isinstance(options, range)
                               else st.sampled_from(options))
        return data.draw(strategies[key], label=label)

    return pick


def new_face(pick, ident: int, cell: int, rng: np.random.Generator) -> RealFace:
    size = pick("size", range(16, 48 + 1))
    pattern = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    return RealFace(ident, cell, 0, 0, size, pattern)


@dataclass
class Run:
    checked: int  # frames published while swapping was on
    problems: list[str]  # leak reports
    untouched: int = 0
    """Visible faces published with no paste over them: under passthrough (where compose covers
    nothing) raw by construction — what the leak check must report."""
    untouched_reported: int = 0  # those the leak check reported
    put_back: int = 0  # things the repaint put back instead of drawing them (with `repaint`)


def simulate(pick, on_miss: OnMiss, steps: int, *, repaint: bool = False, cover_changes: bool = True) -> Run:
    """Run one random world through TrackedFaces + compose: frames checked, leak reports, and (for
    passthrough) the faces left raw by construction. With `repaint`, every frame is drawn through
    one `Repaint`, as the live loop draws it: the last frame's drawing put back where nothing it
    depends on changed. With `cover_changes` (`[swap] cover_changes`, on by default), what changed
    away from the known faces since a detection looked there is obscured, by the live loop's own
    `UnseenChanges`: the one thing that can say a face the tracker does not follow moved."""
    memo = Repaint() if repaint else None
    changes = UnseenChanges() if cover_changes else None
    rng = np.random.default_rng(pick("seed", range(0, 2**31 + 1)))
    n_faces = pick("faces", range(1, 30 + 1))
    cells = list(rng.permutation(COLS * ROWS)[:n_faces])
    world = World([new_face(pick, i, int(c), rng) for i, c in enumerate(cells)])
    book = TrackedFaces()
    history: list[list[tuple[Face, bool, bool]]] = []
    targets_history: list[list[Face]] = []
    result: tuple[list[Face], list[int]] | None = None  # the swap worker's newest result
    failed = False
    held: Held | None = None
    enabled = True
    prev_targets: list[Face] = []
    covered_lost: list[Face] = []
    run = Run(0, [])
    started = False
    last_turn = -100
    for t in range(steps):
        # -- the detection this frame brings
        kind = pick("detect", ["track", "track", "track", "late", "full", "region"] if started else ["track", "late", "full"])
        # Start-up runs at the full size (the watchdog lowers it later); a face never detected cannot be covered.
        size = pick("size", [FULL, LOW]) if kind in ("full", "region") and started else FULL
        delay = pick("delay", range(0, 2 + 1)) if kind in ("full", "region") else 0
        region = draw_region(pick) if kind == "region" else None
        fresh_full = kind == "full" and size == FULL and delay == 0
        # -- the world moves
        free = [c for c in range(COLS * ROWS) if c not in {f.cell for f in world.faces}]
        for f in world.faces:
            action = pick("move", ["stay", "drift", "drift", "jump", "vanish", "appear", "turn"])
            if f.turned:
                f.turned -= 1
                continue  # a turned face stays where it was lost (see the module docstring)
            if action == "turn" and f.visible and started and f.seen_here:
                f.turned = int(rng.integers(1, 6))
                last_turn = t
            elif action == "drift":
                f.dx = int(np.clip(f.dx + rng.integers(-4, 5), -8, 8))
                f.dy = int(np.clip(f.dy + rng.integers(-4, 5), -8, 8))
            elif action == "jump" and f.visible and not f.small and free:
                free.append(f.cell)
                f.cell, f.dx, f.dy = free.pop(int(rng.integers(0, len(free) - 1))), 0, 0
                f.seen_here = False
            elif action == "vanish":
                f.visible = False
            elif action == "appear" and not f.visible and fresh_full and t - last_turn > JUMP_FRAMES:
                f.visible = True
        if pick("toggle", range(0, 19 + 1)) == 0:
            enabled = not enabled
        snapshot = world.snapshot()
        history.append(snapshot)
        raw = world.render()
        frame = raw.copy()
        thumb = changes.remember(frame, t) if changes is not None else None  # before anything is drawn on it

        # -- the tracker (vcamd.live.tracking.tracker.LiveTracker.update, with the detectors simulated)
        appeared: list[Face] = []
        looks: list[FullDetection] = []
        if kind in ("full", "region") and len(history) > delay:
            seen = history[-1 - delay]
            faces = [face for face, visible, small in seen if visible and not (small and size == LOW) and inside(face, region)]
            looks.append(FullDetection(faces, frame_index=t - delay, input_size=size, region=region))
            appeared = book.take_full(looks[-1])
            started = True
            if delay == 0:
                for f in world.faces:
                    f.seen_here = f.seen_here or (f.detectable and not (f.small and size == LOW) and inside(f.face(), region))
        late = False
        if looked_for := book.to_redetect:
            if kind == "late":
                late = True
            else:
                found = [crop_answer(pick("crop", range(0, 9 + 1)), face, world) for face in looked_for]
                book.take_tracked(found, t)
        report = book.report(late=late, appeared=appeared, full=kind in ("full", "region"))
        unseen: list[tuple[int, int, int, int]] = []
        if changes is not None and thumb is not None:  # vcamd.live.frames, step 3 (a look at FULL vouches)
            changes.looked(looks, vouch_size=FULL)
            unseen = changes.covers(thumb, report.faces + report.lost + report.unsure) if report.known else []

        # -- the engine's glue (LiveEngine._process): face_selection = "all"
        targets = report.faces
        lost = lost_to_cover(report.lost, report.known, prev_targets + covered_lost)
        prev_targets, covered_lost = targets, lost
        targets_history.append(targets)
        swap_event = pick("swap", ["none", "none", "result", "result", "fail", "nan"])
        if swap_event == "result":
            lag = pick("lag", range(0, 3 + 1))
            made_for = targets_history[max(0, len(targets_history) - 1 - lag)]
            result, failed = (list(made_for), list(range(len(made_for)))), False
        elif swap_event in ("fail", "nan"):  # a model error or a NaN crop: no result, the worker is failed
            failed = True
        usable = result is not None and not failed
        swaps = match_swaps(targets, result[0], result[1]) if usable and result is not None else [None] * len(targets)

        pasted: list[Face] = []

        def paste(frame: np.ndarray, swapped: object, face: Face) -> PasteRegion:
            pasted.append(face)
            return paste_green(frame, swapped, face)

        painter = memo.painter(frame, paste) if memo is not None else None
        composed = compose(
            Scene(frame=frame, enabled=enabled, on_miss=on_miss, known=report.known, targets=targets, swaps=swaps, lost=lost, held=held,
                  unseen=unseen),
            paste, painter,
        )
        if painter is not None:
            painter.finish()
            run.put_back = memo.put_back  # type: ignore[union-attr]
        if composed.all_swapped:
            held = Held(composed.frame.copy(), list(targets))
        if not enabled:
            assert composed.outcome is Outcome.off and composed.frame is frame
            continue
        run.checked += 1
        bad = leaks(composed.frame, world, raw)
        if on_miss is OnMiss.passthrough:
            untouched = [f.ident for f in world.faces if f.visible and not any(overlaps(f.box(), p.box) for p in pasted)]
            run.untouched += len(untouched)
            run.untouched_reported += len(set(untouched) & set(bad))
        if bad:
            run.problems.append(f"frame {t}: faces {bad} raw (known={report.known}, outcome={composed.outcome}, "
                            f"faces={[o.value for o in composed.faces]}, lost={len(report.lost)})")
    return run


def overlaps(box: tuple[int, int, int, int], other: tuple[float, ...]) -> bool:
    """Whether a face's box and a pasted box (`paste_green` grows it by a pixel) share a pixel."""
    x0, y0, x1, y1 = box
    return other[0] - 1 < x1 and x0 < other[2] + 1 and other[1] - 1 < y1 and y0 < other[3] + 1


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), on_miss=st.sampled_from([OnMiss.hold, OnMiss.blur]))
def test_no_published_face_is_ever_raw_while_swapping_is_on(data, on_miss):
    run = simulate(drawing(data), on_miss, steps=data.draw(st.integers(5, 30), label="steps"))
    assert not run.problems, "\n".join(run.problems[:5])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), on_miss=st.sampled_from([OnMiss.hold, OnMiss.blur]))
def test_no_face_is_ever_raw_with_the_last_frames_drawing_put_back(data, on_miss):
    """The same worlds drawn as the live loop draws them: each frame through one `Repaint`, which
    puts back the last frame's covers and swaps where nothing they depend on changed."""
    run = simulate(drawing(data), on_miss, steps=data.draw(st.integers(5, 30), label="steps"), repaint=True)
    assert not run.problems, "\n".join(run.problems[:5])


def test_a_still_world_is_put_back_and_never_raw():
    """The repaint is really used in these worlds: faces that stay where they were get their paste
    put back, frame after frame (else the property above would prove little)."""
    choices = {"detect": "track", "move": "stay", "swap": "result", "lag": 0, "crop": 5, "toggle": 1,
               "seed": 3, "faces": 12, "size": 30}

    def pick(label, options):
        value = choices.get(label)
        if value is not None and (value in options if not isinstance(options, range) else value in options):
            return value
        return options[0] if not isinstance(options, range) else options.start

    first = {"detect": "full"}  # the first look finds them all

    def picking(label, options):
        if label == "detect" and first:
            return first.pop("detect")
        return pick(label, options)

    run = simulate(picking, OnMiss.blur, steps=12, repaint=True)
    assert not run.problems and run.checked == 12
    assert run.put_back >= 12 * 8  # twelve still faces, put back in nearly every frame


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_leak_check_can_fail_passthrough_shows_raw_faces(data):
    """The same worlds under on_miss = "passthrough" (the user's opt-out): misses are published
    raw, and the check sees them — it is not a check that cannot fail. Every visible face no paste
    touched is raw by construction (passthrough covers nothing) and must be reported. (A world whose
    faces all vanished, or were swapped throughout, shows none: nothing to report there.)"""
    run = simulate(drawing(data), OnMiss.passthrough, steps=30)
    assert run.untouched_reported == run.untouched, f"{run.untouched - run.untouched_reported} raw faces the leak check missed"


def test_a_jumped_face_is_covered_at_its_old_and_its_new_place():
    """The issue's fast move: a face swapped at A jumps 40 % of the frame width to B. Until a full
    detection of a later frame says where it is, the whole frame is covered; then B is covered
    (no swap made for B yet) — never raw at B while A is covered."""
    rng = np.random.default_rng(7)
    face = RealFace(0, cell=6, dx=0, dy=0, size=40, pattern=rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
    world = World([face])
    book = TrackedFaces()
    book.take_full(FullDetection([face.face()], frame_index=0, input_size=FULL))
    a = face.face()
    held = None
    for on_miss in (OnMiss.blur, OnMiss.hold):
        book = TrackedFaces()
        face.cell = 6
        book.take_full(FullDetection([face.face()], 0, FULL))
        face.cell = 6 + 3  # 3 cells = 288 px ≈ 45 % of the width
        raw = world.render()
        found = [crop_find(f, world) for f in book.to_redetect]
        lost_now, _ = book.take_tracked(found, 1)
        report = book.report(late=False, appeared=[], full=False)
        assert lost_now and not report.known  # lost in motion: positions unknown
        composed = compose(Scene(raw.copy(), True, on_miss, report.known, report.faces, [None] * len(report.faces),
                                 lost_to_cover(report.lost, report.known, [a]), held), paste_green)
        assert composed.outcome is Outcome.blurred and not leaks(composed.frame, world, raw)
        # The full detection of frame 1 finds it at B: B is covered, and so is nothing raw anywhere.
        book.take_full(FullDetection([face.face()], 1, FULL))
        found = [crop_find(f, world) for f in book.to_redetect]
        book.take_tracked(found, 2)
        report = book.report(late=False, appeared=[], full=True)
        assert report.known and len(report.faces) == 1
        composed = compose(Scene(raw.copy(), True, on_miss, True, report.faces, [None], [], held), paste_green)
        assert composed.faces == [FaceOutcome.obscured] and not leaks(composed.frame, world, raw)


@pytest.mark.parametrize("on_miss", [OnMiss.hold, OnMiss.blur])
def test_a_face_lost_while_turned_away_that_moves_elsewhere_is_covered_by_the_change_cover(on_miss):
    """What hypothesis found (29 frames, 17 faces, shrunk): a face turns away (no detector finds it)
    and is lost, covered at its last place; a whole look after the loss makes the positions known
    again without it; it turns back and moves elsewhere at once. No detector has it, so the tracker
    cannot say where it went — the change cover can (the picture changed where no face is known):
    obscured there, never raw. With `cover_changes = false` (the documented opt-out: "a newcomer
    may show for a few frames") it is raw — the check sees it."""
    rng = np.random.default_rng(11)
    stays = RealFace(0, cell=8, dx=0, dy=0, size=40, pattern=rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
    mover = RealFace(1, cell=14, dx=0, dy=0, size=40, pattern=rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
    world = World([stays, mover])
    published: dict[bool, list[int]] = {}
    for cover_changes in (True, False):
        stays.cell, mover.cell, mover.turned = 8, 14, 0
        book, changes = TrackedFaces(), UnseenChanges()
        changes.remember(world.render(), 0)
        first = FullDetection([stays.face(), mover.face()], 0, FULL)
        book.take_full(first)
        changes.looked([first], vouch_size=FULL)
        mover.turned = 3  # turned away: the crop re-detection misses it, the face is lost
        book.take_tracked([crop_find(f, World([stays])) for f in book.to_redetect], 1)
        assert not book.report(late=False, appeared=[], full=False).known
        changes.remember(world.render(), 2)
        whole = FullDetection([stays.face()], 2, FULL)  # a whole look after the loss, the face still turned away
        book.take_full(whole)
        changes.looked([whole], vouch_size=FULL)
        before = book.report(late=False, appeared=[], full=True)
        assert before.known and [f.box for f in before.lost] == [mover.face().box]
        mover.cell, mover.turned = 27, 0  # turned back, and somewhere else
        raw = world.render()
        thumb = changes.remember(raw, 3)
        book.take_tracked([crop_find(f, World([stays])) if i == 0 else None for i, f in enumerate(book.to_redetect)], 3)
        report = book.report(late=False, appeared=[], full=False)
        assert report.known and len(report.lost) == 1  # the tracker alone: known, the face "at" its old place
        unseen = changes.covers(thumb, report.faces + report.lost) if cover_changes else []
        composed = compose(Scene(raw.copy(), True, on_miss, True, report.faces, [object()], report.lost, None, unseen=unseen), paste_green)
        published[cover_changes] = leaks(composed.frame, world, raw)
    assert published == {True: [], False: [1]}


def test_start_up_under_hold_with_nothing_held_is_an_obscured_frame():
    rng = np.random.default_rng(3)
    world = World([RealFace(0, 7, 0, 0, 48, rng.integers(0, 256, (48, 48, 3), dtype=np.uint8))])
    raw = world.render()
    report = TrackedFaces().report(late=False, appeared=[], full=False)
    composed = compose(Scene(raw.copy(), True, OnMiss.hold, report.known, [], [], [], None), paste_green)
    assert not report.known and composed.outcome is Outcome.blurred and composed.fresh_badge
    expected = raw.copy()
    obscure_frame(expected)
    assert (composed.frame == expected).all() and not leaks(composed.frame, world, raw)  # the whole frame, obscured


@pytest.mark.parametrize("on_miss", [OnMiss.hold, OnMiss.blur])
def test_a_face_missed_at_a_lower_detection_size_stays_lost_and_covered(on_miss):
    """A small face found at the full size, then missed by the crop and by a detection at the
    lower size (the watchdog's low_res): it stays lost and covered, it does not vanish."""
    rng = np.random.default_rng(5)
    small = RealFace(0, 3, 0, 0, 18, rng.integers(0, 256, (18, 18, 3), dtype=np.uint8))
    big = RealFace(1, 20, 0, 0, 44, rng.integers(0, 256, (44, 44, 3), dtype=np.uint8))
    world = World([small, big])
    book = TrackedFaces()
    book.take_full(FullDetection([small.face(), big.face()], 0, FULL))
    small_box = small.face().box
    book.take_tracked([None if f.box == small_box else f for f in book.to_redetect], 1)  # the crop missed the small face (a blink)
    book.take_full(FullDetection([big.face()], 1, LOW))  # the lower size cannot see it
    report = book.report(late=False, appeared=[], full=True)
    assert report.known and [f.box for f in report.lost] == [small.face().box]
    raw = world.render()
    lost = lost_to_cover(report.lost, report.known, [small.face(), big.face()])
    composed = compose(Scene(raw.copy(), True, on_miss, True, report.faces, [object()], lost, None), paste_green)
    assert composed.faces == [FaceOutcome.swapped, FaceOutcome.obscured] and not leaks(composed.frame, world, raw)
    # A detection at the full size that does not see it soon after: kept (a head turned away is
    # found by no detector); one LOST_KEEP_FRAMES later: it left, dropped, not covered for ever.
    small.visible = False
    book.take_full(FullDetection([big.face()], 2, FULL))
    assert len(book.report(late=False, appeared=[], full=True).lost) == 1
    book.take_full(FullDetection([big.face()], 1 + LOST_KEEP_FRAMES, FULL))
    assert book.report(late=False, appeared=[], full=True).lost == []


@pytest.mark.parametrize("on_miss", [OnMiss.hold, OnMiss.blur, OnMiss.passthrough])
def test_faces_not_swapped_by_choice_are_obscured_under_the_swap_and_counted_apart(on_miss):
    """[swap] others = "obscure": the faces face_selection leaves are obscured whatever on_miss says
    (it is about the swapped faces' misses); the swapped face is pasted on top, the frame still
    counts as all swapped (a new good output), and the others are counted apart."""
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    user = Face(box=(100.0, 100.0, 160.0, 170.0), score=0.9, kps=np.zeros((5, 2), np.float32))
    other = Face(box=(190.0, 100.0, 290.0, 220.0), score=0.9, kps=np.zeros((5, 2), np.float32))
    composed = compose(Scene(raw.copy(), True, on_miss, True, [user], [object()], others=[other]), paste_green)
    assert composed.faces == [FaceOutcome.swapped] and composed.all_swapped and composed.outcome is Outcome.swapped
    assert composed.others_covered == 1 and composed.fresh_badge
    x0, y0, x1, y1 = (int(v) for v in other.box)
    assert (composed.frame[y0:y1, x0:x1] != raw[y0:y1, x0:x1]).any(axis=2).mean() > 0.9  # obscured
    ux0, uy0, ux1, uy1 = (int(v) for v in user.box)
    assert (composed.frame[uy0:uy1, ux0:ux1] == GREEN).all()  # the swap on top of the neighbour's cover
    shown = compose(Scene(raw.copy(), True, on_miss, True, [user], [object()]), paste_green)
    assert (shown.frame[y0:y1, x0:x1] == raw[y0:y1, x0:x1]).all() and shown.others_covered == 0


def test_a_frame_whose_only_face_is_obscured_as_another_counts_as_covered_not_raw():
    """face_selection = "largest" with the followed face not found in this frame: the one face in
    view is obscured as another's; the frame is counted blurred (it was covered), not passthrough
    (the raw camera) — a loaded run of a models-change test counted two such frames as raw."""
    rng = np.random.default_rng(6)
    raw = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    other = Face(box=(190.0, 100.0, 290.0, 220.0), score=0.9, kps=np.zeros((5, 2), np.float32))
    composed = compose(Scene(raw.copy(), True, OnMiss.blur, True, [], [], others=[other]), paste_green)
    x0, y0, x1, y1 = (int(v) for v in other.box)
    assert (composed.frame[y0:y1, x0:x1] != raw[y0:y1, x0:x1]).any(axis=2).mean() > 0.9  # obscured
    assert composed.outcome is Outcome.blurred and composed.faces == [] and composed.fresh_badge
    nobody = compose(Scene(raw.copy(), True, OnMiss.blur, True, [], []), paste_green)
    assert nobody.outcome is Outcome.passthrough and (nobody.frame == raw).all()


# ---- the same rule for `vcamd swap` ------------------------------------------------------------------


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), others=st.sampled_from([Others.obscure, Others.show]))
def test_a_vcamd_swap_frame_never_shows_a_chosen_face_raw(data, others):
    """`FaceEngine.process_frame` (`vcamd swap`) hands the rule what it has of one frame
    (`frame_scene`): whatever faces it holds (1 to 30), whichever were chosen, and whatever came back
    of their swaps (pasted, hidden by the face parser, or none), no chosen face is published raw, and
    with `[swap] others = "obscure"` no face at all; the faces counted swapped are the ones pasted."""
    from vcamd.faces.results import SwappedFace, frame_scene

    pick = drawing(data)
    rng = np.random.default_rng(pick("seed", range(1000)))
    cells = sorted({pick("cell", range(COLS * ROWS)) for _ in range(pick("faces", range(1, 31)))})
    world = World([new_face(pick, i, cell, rng) for i, cell in enumerate(cells)])
    raw = world.render()
    faces = [f.face() for f in world.faces]
    chosen = [i for i in range(len(faces)) if pick(f"chosen {i}", (True, False))]
    back = pick("swaps back", range(len(chosen) + 1))  # a swap worker may return fewer than asked
    swapped = [SwappedFace(np.zeros((8, 8, 3), np.uint8), "arcface", faces[i].kps, shown=pick(f"shown {i}", (True, True, False)))
               for i in chosen[:back]]

    composed = compose(frame_scene(raw.copy(), faces, [faces[i] for i in chosen], swapped, others), paste_green)

    leaked = set(leaks(composed.frame, world, raw))
    assert not leaked & set(chosen), f"chosen faces {sorted(leaked & set(chosen))} published raw"
    if others is Others.obscure:
        assert not leaked, f"faces {sorted(leaked)} published raw with others = obscure"
    pasted = sum(s.shown for s in swapped)
    assert composed.faces.count(FaceOutcome.swapped) == pasted
    assert composed.outcome is not Outcome.passthrough or not chosen and others is Others.show


def test_the_vcamd_swap_property_can_fail_a_face_left_out_of_the_scene_is_raw():
    """The check above can see a leak: a chosen face the scene is not told of stays raw."""
    from vcamd.faces.results import frame_scene

    rng = np.random.default_rng(3)
    world = World([RealFace(0, 7, 0, 0, 40, rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))])
    raw = world.render()
    composed = compose(frame_scene(raw.copy(), [], [], [], Others.obscure), paste_green)
    assert leaks(composed.frame, world, raw) == [0]

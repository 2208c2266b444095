"""The privacy rule, as one pure function: what to publish for one frame, and what each face got —
for the camera (`vcamd.live.frames`) and for `vcamd swap` (`FaceEngine.process_frame`) alike.

While swapping is on, every face shown is **swapped** (the latest swap pasted at its current
keypoints; a face seen from the side, `side_on`, is covered as one without a swap), **held**
(covered by the last good output, where that output showed this face swapped) or **obscured**
(`vcamd.privacy.obscure`, a region generously grown around it). Faces that were lost (tracking
lost them, a lower detection size missed them) are covered at their last-known place,
grown further since they may have moved; places the detector was unsure of (`FaceReport.unsure`)
are covered as a face that could not be swapped, and counted apart (they may be no face at all);
what changed away from every known face since a detection looked there (`Scene.unseen`, from
`vcamd.live.tracking.unseen`) is obscured. When the engine cannot say where the faces are (start-up
before the first detection, detector late or failing, a face lost in motion), the whole frame is
held or obscured. `on_miss = "passthrough"` is the user's explicit opt-out: misses stay raw.
Faces face_selection does not swap (`Scene.others`) are obscured whatever on_miss says, unless the
user chose `[swap] others = "show"` (the caller then hands none).

With a face map (`[[swap.map]]`, several people each with their own source), each target says which
source it must show (`Scene.sources`): a swap made from another source is never pasted on it, and
it is held only where the last good output showed that same source there; a target whose source
is not known (UNKNOWN_SOURCE: who it is is not decided), and every lost or unsure place, is
obscured rather than held. So a mapped person never shows another person's source, nor — when the
engine is unsure who they are — their own face.

No threads, no clock, no engine state: everything comes in as arguments, so the rule can be tested
exhaustively (tests/privacy/test_rule_property.py). What it decides is drawn through a `Painter`
(held regions copied, regions obscured, swaps pasted): by default straight onto the frame; the live
loop's `repaint.Repaint` puts back what the last frame drew where nothing it depends on changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from vcamd.common.types import Face, Frame, Outcome
from vcamd.config.schema import OnMiss
from vcamd.privacy.geometry import centres_widths, greedy_pairs, near_any, near_matrix
from vcamd.privacy.obscure import obscure_frame, obscure_region

log = logging.getLogger(__name__)

MISS_REGION_SCALE = 2.0
"""The covered square around a face that could not be swapped, relative to its box's larger side
(covers hair line, chin and ears, and a face that moved a little since it was found)."""

LOST_REGION_SCALE = 2.6
"""The covered square around a lost face's last-known place: it may have moved since."""

TRACK_MATCH_WIDTHS = 1.5
"""A swap result belongs to a current face when their centres are closer than this × face width."""

HELD_MATCH_WIDTHS = 0.5
"""A face may be held when the last good output showed it swapped within this × its width."""

SIDE_ON_EYE_SHARE = 0.4
"""A face whose eyes are closer together than this share of their distance to the mouth (`eye_share`)
is seen from the side (`side_on`): a paste aligned on its keypoints lands on the nose side and leaves
cheek and ear as the camera shows them, and the detectors disagree where such a face is — SCRFD-2.5G boxed a
profile on crowd_selfie 14 px to the nose side of SCRFD-500M's box; the swap on one left half of the
other's as it was, and MobileFaceNet still knew the person. Such a face is covered like one that
could not be swapped. Facing the camera the share is 0.87 (ArcFace's template); the 1 000 places both
SCRFD models score 0.2 and up on the project's photos have 0.56 or more but that profile, 0.18 in the
whole look and 0.30 in SCRFD-500M's crop look (tests/privacy/test_side_on.py). 0.4 is a head turned
~60° from the camera."""

Paste = Callable[[Frame, Any, Face], Any]
"""Pastes one swapped face (what the swap worker made) onto the frame at a face's keypoints; may
return the rectangle it drew on (`vcamd.faces.footprint.PasteRegion`, None: nothing)."""

Box = tuple[int, int, int, int]

UNKNOWN_SOURCE = "?"
"""The source a target wants when who it is is not known: no swap carries it, nothing is held for it."""


class Painter(Protocol):
    """How compose's decisions are drawn on the frame, in compose's order (covers, then what changed
    unseen, then the faces not swapped by choice, then the swaps on top)."""

    def hold(self, frame: Frame, box: Box, held: Held) -> None:
        """`box` of the frame becomes `box` of the last good output."""

    def obscure(self, frame: Frame, boxes: Sequence[Box]) -> None:
        """Each of `boxes` of the frame, in order, is made unrecognisable (`obscure.obscure_region`).
        All of a kind at once: a crowd's hundreds of covers a frame are one call, not one each."""

    def paste(self, frame: Frame, swapped: Any, face: Face) -> None:
        """The swap pasted at `face`; raises when it cannot be (the face is then covered)."""


@dataclass(frozen=True, slots=True)
class DirectPainter:
    """Draws straight onto the frame."""

    paste_swap: Paste

    def hold(self, frame: Frame, box: Box, held: Held) -> None:
        x0, y0, x1, y1 = box
        frame[y0:y1, x0:x1] = held.frame[y0:y1, x0:x1]

    def obscure(self, frame: Frame, boxes: Sequence[Box]) -> None:
        for box in boxes:
            obscure_region(frame, box)

    def paste(self, frame: Frame, swapped: Any, face: Face) -> None:
        self.paste_swap(frame, swapped, face)


class FaceOutcome(StrEnum):
    """What one face got in a published frame."""

    swapped = "swapped"
    held = "held"
    obscured = "obscured"
    passthrough = "passthrough"  # left raw: on_miss = passthrough (the user's opt-out)


@dataclass(frozen=True, slots=True)
class Held:
    """The last good output: a frame published with every face swapped (or covered for being seen from the side), and where those faces were."""

    frame: Frame
    faces: list[Face]
    sources: tuple[str | None, ...] = ()
    """Per face, the source its swap showed (a face map's key; empty: not told)."""


@dataclass(frozen=True, slots=True)
class Scene:
    """Everything compose needs to know about one frame."""

    frame: Frame  # the camera frame; compose draws on it
    enabled: bool  # swapping on
    on_miss: OnMiss
    known: bool  # whether the face positions are known this frame
    targets: list[Face]  # faces to swap now, current positions
    swaps: list[Any | None]  # one per target: the swapped face to paste, None when there is no usable one
    lost: list[Face] = field(default_factory=list)  # last-known places of faces to cover
    held: Held | None = None  # the last good output, for on_miss = hold
    unsure: list[Face] = field(default_factory=list)  # places the detector was unsure of: covered, never swapped
    others: list[Face] = field(default_factory=list)  # faces face_selection does not swap, to obscure ([swap] others)
    unseen: list[tuple[int, int, int, int]] = field(default_factory=list)
    """Rectangles that changed away from every known face since a detection looked there (`unseen`): obscured."""
    sources: list[str | None] = field(default_factory=list)
    """Per target, the source its swap must show (`swapped.source`); None: any. Empty: no face map."""
    turned: list[bool] = field(default_factory=list)
    """Per target, whether it counts as seen from the side (the live loop's `turning.TurnedFaces`: in
    any look of the last moments). Empty: from its keypoints in this frame alone (`side_on`)."""


@dataclass(frozen=True, slots=True)
class Composed:
    frame: Frame  # the pixels to publish
    outcome: Outcome  # the frame's outcome, for the frame counters
    faces: list[FaceOutcome]  # per target, then per lost face
    fresh_badge: bool  # the frame needs the disclosure badge drawn (a held frame already has it)
    all_swapped: bool  # every face swapped (or covered for being seen from the side), nothing lost: a new last good output
    unsure_covered: int = 0
    """Unsure places covered (held or obscured). Not faces for sure — a patch of wallpaper may score
    0.3 — so apart from `faces`, and from the frame's outcome."""
    others_covered: int = 0
    """Faces face_selection does not swap, obscured ([swap] others = "obscure"): apart from `faces`
    and from the frame's outcome, which say how the faces being swapped fared."""
    side_on_covered: int = 0
    """Faces with a swap covered because they are seen from the side (`side_on`): among `faces` too, as
    held or obscured; counted apart to say why."""


def compose(scene: Scene, paste: Paste, painter: Painter | None = None) -> Composed:
    """The frame to publish for `scene`, and what each face got (see the module docstring), drawn
    through `painter` (default: straight onto the frame, swaps with `paste`)."""
    painter = painter or DirectPainter(paste)
    frame = scene.frame
    if not scene.enabled:
        return Composed(frame, Outcome.off, [], fresh_badge=False, all_swapped=False)
    n_faces = len(scene.targets) + len(scene.lost)
    if not scene.known:
        return _whole_frame_miss(scene, n_faces)

    outcomes: list[FaceOutcome | None] = [None] * len(scene.targets)
    swaps = _of_wanted_source(scene)
    # A face seen from the side is covered; under the user's passthrough opt-out, its swap is still better than raw.
    sideways = ((scene.turned if len(scene.turned) == len(scene.targets) else side_on(scene.targets).tolist())
                if scene.on_miss is not OnMiss.passthrough else [False] * len(scene.targets))
    swaps, turned = _facing(swaps, sideways)
    to_paste = [(i, sw) for i, sw in enumerate(swaps) if sw is not None]
    missed = [i for i, sw in enumerate(swaps) if sw is None]
    if scene.on_miss is OnMiss.passthrough:
        for i in missed:
            outcomes[i] = FaceOutcome.passthrough
        lost_outcomes = [FaceOutcome.passthrough] * len(scene.lost)
        unsure_covered = 0
    else:
        # A face seen from the side is obscured, never held: the last good output may show a swap of it
        # from a look that read it facing, pasted on half of it (`SIDE_ON_EYE_SHARE`).
        may_hold = [i for i in missed if not sideways[i]]
        covers = ([(scene.targets[i], MISS_REGION_SCALE) for i in may_hold] + [(face, LOST_REGION_SCALE) for face in scene.lost]
                  + [(face, MISS_REGION_SCALE) for face in scene.unsure])
        wants = ([scene.sources[i] for i in may_hold] + [UNKNOWN_SOURCE] * (len(scene.lost) + len(scene.unsure))
                 if scene.sources else None)
        decided = _cover(frame, covers, scene.held if scene.on_miss is OnMiss.hold else None, painter, wants)
        from_side = [i for i in missed if sideways[i]]
        if from_side:  # after the holds, as all obscuring: a held region must never uncover it
            for i, outcome in zip(from_side, _cover(frame, [(scene.targets[i], MISS_REGION_SCALE) for i in from_side], None, painter)):
                outcomes[i] = outcome
        painter.obscure(frame, scene.unseen)  # after the holds: a held region must never uncover it
        for i, outcome in zip(may_hold, decided):
            outcomes[i] = outcome
        lost_outcomes = decided[len(may_hold):len(may_hold) + len(scene.lost)]
        unsure_covered = len(scene.unsure)
    # Faces not swapped by choice are obscured whatever on_miss says (it is about the swapped
    # faces' misses), after the holds: a held region reaching over one must never uncover it.
    if scene.others:
        painter.obscure(frame, regions(frame, [(face, MISS_REGION_SCALE) for face in scene.others]))
    # The swaps go on top: a cover grown around one face must never spoil a neighbour's swapped
    # face, and a paste's feathered edge blends into covered pixels.
    failed: list[int] = []
    for i, swapped in to_paste:
        try:
            painter.paste(frame, swapped, scene.targets[i])
            outcomes[i] = FaceOutcome.swapped
        except Exception as exc:  # a paste failure is a miss for this face, not a crash
            log.error("composite failed: %s", exc)
            failed.append(i)
    if failed:
        if scene.on_miss is OnMiss.passthrough:
            for i in failed:
                outcomes[i] = FaceOutcome.passthrough
        else:
            obscured = _cover(frame, [(scene.targets[i], MISS_REGION_SCALE) for i in failed], None, painter)
            for i, outcome in zip(failed, obscured):
                outcomes[i] = outcome
    faces = [o for o in outcomes if o is not None] + lost_outcomes
    altered = (unsure_covered > 0 or bool(scene.others) or bool(scene.unseen and scene.on_miss is not OnMiss.passthrough)
               or any(o is not FaceOutcome.passthrough for o in faces))
    return Composed(frame, _frame_outcome(faces, others_covered=bool(scene.others)), faces, fresh_badge=altered,
                    all_swapped=_all_swapped(faces, turned), unsure_covered=unsure_covered,
                    others_covered=len(scene.others), side_on_covered=len(turned))


def _whole_frame_miss(scene: Scene, n_faces: int) -> Composed:
    """Positions unknown: the whole frame is held, obscured, or (passthrough) left raw."""
    if scene.on_miss is OnMiss.passthrough:
        return Composed(scene.frame, Outcome.passthrough, [FaceOutcome.passthrough] * n_faces, fresh_badge=False, all_swapped=False)
    if scene.on_miss is OnMiss.hold and scene.held is not None:
        return Composed(scene.held.frame, Outcome.held, [FaceOutcome.held] * n_faces, fresh_badge=False, all_swapped=False)
    obscure_frame(scene.frame)
    return Composed(scene.frame, Outcome.blurred, [FaceOutcome.obscured] * n_faces, fresh_badge=True, all_swapped=False)


def _of_wanted_source(scene: Scene) -> list[Any | None]:
    """The scene's swaps, each kept only where it shows the source its target wants (a face map)."""
    if not scene.sources:
        return list(scene.swaps)
    return [sw if sw is not None and (want is None or (want != UNKNOWN_SOURCE and getattr(sw, "source", None) == want)) else None
            for sw, want in zip(scene.swaps, scene.sources)]


def _facing(swaps: list[Any | None], sideways: list[bool]) -> tuple[list[Any | None], list[int]]:
    """The swaps, each kept only where its target faces the camera (`sideways`: per target, seen from
    the side): a face seen from the side is covered as a face without a swap. And the targets whose
    swap was not kept."""
    turned = [i for i, sw in enumerate(swaps) if sw is not None and sideways[i]]
    if not turned:
        return swaps, []
    kept = list(swaps)
    for i in turned:
        kept[i] = None
    return kept, turned


def _all_swapped(faces: list[FaceOutcome], turned: list[int]) -> bool:
    """Whether the frame is a new last good output: a face swapped, and every other face (the
    targets first in `faces`, then the lost) swapped too, or covered for being seen from the side —
    the one cover a swap would not have done better: a group with a face turned away keeps its
    last good output fresh, and a face held from it later shows what covered it."""
    covered_for_turning = set(turned)
    return (FaceOutcome.swapped in faces
            and all(o is FaceOutcome.swapped or i in covered_for_turning for i, o in enumerate(faces)))


def side_on(faces: Sequence[Face]) -> npt.NDArray[np.bool_]:
    """Per face, whether it is seen from the side: its `eye_share` under SIDE_ON_EYE_SHARE."""
    sideways: npt.NDArray[np.bool_] = eye_share(faces) < SIDE_ON_EYE_SHARE
    return sideways


def eye_share(faces: Sequence[Face]) -> npt.NDArray[np.float64]:
    """Per face, its eye distance over the distance from the eyes' midpoint to the mouth's — two
    lengths a turn of the head shortens differently (the first with the turn, the second not),
    whatever the detector's box or the face's roll and size (inf where eyes and mouth coincide: no turn to tell). One
    array computation for a crowd's faces."""
    if not faces:
        return np.zeros(0)
    kps = np.array([face.kps for face in faces], np.float64).reshape(len(faces), 5, 2)
    eyes = np.hypot(*(kps[:, 1] - kps[:, 0]).T)
    down = np.hypot(*((kps[:, 3] + kps[:, 4] - kps[:, 0] - kps[:, 1]) / 2).T)
    share: npt.NDArray[np.float64] = np.divide(eyes, down, out=np.full_like(eyes, np.inf), where=down > 0)
    return share


def _cover(frame: Frame, covers: list[tuple[Face, float]], held: Held | None, painter: Painter,
           wants: list[str | None] | None = None) -> list[FaceOutcome]:
    """Hold each face (its grown region from the last good output, where that output showed it
    swapped — with `wants`, swapped to the source it wants) or obscure it. All holds go first, then
    all obscures: a held region that reaches over another face must never uncover it."""
    boxes = regions(frame, covers)
    can_hold = held is not None and held.frame.shape == frame.shape
    shown_swapped = [False] * len(covers)
    if held is not None and can_hold:
        shown_swapped = near_any([face for face, _ in covers], held.faces, HELD_MATCH_WIDTHS)
        if wants is not None and covers:  # a face map: held only where that output showed the same source
            near = near_matrix([face for face, _ in covers], held.faces, HELD_MATCH_WIDTHS) if held.faces else None
            told = near is not None and len(held.sources) == len(held.faces)
            shown_swapped = [ok and (want is None or (want != UNKNOWN_SOURCE and told and near is not None
                                                      and any(near[k, j] and held.sources[j] == want for j in range(len(held.faces)))))
                             for k, (ok, want) in enumerate(zip(shown_swapped, wants))]
    outcomes = [FaceOutcome.held if swapped else FaceOutcome.obscured for swapped in shown_swapped]
    for box, outcome in zip(boxes, outcomes):
        if outcome is FaceOutcome.held and held is not None:  # only ever held when there is a last good output
            painter.hold(frame, box, held)
    painter.obscure(frame, [box for box, outcome in zip(boxes, outcomes) if outcome is FaceOutcome.obscured])
    return outcomes


def _frame_outcome(faces: list[FaceOutcome], *, others_covered: bool = False) -> Outcome:
    if not faces:
        # Nobody to swap here. A frame whose only faces were obscured as others (the followed face
        # out of view, or not yet told by identity) was covered, not the raw camera.
        return Outcome.blurred if others_covered else Outcome.passthrough
    if FaceOutcome.passthrough in faces:
        return Outcome.passthrough
    if FaceOutcome.obscured in faces:
        return Outcome.blurred
    if FaceOutcome.held in faces:
        return Outcome.held
    return Outcome.swapped


def region(frame: Frame, faces: list[Face], scale: float) -> tuple[int, int, int, int]:
    """Integer rectangle (x0, y0, x1, y1) around all faces, each box's larger side grown by
    `scale` into a square, clipped to the frame."""
    h, w = frame.shape[:2]
    x0, y0, x1, y1 = w, h, 0, 0
    for f in faces:
        cx, cy = (f.box[0] + f.box[2]) / 2, (f.box[1] + f.box[3]) / 2
        half = max(f.width, f.height) * scale / 2
        x0, y0 = min(x0, int(np.floor(cx - half))), min(y0, int(np.floor(cy - half)))
        x1, y1 = max(x1, int(np.ceil(cx + half)) + 1), max(y1, int(np.ceil(cy + half)) + 1)
    return max(0, x0), max(0, y0), min(w, x1), min(h, y1)


def regions(frame: Frame, covers: list[tuple[Face, float]]) -> list[tuple[int, int, int, int]]:
    """`region(frame, [face], scale)` for each (face, scale), as one array computation (a crowd's
    hundreds of covers a frame): the same float64 arithmetic, the same integers."""
    if not covers:
        return []
    h, w = frame.shape[:2]
    boxes = np.array([face.box for face, _ in covers], np.float64).reshape(-1, 4)
    scales = np.array([scale for _, scale in covers], np.float64)
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    half = np.maximum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) * scales / 2
    x0 = np.clip(np.floor(cx - half), 0, w).astype(np.int64)
    y0 = np.clip(np.floor(cy - half), 0, h).astype(np.int64)
    x1 = np.clip(np.ceil(cx + half) + 1, 0, w).astype(np.int64)
    y1 = np.clip(np.ceil(cy + half) + 1, 0, h).astype(np.int64)
    out: list[tuple[int, int, int, int]] = list(zip(x0.tolist(), y0.tolist(), x1.tolist(), y1.tolist()))
    return out


def lost_to_cover(lost: list[Face], known: bool, before: list[Face]) -> list[Face]:
    """The lost faces compose must cover: those that were being swapped or covered in the last
    frame (`before`); a bystander face_selection leaves alone stays alone. While positions are
    unknown, every lost face counts (the frame is covered whole anyway, and they carry over)."""
    if not known:
        return list(lost)
    return [f for f, covered in zip(lost, near_any(lost, before)) if covered]


def match_swaps(targets: list[Face], swapped_faces: list[Face], swapped: list[Any]) -> list[Any | None]:
    """For each target, the swapped face made for it (greedy nearest centre), or None."""
    if not targets:
        return []
    if len(targets) == 1 and len(swapped_faces) == 1:
        return [swapped[0]]  # one face in, one swapped face out: it is the same person moving
    if not swapped_faces:
        return [None] * len(targets)
    # Every target against every swapped face in one array (a crowd: a hundred of each); then
    # greedily, target by target, the nearest one not taken, closer than the limit.
    (tc, tw), (sc, _) = centres_widths(targets), centres_widths(swapped_faces)
    distance = np.hypot(sc[None, :, 0] - tc[:, None, 0], sc[None, :, 1] - tc[:, None, 1])
    within = distance < (TRACK_MATCH_WIDTHS * np.maximum(tw, 1.0))[:, None]
    return [None if j is None else swapped[j] for j in greedy_pairs(within, distance)]

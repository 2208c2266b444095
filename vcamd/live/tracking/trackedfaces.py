"""Which faces the engine tracks, which it lost, and whether it knows where the faces are at all.

`TrackedFaces` is the tracker's memory, pure (no threads, no models): given what the detectors said
(the full detections of `full`, the crop re-detections of `tracker.LiveTracker`), which faces are
tracked now, which were lost (and where they were last seen), which appeared, and whether the face
positions are known at all this frame; `report()` gives the `FaceReport` the loop works from.

A face is never silently forgotten: one the crop re-detection cannot find is *lost* (its last place
kept, and looked for there again in every frame); a full detection that misses a tracked face leaves it tracked (the crop re-detection decides);
a lost face is dropped only when a full detection, run on a frame at least LOST_KEEP_FRAMES after
the loss at an input size at least as large as the one it was last found at, does not find it — so faces missed at a
lower detection size (the watchdog's low_res level) stay lost, never vanish.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vcamd.common.types import Face
from vcamd.live.tracking.full import FullDetection
from vcamd.privacy.geometry import SAME_TRACK_WIDTHS, near, near_any, near_matrix

log = logging.getLogger(__name__)

Clock = Callable[[], float]

SAME_FACE_IOU = 0.5
"""Two tracked results overlapping more than this are one face (tracks that converged)."""


LOST_KEEP_FRAMES = 30
"""A lost face stays covered at its last-known place for at least this many frames (1 s at 30
fps), whatever full detections say: a head turned away is not found by any detector, yet it is
still there and may be recognised in profile."""


JUMP_FRAMES = 12
"""A face that appears in the first whole look taken at or after another face's loss is taken for
that face having moved (see `TrackedFaces.take_full`), when that look ran on a frame at most this many
frames after the loss. The look asked for at the loss starts only when the full detector is free
(one in flight takes 100–300 ms on a loaded CPU), so it may run on a frame several after the loss:
a window of 3 frames missed it then (docs/reliability.md, "A face lost after the frame a
detection ran on")."""

JUMP_SIZE_CHANGE = 0.35
"""... when their widths differ by at most this share of the lost face's width."""




@dataclass(frozen=True, slots=True)
class FaceReport:
    """What the engine knows about the faces of one frame."""

    known: bool
    """Whether face positions are known this frame. False at start-up before the first detection,
    when the detector was late or failed, and after a face was lost in its crop until a full
    detection of a later frame says where the faces are (it may have moved anywhere)."""
    faces: list[Face]
    """Where the tracked faces are now (the last known places when `known` is False)."""
    lost: list[Face]
    """Last-known places of faces seen before and not found since."""
    appeared: list[Face]
    """Faces in `faces` not tracked in the previous frame (new, or found again elsewhere)."""
    full: bool = False
    """Whether a full-detection result came in with this frame."""
    followed: bool = False
    """Whether every face's position was followed by its pixels (`motion.follow`: the faces only
    moved since the detector last found them; no detector ran for this frame)."""
    unsure: list[Face] = field(default_factory=list)
    """Places the full detection scored in the unsure band (`unsure_band`), away from every tracked
    and lost face: covered, never swapped."""
    stable_since: tuple[int, ...] = ()
    """Per face of `faces`: the frame index since which its pixels only moved (the tracker followed
    them, or found them unchanged where it looked again); a swap made from a frame since then is
    the face as the camera shows it now. Empty: not known (every face counts as changed now)."""


@dataclass(frozen=True, slots=True)
class _Seen:
    face: Face
    size: int  # detector input size it was last found at by a full detection
    lost_at: int = -1  # frame index it was lost at (lost faces only)
    jump_looked: bool = False  # the jump rule's look (the first whole, fine enough one after the loss) was taken


def _jump_look_due(lost: _Seen, frame_index: int) -> bool:
    """The jump rule's look for `lost` is still to come, for a frame at `frame_index`."""
    return not lost.jump_looked and 0 <= frame_index - lost.lost_at <= JUMP_FRAMES


def _is_jump_look(result: FullDetection, lost: _Seen) -> bool:
    """`result` is the jump rule's look for `lost`: the first whole look after the loss, as fine as
    the detection that last found it, on a frame at most JUMP_FRAMES after the loss."""
    return result.whole and result.input_size >= lost.size and _jump_look_due(lost, result.frame_index)


@dataclass(frozen=True, slots=True)
class _Unsure:
    face: Face
    size: int  # detector input size of the full detection that found it
    seen_at: int  # frame index that detection ran on


def _away_from(places: list[_Unsure], faces: list[Face]) -> list[_Unsure]:
    """The places not `near` any of `faces` (`near_matrix`: a crowd has hundreds of each)."""
    if not places or not faces:
        return list(places)
    close: list[bool] = np.asarray(near_matrix([p.face for p in places], faces, SAME_TRACK_WIDTHS).any(axis=1)).tolist()
    return [p for p, c in zip(places, close) if not c]


def dedupe_faces(faces: list[Face]) -> list[Face]:
    """One face per place: greedily by score, a face overlapping a kept one by more than
    SAME_FACE_IOU is dropped (tracks that converged). Left to right.

    All pairwise overlaps come from one vectorised IoU matrix, so a group of 29 faces costs one
    small array operation per frame instead of hundreds of Python `_iou` calls."""
    if len(faces) < 2:
        return list(faces)
    by_score = sorted(faces, key=lambda f: -f.score)
    boxes = np.array([f.box for f in by_score], dtype=np.float64)
    x1, y1, x2, y2 = boxes.T
    areas = np.maximum(0.0, x2 - x1) * np.maximum(0.0, y2 - y1)
    iw = np.maximum(0.0, np.minimum(x2[:, None], x2[None, :]) - np.maximum(x1[:, None], x1[None, :]))
    ih = np.maximum(0.0, np.minimum(y2[:, None], y2[None, :]) - np.maximum(y1[:, None], y1[None, :]))
    inter = iw * ih
    union = areas[:, None] + areas[None, :] - inter
    same = inter > SAME_FACE_IOU * union  # iou > SAME_FACE_IOU, without dividing by an empty union
    dropped = np.zeros(len(by_score), dtype=bool)
    kept: list[Face] = []
    for i, face in enumerate(by_score):
        if dropped[i]:
            continue
        kept.append(face)
        dropped |= same[i]
    return sorted(kept, key=lambda f: f.box[0])


def _dedupe(seen: list[_Seen]) -> list[_Seen]:
    kept = {id(f) for f in dedupe_faces([s.face for s in seen])}
    return sorted((s for s in seen if id(s.face) in kept), key=lambda s: s.face.box[0])


class TrackedFaces:
    """The tracker's memory, pure: feed it full detections and crop re-detections, read reports."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (new camera, new detector): positions are unknown until a detection."""
        self._tracks: list[_Seen] = []
        self._lost: list[_Seen] = []
        self._started = False  # a full detection has come in
        self._unsure_since: int | None = None  # the newest frame index a face was lost in its crop at
        self._unsure: list[_Unsure] = []  # places scored in the unsure band (`_take_unsure`), near a face or not
        self._unsure_shown: tuple[list[_Unsure] | None, list[tuple[float, float, float, float]], list[Face]] = (None, [], [])
        """`unsure`'s last answer: (the `_unsure` list and the boxes of the faces it was worked out from, the places)."""

    @property
    def started(self) -> bool:
        """A full detection has come in since the last reset."""
        return self._started

    @property
    def tracks(self) -> list[Face]:
        return [s.face for s in self._tracks]

    @property
    def track_count(self) -> int:
        """len(tracks), without the list (asked per face of a crowd)."""
        return len(self._tracks)

    @property
    def lost(self) -> list[Face]:
        return [s.face for s in self._lost]

    @property
    def needs_full(self) -> bool:
        """A full detection is wanted now (nothing tracked, or a face lost and its place unknown)."""
        return not self._tracks or self._unsure_since is not None

    def take_full(self, result: FullDetection) -> list[Face]:
        """Merge a full detection; returns the faces that appeared (not tracked before)."""
        self._started = True
        previous = self._tracks
        matched: set[int] = set()
        tracks: list[_Seen] = []
        appeared: list[Face] = []
        # A face lost after the frame this detection ran on was looked for since, where it was, and
        # not found: the detection's older picture of it says nothing about where it is now. Taken
        # as found again, it put the track back at the old place, the crop missed it there a second
        # time, and the look after that second loss came from a frame before it, so the jump rule
        # never applied: the old place held for LOST_KEEP_FRAMES in about one call-bench run of
        # six (docs/reliability.md, "A face lost after the frame a detection ran on").
        lost_since = [s.face for s in self._lost if s.lost_at > result.frame_index]
        faces = [f for f, gone in zip(result.faces, near_any(result.faces, lost_since)) if not gone]
        # Each detection is the first track near it not taken yet (one array of pairs: a crowd's
        # hundred faces against a hundred tracks).
        pairs = near_matrix(faces, [s.face for s in previous]) if faces and previous else None
        taken = np.zeros(len(previous), bool)
        for k, face in enumerate(faces):
            candidates = np.flatnonzero(pairs[k] & ~taken) if pairs is not None else np.empty(0, np.intp)
            if len(candidates) == 0:
                appeared.append(face)
                tracks.append(_Seen(face, result.input_size))
                continue
            j = int(candidates[0])
            taken[j] = True
            matched.add(j)
            # A track the detection found keeps its own position: it is this frame's (its crop, or
            # its pixels followed), at the crop's finer scale, where the detection's is of an
            # older frame, downscaled; and it keeps its key patch, so the next frame follows it
            # instead of re-detecting every face of a group at once. What the detection adds is
            # the size it was found at.
            tracks.append(_Seen(previous[j].face, result.input_size))
        # A tracked face this detection did not see (it ran on an older frame, or at a lower size
        # that misses small faces) stays tracked: the crop re-detection says whether it is there.
        tracks += [s for i, s in enumerate(previous) if i not in matched]
        self._tracks = _dedupe(tracks)
        # One face lost, and just after (the detection asked for at the loss) one face appeared,
        # about its size, in a detection at least as fine: the face moved there (a jump, or a
        # camera that restarted its picture), its old place is free again. Anything less clear
        # (two lost, two appeared) keeps every lost place covered. (A new face appearing just as
        # the only other one turns away would be taken for it: a limit of the bookkeeping.)
        if len(appeared) == 1 and len(self._lost) == 1 and _is_jump_look(result, self._lost[0]):
            lost, face = self._lost[0], appeared[0]
            if abs(face.width - lost.face.width) <= JUMP_SIZE_CHANGE * lost.face.width:
                self._lost = []
        # Only the first such look can tell a jump: a face appearing later is someone else.
        self._lost = [dataclasses.replace(s, jump_looked=True) if _is_jump_look(result, s) else s for s in self._lost]
        # A lost face is found again near a detected face; it is gone when a detection of a frame
        # LOST_KEEP_FRAMES after the loss, at least as fine as where it was last found, and looking
        # where it was, does not see it.
        found_again = near_any([s.face for s in self._lost], faces)
        self._lost = [
            s for s, again in zip(self._lost, found_again)
            if not again
            and (result.frame_index < s.lost_at + LOST_KEEP_FRAMES or result.input_size < s.size or not result.covers(s.face))
        ]
        # Where the faces are is known again only from a look at the whole frame (a lost face may be anywhere).
        if self._unsure_since is not None and result.frame_index >= self._unsure_since and result.whole:
            self._unsure_since = None
        self._take_unsure(result)
        return appeared

    def _take_unsure(self, result: FullDetection) -> None:
        """Merge the places a full detection scored in the unsure band. Like a lost face, a place
        is dropped only by a detection that looked there, at least as fine as the one that found
        it, LOST_KEEP_FRAMES or more after it was last found (a score just either side of the
        band's edge must not uncover it every other look; a lower detection size misses small
        faces); found again, its new place replaces it. A place near a tracked or lost face is kept
        too, not reported while that face is near (`unsure`)."""
        if result.ok and result.unsure is not None:
            found = [_Unsure(face, result.input_size, result.frame_index) for face in result.unsure]
            # Found again, a place moves to its new box — unless the look was coarser than the one
            # that placed it: a low_res look's box of a fist beside a face drifted onto that face's
            # track and was taken for it below, and the fist was shown raw until a finer look.
            apart = {id(u) for u in _away_from(self._unsure, [f.face for f in found])}
            kept = [
                u for u in self._unsure
                if result.input_size < u.size  # a coarser look neither moves nor drops it
                or (id(u) in apart and (result.frame_index < u.seen_at + LOST_KEEP_FRAMES or not result.covers(u.face)))
            ]
            self._unsure = kept + found

    @property
    def unsure(self) -> list[Face]:
        """The unsure places away from every tracked and lost face now. A place near one is that
        face's (swapped or covered already) while it is near; dropped for it, the place was
        uncovered when the face moved on — SCRFD-500M's crop look of a 39-px track on the crowd
        drifted 14 px off a 31-px face the whole look scored unsure beside it, shown raw until the
        next look (the crowd row: 1–7 of 48 checked frames)."""
        faces = [s.face for s in self._tracks + self._lost]
        boxes = [face.box for face in faces]
        places, boxes_then, shown = self._unsure_shown
        if places is not self._unsure or boxes != boxes_then:  # a still crowd: the same answer each frame (the list is replaced on change)
            shown = [u.face for u in _away_from(self._unsure, faces)]
            self._unsure_shown = (self._unsure, boxes, shown)
        return list(shown)

    @property
    def finest_size(self) -> int:
        """The largest detector input size a face looked for now was found at by a full detection
        (0 when none): a full detection at less may not see it (small faces at low_res)."""
        return max((s.size for s in self._tracks + self._lost), default=0)

    def finer_look_wanted(self, frame_index: int, size: int) -> int:
        """The input size of the look that can let a lost face go when detections at `size` cannot
        (0: none wanted). A face lost after a finer detection found it (640, before the watchdog
        stepped to low_res's 320) is let go only by a look at least that fine (`take_full`): the
        jump rule's look just after the loss, and the look that drops it once it has been kept
        LOST_KEEP_FRAMES. On a reduced rung neither comes by itself, and the old place stays
        covered — held, the last output's face frozen where nobody is any more — until the rung
        climbs. Between the two the rung's own looks do (a finer one each frame would cost the
        CPU the rung is there to save)."""
        return max((s.size for s in self._lost if s.size > size
                    and (_jump_look_due(s, frame_index) or frame_index >= s.lost_at + LOST_KEEP_FRAMES)), default=0)

    @property
    def to_redetect(self) -> list[Face]:
        """The faces the crop re-detection looks for in this frame: the tracks, then the lost
        faces at their last-known places (found again there, they are tracked again)."""
        return [s.face for s in self._tracks] + [s.face for s in self._lost]

    def take_tracked(self, found: list[Face | None], frame_index: int) -> tuple[list[Face], list[Face]]:
        """Merge one crop re-detection per face of `to_redetect` (None: not in its crop);
        returns (faces lost now, lost faces found again).

        A re-detection is that face only when it is `near` where the face was: a crop around one
        face of a group also shows parts of its neighbours, and a detector that misses the face
        may find half a neighbour at the crop's edge. Followed there, the face's own place would be
        left uncovered while its track sat on someone else. So a detection that far off is a miss
        (the face is lost, covered at its last place, and looked for everywhere); and a track that
        lands on another track's face is lost at its previous place, never silently merged away."""
        looked_for = self._tracks + self._lost
        found = [f if f is not None and near(f, s.face) else None for s, f in zip(looked_for, found)]
        n = len(self._tracks)
        tracked, lost_found = found[:n], found[n:]
        lost_now = [_Seen(s.face, s.size, frame_index) for s, f in zip(self._tracks, tracked) if f is None]
        refound = [_Seen(f, s.size) for s, f in zip(self._lost, lost_found) if f is not None]
        still_lost = [s for s, f in zip(self._lost, lost_found) if f is None]
        moved = [(s, _Seen(f, s.size)) for s, f in zip(self._tracks, tracked) if f is not None]
        self._tracks = _dedupe([now for _, now in moved] + refound)
        kept = {id(t) for t in self._tracks}
        lost_now += [_Seen(before.face, before.size, frame_index) for before, now in moved
                     if id(now) not in kept and not any(near(t.face, before.face) for t in self._tracks)]
        self._lost = still_lost + lost_now
        # Known again only from a whole look at a frame after the newest loss: a look at a frame
        # between an earlier loss and this one cannot say where this face went (it showed the
        # face still at its old place, now covered as lost, while it was somewhere new and raw).
        if lost_now:
            self._unsure_since = frame_index
        # A lost face near a track (two tracks converged, a blink) is that track, not lost any more.
        self._lost = [s for s, near_track in zip(self._lost, near_any([s.face for s in self._lost], [t.face for t in self._tracks]))
                      if not near_track]
        return [s.face for s in lost_now], [s.face for s in refound]

    def report(self, *, late: bool, appeared: list[Face], full: bool, followed: bool = False) -> FaceReport:
        # "No face anywhere" is never known: a detector that sees nothing may be missing a face (a
        # camera back from noise, a face turned in): such a frame is covered whole, never shown raw.
        known = self._started and not late and self._unsure_since is None and bool(self._tracks)
        return FaceReport(known=known, faces=self.tracks, lost=self.lost, appeared=appeared, full=full,
                          followed=followed and not appeared, unsure=self.unsure)

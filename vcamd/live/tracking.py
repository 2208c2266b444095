"""Where the faces are in every frame, cheaply — and, as plainly, which faces the engine lost.

Three parts:
* `FullDetector` — full-frame detections on their own thread (`NewestWorker`): 50–200 ms on a CPU
  must never hold up a published frame;
* `FaceBook` — pure bookkeeping (no threads, no models): given what the detectors said, which faces
  are tracked now, which were lost (and where they were last seen), which appeared, and whether
  the face positions are known at all this frame;
* `LiveTracker` — finds the known faces again in every frame (crops, tiled when many, or one
  full detection of the frame when that costs less: `cropplan`), on a `BoundedCall` thread the
  loop waits on for at most a deadline, and runs the periodic full detections, feeding
  `FaceBook`; `update()` returns a `FaceReport`.

A face is never silently forgotten: one the crop re-detection cannot find is *lost* (its last place
kept, and looked for there again in every frame); a full detection that misses a tracked face leaves it tracked (the crop re-detection decides);
a lost face is dropped only when a full detection, run on a frame at least LOST_KEEP_FRAMES after
the loss at an input size at least as large as the one it was last found at, does not find it — so faces missed at a
lower detection size (the watchdog's low_res level) stay lost, never vanish.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vcamd.config import Config, FaceSelection, Others
from vcamd.faces.detect import input_shape_for
from vcamd.live.changes import WHOLE, ChangeMap, Look, Region, RegionImage, downscaled
from vcamd.live.cropplan import DetectCosts, Detecting, ShapeWarmer, cut_runs, nearest_to_centre, plan_shapes
from vcamd.live.geometry import SAME_TRACK_WIDTHS, near
from vcamd.live.motion import KeyPatch, follow, key_patch
from vcamd.live.stats import LiveStats
from vcamd.newest import BoundedCall, NewestWorker
from vcamd.quality import Level, detect_size
from vcamd.types import Face, Frame

log = logging.getLogger(__name__)

Clock = Callable[[], float]

SAME_FACE_IOU = 0.5
"""Two tracked results overlapping more than this are one face (tracks that converged)."""


LOST_KEEP_FRAMES = 30
"""A lost face stays covered at its last-known place for at least this many frames (1 s at 30
fps), whatever full detections say: a head turned away is not found by any detector, yet it is
still there and may be recognised in profile."""


JUMP_FRAMES = 3
"""A face that appears in a full detection of a frame at most this many frames after another face
was lost is taken for that face having moved (see `FaceBook.take_full`)."""

JUMP_SIZE_CHANGE = 0.35
"""... when their widths differ by at most this share of the lost face's width."""


PROBE_EVERY = 15
"""Every this many frames the tracker tries the crops instead of a full detection while their
cost has not been measured yet (`LiveTracker.update`)."""


# ---------------------------------------------------------------------------------------------
# Detector input sizes per level
# ---------------------------------------------------------------------------------------------


def detect_sizes(cfg: Config, level: Level) -> dict[str, int]:
    """{"full_size", "track_size"}: the detector input sizes at `level`."""
    det, scale = cfg.detection, cfg.watchdog.lowres_scale
    return {"full_size": detect_size(det.size, level, scale), "track_size": detect_size(det.track_size, level, scale)}


def unsure_band(cfg: Config) -> tuple[float, float] | None:
    """(threshold, cover_threshold) when the full detections also report the faces the detector
    is unsure of — scored in [cover_threshold, threshold): where every face shown must be swapped
    or covered (face_selection = "all", or others = "obscure"), they are covered
    (`FaceReport.unsure`). None: off (others = "show" leaves the faces the selection does not pick
    alone, unsure or not; and a frame with no face found at `threshold` is covered whole anyway)."""
    det = cfg.detection
    shown = cfg.swap.face_selection is not FaceSelection.all and cfg.swap.others is Others.show
    if shown or det.cover_threshold >= det.threshold:
        return None
    return det.threshold, det.cover_threshold


def all_detect_sizes(cfg: Config) -> list[int]:
    """Every input size a level may ask for (their sessions are built before the stream starts).
    The smaller crop inputs a small face chooses and the mosaics of a group are built when first
    needed (`cropplan.ShapeWarmer`)."""
    return sorted({size for level in Level for size in detect_sizes(cfg, level).values()})


# ---------------------------------------------------------------------------------------------
# Full detections
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FullDetection:
    faces: list[Face]  # frame coordinates
    frame_index: int  # the frame it was run on
    input_size: int  # the detector input size it ran at (of the whole frame: a region runs at the same scale)
    region: Region | None = None  # where it looked (`changes.ChangeMap`); None: the whole frame
    ok: bool = True  # False: the detector failed (nothing was really looked at)
    unsure: list[Face] | None = None
    """Faces scored in the unsure band (`unsure_band`), frame coordinates; None: not asked for."""

    @property
    def whole(self) -> bool:
        return self.region is None

    def covers(self, face: Face) -> bool:
        """Whether this detection looked where `face` is (its centre)."""
        return self.region is None or self.region.contains((face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2)


FullJob = tuple[Frame, Callable[[Face], Face | None], int, int, int, Region | None, tuple[float, float] | None]
"""(detector image, its detections → frame coordinates (None: drop), detector input size, frame
index, the whole frame's input size, the region looked at, the unsure band or None)."""


class FullDetector(NewestWorker[FullJob, FullDetection]):
    """Full detections on their own thread. The loop hands in a downscaled copy of the newest frame
    (the copy is the resize the detector would do anyway) — or of the region of it where the
    picture changed (`changes.ChangeMap`) — and picks the result up when ready."""

    def __init__(self, faces: Detecting, stats: LiveStats, clock: Clock) -> None:
        super().__init__("full-detector")
        self.faces = faces  # replaced between frames when the pipeline is rebuilt
        self._stats = stats
        self._clock = clock
        self.errors = 0
        self.runs = 0
        self.costs = DetectCosts()
        """CPU cost per detector input shape, shared with the tracker's crop re-detection."""

    def submit_downscaled(self, small: Frame, scale: float, frame_index: int, input_size: int, look: Look = WHOLE,
                          unsure: tuple[float, float] | None = None) -> None:
        """`small`: the frame as `changes.downscaled(frame, input_size)` gives it (a private copy).
        `unsure`: the band (`unsure_band`) whose faces the result reports apart, or None."""
        if look.region is None:
            to_frame = (lambda f: scaled(f, 1.0 / scale)) if scale != 1.0 else (lambda f: f)
            self.submit((small, to_frame, input_size, frame_index, input_size, None, unsure))
        else:  # the region's pixels of the same downscaled frame: the same faces, less to look at
            cut = RegionImage.cut(small, look.region)
            self.submit((cut.image, cut.to_frame, cut.input_size, frame_index, input_size, look.region, unsure))

    def take_result(self) -> FullDetection | None:
        return self.results.take(0)

    def _work(self, job: FullJob) -> FullDetection:
        image, to_frame, run_size, index, size, region, unsure = job
        t0 = self._clock()
        ok = True
        try:
            found = timed_detect(self.faces, image, run_size, self.costs, None if unsure is None else unsure[1])
        except Exception as exc:  # treated as "nothing found"; the next attempt comes soon
            self.errors += 1
            if self.errors <= 3:
                log.error("face detection failed: %s", exc)
            found, ok = [], False
        self._stats.record_stage("full_detect", (self._clock() - t0) * 1000.0)
        self.runs += 1
        faces = [face for face in map(to_frame, found) if face is not None]
        if unsure is None:
            return FullDetection(faces, index, size, region, ok)
        sure = [face for face in faces if face.score >= unsure[0]]
        return FullDetection(sure, index, size, region, ok, [face for face in faces if face.score < unsure[0]])


def timed_detect(faces: Detecting, image: Frame, size: int, costs: DetectCosts, threshold: float | None = None) -> list[Face]:
    """One detector run, its CPU time (this thread's: ONNX Runtime runs a one-thread session on the
    caller's) recorded against its input shape. `threshold`: the detector's own when None."""
    t0 = time.thread_time()
    found = faces.detect(image, size) if threshold is None else faces.detect(image, size, threshold)
    costs.record(input_shape_for(image.shape[:2], size), (time.thread_time() - t0) * 1000.0)
    return found


def scaled(face: Face, k: float) -> Face:
    x1, y1, x2, y2 = face.box
    return Face(box=(x1 * k, y1 * k, x2 * k, y2 * k), score=face.score, kps=(face.kps * np.float32(k)).astype(np.float32))


# ---------------------------------------------------------------------------------------------
# Bookkeeping: tracked, lost, appeared, known
# ---------------------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class _Seen:
    face: Face
    size: int  # detector input size it was last found at by a full detection
    lost_at: int = -1  # frame index it was lost at (lost faces only)


@dataclass(frozen=True, slots=True)
class _Unsure:
    face: Face
    size: int  # detector input size of the full detection that found it
    seen_at: int  # frame index that detection ran on


def _centres_widths(faces: list[Face]) -> tuple[np.ndarray, np.ndarray]:
    boxes = np.array([f.box for f in faces], np.float64)
    return (boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2] - boxes[:, 0]


def _away_from(places: list[_Unsure], faces: list[Face]) -> list[_Unsure]:
    """The places not `near` any of `faces` (vectorised: a crowd has ~100 of each)."""
    if not places or not faces:
        return list(places)
    pc, pw = _centres_widths([p.face for p in places])
    fc, fw = _centres_widths(faces)
    distance = np.hypot(pc[:, None, 0] - fc[None, :, 0], pc[:, None, 1] - fc[None, :, 1])
    close = (distance < SAME_TRACK_WIDTHS * np.maximum(np.minimum(pw[:, None], fw[None, :]), 1.0)).any(axis=1)
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


class FaceBook:
    """The tracker's memory, pure: feed it full detections and crop re-detections, read reports."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (new camera, new detector): positions are unknown until a detection."""
        self._tracks: list[_Seen] = []
        self._lost: list[_Seen] = []
        self._started = False  # a full detection has come in
        self._unsure_since: int | None = None  # a face was lost in its crop at this frame index
        self._unsure: list[_Unsure] = []  # places scored in the unsure band (`_take_unsure`)

    @property
    def started(self) -> bool:
        """A full detection has come in since the last reset."""
        return self._started

    @property
    def tracks(self) -> list[Face]:
        return [s.face for s in self._tracks]

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
        for face in result.faces:
            j = next((i for i, s in enumerate(previous) if i not in matched and near(face, s.face)), None)
            if j is None:
                appeared.append(face)
            else:
                matched.add(j)
            tracks.append(_Seen(face, result.input_size))
        # A tracked face this detection did not see (it ran on an older frame, or at a lower size
        # that misses small faces) stays tracked: the crop re-detection says whether it is there.
        tracks += [s for i, s in enumerate(previous) if i not in matched]
        self._tracks = _dedupe(tracks)
        # One face lost, and just after (the detection asked for at the loss) one face appeared,
        # about its size, in a detection at least as fine: the face moved there (a jump, or a
        # camera that restarted its picture), its old place is free again. Anything less clear
        # (two lost, two appeared) keeps every lost place covered. (A new face appearing just as
        # the only other one turns away would be taken for it: a limit of the bookkeeping.)
        if len(appeared) == 1 and len(self._lost) == 1 and result.whole:
            lost, face = self._lost[0], appeared[0]
            if (0 <= result.frame_index - lost.lost_at <= JUMP_FRAMES and result.input_size >= lost.size
                    and abs(face.width - lost.face.width) <= JUMP_SIZE_CHANGE * lost.face.width):
                self._lost = []
        # A lost face is found again near a detected face; it is gone when a detection of a frame
        # LOST_KEEP_FRAMES after the loss, at least as fine as where it was last found, and looking
        # where it was, does not see it.
        self._lost = [
            s for s in self._lost
            if not any(near(f, s.face) for f in result.faces)
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
        faces); found again, its new place replaces it. A place near a tracked or lost face is that
        face's (swapped or covered already)."""
        if result.ok and result.unsure is not None:
            found = [_Unsure(face, result.input_size, result.frame_index) for face in result.unsure]
            kept = [
                u for u in _away_from(self._unsure, [f.face for f in found])
                if result.frame_index < u.seen_at + LOST_KEEP_FRAMES or result.input_size < u.size or not result.covers(u.face)
            ]
            self._unsure = kept + found
        self._unsure = _away_from(self._unsure, [s.face for s in self._tracks + self._lost])

    @property
    def unsure(self) -> list[Face]:
        return [u.face for u in self._unsure]

    @property
    def finest_size(self) -> int:
        """The largest detector input size a face looked for now was found at by a full detection
        (0 when none): a full detection at less may not see it (small faces at low_res)."""
        return max((s.size for s in self._tracks + self._lost), default=0)

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
        if lost_now and self._unsure_since is None:
            self._unsure_since = frame_index
        # A lost face near a track (two tracks converged, a blink) is that track, not lost any more.
        self._lost = [s for s in self._lost if not any(near(t.face, s.face) for t in self._tracks)]
        return [s.face for s in lost_now], [s.face for s in refound]

    def report(self, *, late: bool, appeared: list[Face], full: bool, followed: bool = False) -> FaceReport:
        # "No face anywhere" is never known: a detector that sees nothing may be missing a face (a
        # camera back from noise, a face turned in): such a frame is covered whole, never shown raw.
        known = self._started and not late and self._unsure_since is None and bool(self._tracks)
        return FaceReport(known=known, faces=self.tracks, lost=self.lost, appeared=appeared, full=full,
                          followed=followed and not appeared, unsure=self.unsure)


# ---------------------------------------------------------------------------------------------
# The live tracker
# ---------------------------------------------------------------------------------------------


class LiveTracker:
    """Where the faces are in every frame, cheaply.

    Known faces are looked for again in every frame, on a `BoundedCall` thread the loop waits on
    for at most `deadline_s`, in whichever of two ways costs less CPU by the running estimates
    (`cropplan.DetectCosts`, measured on the threads that run the detector):

    * **crops** — a crop about twice each face's size (cut on the loop's thread), re-detected at
      `cropplan.crop_input_size` (a small face's at 64², a larger one's never below its own
      pixels, up to `track_size`); crops of one size tiled into one detector run where that
      costs no more pixels (`cropplan.pays`: a group photo's 29 faces in one 384×192 input);
    * **one full detection of this frame**, when it costs less (29 crops at 192² cost more than
      one 640×384 run) and runs at a size at least as fine as every face looked for was found at:
      a tracked face it does not find is lost in this frame, exactly as a crop that misses it
      (covered at its last place), and the faces it finds are where the faces are.

    Before either, a tracked face whose pixels only moved since the detector last found it
    (`motion.follow`: a phase-correlated shift, checked block by block over the face) is taken to
    be where it moved, without a detector run — at most REDETECT_EVERY − 1 frames in a row.

    Besides, a full-frame detection runs every `full_every` frames, whenever no face is tracked
    and as soon as a track is lost, on the `FullDetector` thread; its result is merged when it
    arrives (`FaceBook`).
    """

    def __init__(self, faces: Detecting, full: FullDetector, *, full_every: int, follow_motion: bool = True) -> None:
        self.faces = faces  # replaced between frames when the pipeline is rebuilt
        self._full = full
        self.full_every = full_every
        self.follow_motion = follow_motion
        """Whether faces whose pixels only moved are followed without a detector run (`motion`)."""
        self.book = FaceBook()
        self._last_full_submit: int | None = None
        self._call = BoundedCall("face-tracker")
        self.errors = 0
        self.late = 0
        self._warm = ShapeWarmer()
        self.plans = {"crops": 0, "full": 0}
        """How often each way was chosen (stats, tests)."""
        self.followed_frames = 0
        """Frames where every face looked for was followed by its pixels: no detector run."""
        self._keys: dict[int, tuple[Face, KeyPatch]] = {}
        """id(track's Face) → (that Face, its key patch): the faces `motion.follow` may follow."""
        self._followed_keys: dict[int, tuple[Face, KeyPatch]] = {}
        self._shapes_wanted = False  # the last plan wanted sessions not built yet (`warming`)
        self.changes = ChangeMap()
        """Where the picture changed since the full detector last looked: its periodic runs look only there."""
        self.followed_faces = 0
        """Faces placed by `motion.follow` instead of a detector run (stats, tests)."""
        self.looked: list[FullDetection] = []
        """The full detections that landed with the last `update` (`unseen.UnseenChanges` uncovers what they saw)."""
        self._look_soon = False

    @property
    def costs(self) -> DetectCosts:
        return self._full.costs

    @property
    def warming(self) -> bool:
        """Still warming up: no full detection has come in yet, or a crop or mosaic session is
        wanted and not built yet. Frames made meanwhile say little about what a level costs (the watchdog
        does not judge them)."""
        return not self.book.started or self._warm.busy or self._shapes_wanted

    @property
    def call_thread(self):
        return self._call.thread

    def reset(self) -> None:
        self.book.reset()
        self._keys = {}
        self._shapes_wanted = False
        self._last_full_submit = None
        self._look_soon = False
        self.changes.reset()
        # A new detector (pipeline rebuilt) has sessions and costs of its own: measured again.
        self._warm = ShapeWarmer()
        self._full.costs = DetectCosts()

    def stop(self) -> None:
        self._call.stop()

    def look_soon(self) -> None:
        """The picture changed where no face is known (`unseen`): the next `update` sends the full
        detector to look (where it changed) as soon as it is free, without waiting until it is due."""
        self._look_soon = True

    def update(self, frame: Frame, frame_index: int, *, full_size: int, track_size: int, deadline_s: float = 1.0,
               unsure: tuple[float, float] | None = None) -> FaceReport:
        """Where the faces are in `frame`. `unsure`: the band (`unsure_band`) whose faces the periodic
        full detections also report, as `FaceReport.unsure`; None: not looked for."""
        result = self._full.take_result()
        self.looked = [] if result is None else [result]
        if result is not None and not result.ok:
            self.changes.failed()
        appeared = self.book.take_full(result) if result is not None else []
        late = False
        full_now = False
        only_followed = False
        if everyone := self.book.to_redetect:
            # Tracked faces whose pixels only moved since the detector found them are where they
            # moved to (`motion.follow`); the others, and the lost faces, are looked for below.
            followed = self._follow(frame, everyone[: len(self.book.tracks)], frame_index)
            followed += [None] * (len(everyone) - len(followed))
            todo = [i for i, f in enumerate(followed) if f is None]
            looked_for = [everyone[i] for i in todo]
        else:
            followed, todo, looked_for = [], [], []
        if looked_for:
            sizes, crop_shapes, unready = plan_shapes(looked_for, track_size, self._warm.ready)
            self._shapes_wanted = bool(unready)
            self._warm.build(unready, self.faces)
            crops_ms = sum(self.costs.estimate(shape) for shape in crop_shapes)
            full_shape = input_shape_for(frame.shape[:2], full_size)
            full_ms = self.costs.estimate(full_shape)
            # ... only where it can see every face looked for: one found at a finer size than
            # this full detection's would be lost by it (the watchdog's low_res sizes).
            use_full = full_ms < crops_ms and full_size >= self.book.finest_size
            # The full detection's cost is measured by the FullDetector's own runs; the crops' is
            # extrapolated until they ran, so now and then they are tried while it is.
            if use_full and frame_index % PROBE_EVERY == 0 and self.costs.unmeasured(crop_shapes):
                use_full = False
            if use_full:
                self.plans["full"] += 1
                looked = self._full_here(frame, frame_index, looked_for, full_size, deadline_s)
            else:
                self.plans["crops"] += 1
                looked = self._redetect(frame, looked_for, sizes, deadline_s)
            found, here = looked
            if found is None:
                late = True  # a miss for this frame; the tracks are kept for the next one
            else:
                detected = found
                found = list(followed)
                for i, face in zip(todo, detected):
                    found[i] = face
                self._keep_keys(frame, [f for f in detected if f is not None], frame_index)
                appeared += self.book.take_tracked(found, frame_index)[1]
                if here is not None:  # this frame's own full detection: where every face is now
                    appeared += self.book.take_full(here)
                    self._last_full_submit, full_now = frame_index, True
                    self.looked.append(here)
        elif followed:  # every face looked for only moved: no detector run this frame
            self.followed_frames += 1
            only_followed = True
            self._keep_keys(frame, [], frame_index)
            appeared += self.book.take_tracked(list(followed), frame_index)[1]
        due = self._last_full_submit is None or frame_index - self._last_full_submit >= self.full_every
        # A face that left its crop (turned, moved fast) is looked for everywhere at once: with
        # several faces, waiting for the next due detection would leave it covered that long.
        if (due or self.book.needs_full or self._look_soon) and self._full.idle:
            self._look_soon = False
            self._look_for_new_faces(frame, frame_index, full_size, unsure)
        return self.book.report(late=late, appeared=appeared, full=result is not None or full_now,
                                followed=only_followed)

    def _look_for_new_faces(self, frame: Frame, frame_index: int, full_size: int, unsure: tuple[float, float] | None = None) -> None:
        """The full detection: where the picture changed since the last one looked (`changes`),
        or nowhere when nothing did — but the whole frame when a face was lost (it may be
        anywhere, and a crop cannot say where) or nothing is tracked yet."""
        whole = self.book.needs_full or bool(self.book.lost)
        small, scale = downscaled(frame, full_size)
        look = self.changes.where_to_look(small, scale, self._warm.ready, whole=whole)
        if self.changes.wanted is not None:  # a region shape without a session yet: built off the loop
            self._warm.build([self.changes.wanted], self.faces)
        if look is not None:
            self._full.submit_downscaled(small, scale, frame_index, full_size, look, unsure)
        self._last_full_submit = frame_index

    def _follow(self, frame: Frame, tracks: list[Face], frame_index: int) -> list[Face | None]:
        """Per tracked face: where it is if its pixels only moved since its key frame, else None."""
        out: list[Face | None] = []
        self._followed_keys = {}
        if not self.follow_motion:
            return [None] * len(tracks)
        for face in tracks:
            entry = self._keys.get(id(face))
            moved = follow(frame, entry[1], face, frame_index) if entry is not None and entry[0] is face else None
            if moved is not None:
                assert entry is not None
                self._followed_keys[id(moved)] = (moved, entry[1])
            out.append(moved)
        self.followed_faces += len(self._followed_keys)
        return out

    def _keep_keys(self, frame: Frame, detected: list[Face], frame_index: int) -> None:
        """The key patches for the next frame: a new one for each face a detector found in this
        frame, the same one for each face followed; every other is dropped (a full detection's
        merge gives a track a new position: it is re-detected once before it is followed again)."""
        keys = self._followed_keys
        for face in detected:
            key = key_patch(frame, face, frame_index)
            if key is not None:
                keys[id(face)] = (face, key)
        self._keys, self._followed_keys = keys, {}

    def _guarded(self, work: Callable[[], object], deadline_s: float):
        """Run `work` on the tracker thread, waiting at most `deadline_s`: (value) or None (late or failed)."""
        try:
            done, value = self._call.call(work, deadline_s)
        except Exception as exc:  # a failing detector is a miss for this frame, not a crash
            self.errors += 1
            if self.errors <= 3 or self.errors % 100 == 0:
                log.error("face tracking failed (%d so far): %s", self.errors, exc)
            return None
        if not done:
            self.late += 1
            return None
        return value

    def _redetect(self, frame: Frame, faces: list[Face], sizes: list[int],
                  deadline_s: float) -> tuple[list[Face | None] | None, None]:
        runs = cut_runs(frame, faces, sizes, self._warm.ready)  # `sizes` as plan_shapes chose them
        detect, costs = self.faces, self.costs
        found_lists = self._guarded(lambda: [timed_detect(detect, run.image, run.size, costs) for run in runs], deadline_s)
        if found_lists is None:
            return None, None
        found: list[Face | None] = [None] * len(faces)
        for run, dets in zip(runs, found_lists):
            if run.mosaic is not None:
                for i, face in zip(run.members, run.mosaic.split(dets)):
                    found[i] = face
            elif dets:
                assert run.crop is not None
                found[run.members[0]] = run.crop.to_frame(nearest_to_centre(dets, run.size))
        return found, None

    def _full_here(self, frame: Frame, frame_index: int, faces: list[Face], size: int,
                   deadline_s: float) -> tuple[list[Face | None] | None, FullDetection | None]:
        """One full detection of this frame (a downscaled private copy) instead of the crops;
        each face looked for is the nearest detection that is the same face (`near`), or None."""
        small, scale = downscaled(frame, size)
        detect, costs = self.faces, self.costs
        dets = self._guarded(lambda: timed_detect(detect, small, size, costs), deadline_s)
        if dets is None:
            return None, None
        dets = [scaled(f, 1.0 / scale) for f in dets] if scale != 1.0 else dets
        taken: set[int] = set()
        found: list[Face | None] = []
        for face in faces:
            cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
            candidates = [(((d.box[0] + d.box[2]) / 2 - cx) ** 2 + ((d.box[1] + d.box[3]) / 2 - cy) ** 2, j)
                          for j, d in enumerate(dets) if j not in taken and near(d, face)]
            if candidates:
                j = min(candidates)[1]
                taken.add(j)
                found.append(dets[j])
            else:
                found.append(None)
        return found, FullDetection(dets, frame_index, size)

"""`LiveTracker`: finds the known faces again in every frame (crops, tiled when many, or one full
detection of the frame when that costs less: `cropplan`), on a `BoundedCall` thread the loop waits
on for at most a deadline, runs the periodic full detections (`full`) and feeds `TrackedFaces`
(`trackedfaces`); `update()` returns a `FaceReport`."""


from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from vcamd.common.newest import BoundedCall
from vcamd.common.quality import Level
from vcamd.common.types import Face, Frame
from vcamd.faces.detect import input_shape_for
from vcamd.live.tracking import cropplan
from vcamd.live.tracking.changes import ChangeMap, downscaled
from vcamd.live.tracking.cropplan import DetectCosts, Detecting, LookStretch, ShapeWarmer, cut_runs, plan_shapes
from vcamd.live.tracking.full import FullDetection, FullDetector, scaled, timed_detect
from vcamd.live.tracking.latelook import Landed, LateLook, nearest_each
from vcamd.live.tracking.motion import KeyPatch, StableSince, follow_many, key_patch, renewed_keys, spread_due
from vcamd.live.tracking.sizes import TrackerSettings, detect_sizes, unsure_band, vouch_size
from vcamd.live.tracking.trackedfaces import FaceReport, TrackedFaces
from vcamd.privacy.geometry import near, same_face_pairs
from vcamd.privacy.rule import Box as FrameBox

T = TypeVar("T")

REFINE_SHARE = 0.25
"""The share of the loop's deadline (2 frame intervals) a frame waits for a look that only gives faces
a full look placed their own crop's keypoints: half a frame interval, so a crowd's frame (~20 ms of
its own work at 1080p) stays within the watchdog's 40 ms. Waiting the whole deadline, one 1080p crowd
face's look at det_10g's cost held its frame 33–46 ms, one face a frame for the first ~150 frames
(`loop_cost.py --rows crowd --at-10g`: p99 63–92 ms); a look that does not fit runs unwaited and
refines the face in the frame it lands in, a frame or two later."""

log = logging.getLogger(__name__)


class LiveTracker:
    """Where the faces are in every frame, cheaply.

    Known faces are looked for again in every frame, on a `BoundedCall` thread the loop waits on
    for at most `deadline_s`, in whichever of two ways costs less CPU by the running estimates
    (`cropplan.DetectCosts`, measured on the threads that run the detector):

    * **crops** — a crop about twice each face's size (cut on the loop's thread), re-detected at
      `cropplan.crop_input_size` (a small face's at 64², a larger one's never below its own
      pixels, up to `track_size`); crops of one size tiled into one detector run where that
      costs no more pixels (`cropplan.pays`: a group photo's 29 faces in one 384×192 input);
    * **one full detection of this frame**, when it costs less and runs at a size at least as fine
      as every face looked for was found at: a tracked face it does not find is lost in this frame,
      exactly as a crop that misses it (covered at its last place) — unless a full look found it and
      its pixels only moved since: then the miss is the crop's (`_vouch_by_pixels`).

    Before either, a tracked face whose pixels only moved since the detector last found it
    (`motion.follow`: a phase-correlated shift, checked block by block over the face) is taken to
    be where it moved, without a detector run — at most REDETECT_EVERY − 1 frames in a row, or until
    the detector has room for the periodic look (`cropplan.BACKSTOP_SHARE`), which the loop does
    not wait for when it is all the frame needs; and a face a full detection found is followed from
    the frame it looked at (`_key_appeared`). Besides, a full-frame detection runs every `full_every`
    frames, whenever no face is tracked and as soon as a track is lost, on the `FullDetector`
    thread; its result is merged when it arrives (`TrackedFaces`).
    """

    def __init__(self, faces: Detecting, full: FullDetector, *, full_every: int, follow_motion: bool = True) -> None:
        self.faces = faces  # replaced between frames when the pipeline is rebuilt
        self._full = full
        self.full_every = full_every
        self.follow_motion = follow_motion
        """Whether faces whose pixels only moved are followed without a detector run (`motion`)."""
        self.book = TrackedFaces()
        self._last_full_submit: int | None = None
        self._call = BoundedCall("face-tracker")
        self.errors = 0
        self.late = 0
        self.unwaited, self.stretch = 0, LookStretch()  # looks started without a wait (stretched estimate past the deadline)
        self._warm = ShapeWarmer()
        self.plans = {"crops": 0, "full": 0}  # how often each way was chosen (stats, tests)
        self.followed_frames = 0  # frames where every face looked for was followed by its pixels: no detector run
        self._keys: dict[int, tuple[Face, KeyPatch]] = {}
        """id(track's Face) → (that Face, its key patch): the faces `motion.follow` may follow."""
        self._followed_keys: dict[int, tuple[Face, KeyPatch]] = {}
        self._backstop_credit = cropplan.BackstopCredit()  # the periodic looks' share of the deadline, over frames
        self._backstop: dict[int, tuple[Face, KeyPatch]] = {}
        """Per index of a face the detector is due to look at again (`motion.REDETECT_EVERY`) whose
        pixels only moved: where they moved to, with its key — its place while that look runs late."""
        self._late: LateLook | None = None
        """The last re-detection that ran past the deadline, until it lands (`latelook`)."""
        self._late_since = (0.0, 0.0)  # when the late look started (monotonic s), and its CPU estimate (ms)
        # The last `_guarded` call started a look that ran late / raised (failing, not slow); the last look that finished raised.
        self._started_late = self._look_failed = self._failing = False
        self._stable = StableSince()
        self._shapes_wanted = False  # the last plan wanted sessions not built yet (`warming`)
        self.changes = ChangeMap()  # where the picture changed since the full detector last looked: its periodic runs look only there
        self.followed_faces = 0  # faces placed by `motion.follow` instead of a detector run (stats, tests)
        self.looked: list[FullDetection] = []
        """The full detections that landed with the last `update` (`unseen.UnseenChanges` uncovers what they saw)."""
        self._look_soon = False
        self._look_size = 0  # the least input size the look asked for by `look_soon` runs at
        self._looked_at: tuple[int, Frame] | None = None  # the last full look's frame (index, a copy): its faces' keys
        self._first_keys: list[KeyPatch] | None = None  # the first full look's keys still in use (None: not in yet)
        self.applied: TrackerSettings | None = None
        """The settings `configure` applied last: the detector sizes per level and the unsure band
        `locate` asks for come from them."""

    def configure(self, settings: TrackerSettings) -> None:
        """Apply the tracker's settings: the full detections' cadence ([detection] full_every), the
        detector sizes at each level ([detection] sizes, [watchdog] lowres_scale) and the unsure
        band ([detection] cover_threshold, with the selection that decides whether it is asked)."""
        self.applied = settings
        self.full_every = settings.full_every

    def locate(self, frame: Frame, frame_index: int, level: Level, *, deadline_s: float,
               covered: Sequence[FrameBox] | None = None) -> FaceReport:
        """`update` at the detector sizes `level` asks for, with the unsure band, as configured."""
        assert self.applied is not None, "configure() first"
        return self.update(frame, frame_index, **detect_sizes(self.applied, level), deadline_s=deadline_s,
                           unsure=unsure_band(self.applied), covered=covered)

    @property
    def vouch_size(self) -> int:
        """The detection size whose looks vouch for what they saw (`sizes.vouch_size`), as configured."""
        assert self.applied is not None, "configure() first"
        return vouch_size(self.applied)

    @property
    def costs(self) -> DetectCosts:
        return self._full.costs

    @property
    def warming(self) -> bool:
        """Still warming up: no full detection has come in yet, a crop or mosaic session is wanted and
        not built yet, or a face of the first one is still on the key that look gave it (a crowd's
        first looks, every face's first swap and paste: a second of frames at 100–200 ms that took it
        to frame_skip for good). Frames made meanwhile say little about what a level costs (the
        watchdog does not judge them)."""
        return not self.book.started or self._warm.busy or self._shapes_wanted or bool(self._first_keys)

    @property
    def call_thread(self) -> threading.Thread:
        return self._call.thread

    @property
    def cpu_s(self) -> float:
        """The crop re-detection thread's CPU time since it started (`newest.NewestWorker.cpu_s`)."""
        return self._call.cpu_s

    def reset(self) -> None:
        self.book.reset()
        self._keys, self._looked_at, self._first_keys = {}, None, None
        self._stable = StableSince()
        self._late = None
        self._shapes_wanted = False
        self._last_full_submit = None
        self._look_soon = False
        self.changes.reset()
        # A new detector (pipeline rebuilt) has sessions and costs of its own: measured again.
        self._warm = ShapeWarmer()
        self._full.costs, self.stretch = DetectCosts(), LookStretch()

    def stop(self) -> None:
        self._call.stop()

    def look_soon(self, size: int = 0) -> None:
        """The picture changed where no face is known (`unseen`): the next `update` sends the full
        detector to look (where it changed) as soon as it is free, without waiting until it is due,
        at an input size of at least `size` (`sizes.vouch_size`: only such a look uncovers it; on
        a reduced rung one look at the full size, then the rung's size again)."""
        self._look_soon = True
        self._look_size = size

    def update(self, frame: Frame, frame_index: int, *, full_size: int, track_size: int, deadline_s: float = 1.0,
               unsure: tuple[float, float] | None = None, covered: Sequence[FrameBox] | None = None) -> FaceReport:
        """Where the faces are in `frame`. `unsure`: the band (`unsure_band`) whose faces the periodic
        full detections also report, as `FaceReport.unsure`; None: not looked for. `covered`: the
        boxes (frame pixels) the last frame showed covered until a look vouches for them
        (`unseen.UnseenChanges.covers`), which the change map's backstop need not look at; None:
        not known (the backstop looks at the whole frame). The last frame's, as this frame's are
        drawn after the faces are found: covers hold until a look lands (a frame where one lands
        counts as covering nothing), but a covered group a moving face's zone takes in this frame
        is uncovered here and still counts as covered, for one backstop at most."""
        result = self._full.take_result()
        if result is not None:  # a face a region cut that no track accounts for may be someone new
            result = result.without_cut_of(self.book.tracks)
        self.looked = [] if result is None else [result]
        if result is not None and not result.vouches:
            self.changes.failed()  # the next look is the whole frame: at once when a region cut a face
            if result.cut:
                self.look_soon()
        appeared = self.book.take_full(result) if result is not None else []
        self._key_appeared(appeared, result)
        late = full_now = only_followed = False
        since_before = [self._stable.of(f, frame_index) for f in self.book.tracks]
        unchanged: list[bool] = []
        if everyone := self.book.to_redetect:
            # Tracked faces whose pixels only moved since the detector found them are where they
            # moved to (`motion.follow`); the others, and the lost faces, are looked for below.
            followed, unchanged = self._follow(frame, everyone[: self.book.track_count], frame_index)
            followed += [None] * (len(everyone) - len(followed))
            unchanged += [False] * (len(everyone) - len(unchanged))
            # A look that ran late, landed since: its faces where its detections still hold (waited for
            # within the deadline when this frame must look: one detector thread).
            todo = [i for i, f in enumerate(followed) if f is None]
            t0 = time.monotonic()
            news = self._late_news(frame, frame_index, [everyone[i] for i in todo], self._wait_s(todo, deadline_s))
            deadline_s = max(0.0, deadline_s - (time.monotonic() - t0))
            news_at = {i: n for i, n in zip(todo, news) if n is not None}
            todo = self._spare([i for i in todo if i not in news_at], everyone, followed, frame_index, track_size, deadline_s)
            looked_for = [everyone[i] for i in todo]
        else:
            followed, todo, looked_for, news_at = [], [], [], {}
        if looked_for or news_at:
            # A look only at faces due for their periodic look, pixels only moved, is not waited for:
            # they are where their pixels moved to meanwhile, as when it runs late (`latelook`).
            found, here = self._look(frame, frame_index, looked_for, [unchanged[i] for i in todo], full_size, track_size,
                                     self._wait_s(todo, deadline_s)) if looked_for else ([], None)
            if found is None:
                # Late: a face due for its periodic look whose pixels only moved is where they
                # moved to meanwhile, and a lost face stays lost (covered at its last place, looked
                # for everywhere by the full detection); a frame with any other tracked face not
                # looked at is a miss (the tracks are kept for the next one, with the keys the late
                # look's news gave).
                # Only for a look that is slow: a detector that fails cannot vouch that no other
                # face came in, so its frames are misses (covered), however still the faces are.
                if not self._look_failed and not self._must(todo):
                    self._at_backstop([i for i in todo if i < self.book.track_count], followed)
                    found, todo = [], []
                else:
                    late = True
                    self._key_tracks(everyone, news_at, frame_index)
            if found is not None:
                detected = found
                found = list(followed)
                for i, face in zip(todo, detected):
                    found[i] = face
                for i, n in news_at.items():
                    found[i] = n.face
                    unchanged[i] = n.unchanged
                vouched = self._vouch_by_pixels(found, everyone, [*todo, *news_at], frame_index)
                fresh: list[tuple[Face, bool, KeyPatch | None]] = [
                    (f, self._on_cycle(everyone[i], frame_index), None) for i, f in zip(todo, detected) if f is not None and i not in vouched]
                fresh += [(n.face, self._on_cycle(everyone[i], frame_index), n.key) for i, n in news_at.items()
                          if n.face is not None and i not in vouched]
                self._keep_keys(frame, fresh, frame_index)
                self._stable.keep(found, since_before, unchanged, frame_index)
                appeared += self.book.take_tracked(found, frame_index)[1]
                if here is not None:  # this frame's own full detection: where every face is now
                    appeared += self.book.take_full(here)
                    self._last_full_submit, full_now = frame_index, True
                    self.looked.append(here)
        elif followed:  # every face looked for only moved: no detector run this frame
            self.followed_frames += 1
            only_followed = True
            self._keep_keys(frame, [], frame_index)  # every face followed: the same keys
            self._stable.keep(list(followed), since_before, unchanged, frame_index)
            appeared += self.book.take_tracked(list(followed), frame_index)[1]
        due = self._last_full_submit is None or frame_index - self._last_full_submit >= self.full_every
        # A lost face a finer detection found (before a step down) is let go only by a look that fine.
        if finer := self.book.finer_look_wanted(frame_index, full_size):
            self.look_soon(max(finer, self._look_size if self._look_soon else 0))
        # A face that left its crop (turned, moved fast) is looked for everywhere at once: with
        # several faces, waiting for the next due detection would leave it covered that long.
        if (due or self.book.needs_full or self._look_soon) and self._full.idle:
            size = max(full_size, self._look_size) if self._look_soon else full_size
            self._look_soon = False
            # A look that landed now vouches for what it saw: the last frame's covers no longer say what is covered.
            self._look_for_new_faces(frame, frame_index, size, unsure, () if self.looked else covered)
        if self._first_keys:  # those still on the key the first full look gave them (`warming`)
            live = {id(key) for _, key in self._keys.values()}
            self._first_keys = [k for k in self._first_keys if id(k) in live]
        report = self.book.report(late=late, appeared=appeared, full=result is not None or full_now, followed=only_followed)
        return replace(report, stable_since=tuple(self._stable.of(f, frame_index) for f in report.faces))

    def _look_for_new_faces(self, frame: Frame, frame_index: int, full_size: int, unsure: tuple[float, float] | None = None,
                            covered: Sequence[FrameBox] | None = None) -> None:
        """The full detection: where the picture changed since the last one looked (`changes`),
        or nowhere when nothing did — but the whole frame when a face was lost (it may be
        anywhere, and a crop cannot say where) or nothing is tracked yet."""
        whole = self.book.needs_full or bool(self.book.lost)
        small, scale = downscaled(frame, full_size)
        look = self.changes.where_to_look(small, scale, self._warm.ready, whole=whole, covered=covered)
        if self.changes.wanted is not None:  # a region shape without a session yet: built off the loop
            self._warm.build([self.changes.wanted], self.faces)
        if look is not None:
            self._full.submit_downscaled(small, scale, frame_index, full_size, look, unsure)
            self._looked_at = (frame_index, frame.copy())  # the loop draws on `frame`
        self._last_full_submit = frame_index

    def _follow(self, frame: Frame, tracks: list[Face], frame_index: int) -> tuple[list[Face | None], list[bool]]:
        """Per tracked face: where it is if its pixels only moved since its key frame, else None;
        and whether its pixels only moved (also for a face the detector is due to look at again
        however it looks: `motion.REDETECT_EVERY`)."""
        self._followed_keys = {}
        self._backstop = {}
        if not self.follow_motion:
            return [None] * len(tracks), [False] * len(tracks)
        keyed = [(i, entry[1]) for i, face in enumerate(tracks)
                 if (entry := self._keys.get(id(face))) is not None and entry[0] is face]
        # Every keyed face at once (`motion.follow_many`: a crowd's still faces in one batch).
        moved_all = follow_many(frame, [(key, tracks[i]) for i, key in keyed])
        out: list[Face | None] = [None] * len(tracks)
        unchanged = [False] * len(tracks)
        for (i, key), moved in zip(keyed, moved_all):
            unchanged[i] = moved is not None
            if moved is None:
                continue
            if frame_index >= key.redetect_at:  # the backstop: looked at again all the same
                self._backstop[i] = (moved, key)
            else:
                out[i] = moved
                self._followed_keys[id(moved)] = (moved, key)
        self.followed_faces += len(self._followed_keys)
        return out, unchanged

    def _wait_s(self, todo: list[int], deadline_s: float) -> float:
        """How long the frame waits for a look at `todo`: the whole deadline when it must look
        (`_must`); REFINE_SHARE of it when the look only gives faces a full look placed their own
        crop's keypoints (`_refines`: placed and swapped meanwhile, and a look that does not fit
        lands a frame or two later, `latelook`); none for a look only at faces due for their
        periodic look."""
        if self._must(todo):
            return deadline_s
        return REFINE_SHARE * deadline_s if self._refines(todo) else 0.0

    def _must(self, todo: list[int]) -> bool:
        """Whether a look at `todo` is a must (the frame waits for it, and is a miss without it): a
        tracked face in it changed or has no key (is not only due for its periodic look, pixels only
        moved: `_backstop`), or the detector fails."""
        tracked = self.book.track_count
        return self._failing or any(i < tracked and i not in self._backstop for i in todo)

    def _refines(self, todo: list[int]) -> bool:
        """Whether a tracked face of `todo` whose pixels only moved is on a full look's key (its
        keypoints come from its own crop as soon as the look lands)."""
        tracked = self.book.track_count
        return any(i < tracked and i in self._backstop and self._backstop[i][1].coarse for i in todo)

    def _spare(self, todo: list[int], everyone: list[Face], followed: list[Face | None], frame_index: int, track_size: int,
               deadline_s: float) -> list[int]:
        """`todo` less the faces due only for their periodic look (pixels only moved: `_backstop`) past
        the credit the deadline's share for them leaves (`cropplan.BackstopCredit`, `backstop_share`:
        most overdue first): those are where their pixels moved to (in `followed`, keys kept), and
        due again next frame."""
        due = sorted((i for i in todo if i in self._backstop), key=lambda i: self._backstop[i][1].redetect_at)
        must = [i for i in todo if i not in self._backstop]
        share_ms = cropplan.backstop_share_ms(deadline_s)
        k, price_ms = cropplan.backstop_share(self.costs, [everyone[i] for i in must], [everyone[i] for i in due], track_size,
                                              self._warm.ready, self._backstop_credit.available(frame_index, share_ms))
        self._backstop_credit.spend(price_ms, share_ms)
        self._at_backstop(due[k:], followed)
        return sorted(must + due[:k])

    def _vouch_by_pixels(self, found: list[Face | None], everyone: list[Face], looked: list[int], frame_index: int) -> set[int]:
        """The faces of `looked` a crop missed (nothing near where the face is) although a full look
        found them and their pixels only moved since (`_backstop`, on that look's key: `KeyPatch.coarse`):
        each is where its pixels moved to, in `found`, its key kept and due again REDETECT_EVERY frames
        on. Returns them.

        The full look found the face and every block of it still matches what that look saw, so the face
        is there: the miss is the crop's — a crowd's 26-px face the 640 look finds at 0.54 and no 48-px
        tile sees. Lost, it made the whole frame unknown (held) and asked for a full look, whose find was
        lost again in its crop the next frame: the crowd flapped between known and unknown every other
        frame. A face its own crop found before and misses now is lost as before (the detector no longer
        sees what it saw — a turn, or a failing model: a NaN session finds nothing anywhere), and so is a
        face whose pixels changed."""
        vouched = [i for i in looked if i in self._backstop and self._backstop[i][1].coarse
                   and ((f := found[i]) is None or not near(f, everyone[i]))]
        for k, i in enumerate(vouched):
            moved, key = self._backstop[i]
            found[i] = moved
            self._followed_keys[id(moved)] = (moved, replace(key, due=spread_due(frame_index, k, len(vouched))))
        return set(vouched)

    def _at_backstop(self, faces: list[int], followed: list[Face | None]) -> None:
        """These faces (due for their periodic look, pixels only moved) where their pixels moved to, keys kept."""
        for i in faces:
            moved, key = self._backstop[i]
            followed[i], self._followed_keys[id(moved)] = moved, (moved, key)

    def _key_appeared(self, appeared: list[Face], result: FullDetection | None) -> None:
        """Keys for the faces a full look found that nobody tracked, cut from the frame it looked at (as a
        late look's), due at once: each is where its pixels only moved since until a crop looks at it
        (at once, within `cropplan.BACKSTOP_SHARE`: a crowd's first look spread over frames, not 150 crops)."""
        looked = self._looked_at
        if result is None or looked is None or looked[0] != result.frame_index:
            return
        for face in appeared:
            if (key := key_patch(looked[1], face, result.frame_index, result.frame_index, coarse=True)) is not None:
                self._keys[id(face)] = (face, key)
        if self._first_keys is None:
            self._first_keys = [key for _, key in self._keys.values()]

    def _on_cycle(self, face: Face, frame_index: int) -> bool:
        """Whether the detector looks at `face` now because its key's cycle came round (not because
        its pixels changed, or it has no key yet)."""
        entry = self._keys.get(id(face))
        return entry is not None and entry[0] is face and frame_index >= entry[1].redetect_at

    def _keep_keys(self, frame: Frame, detected: list[tuple[Face, bool, KeyPatch | None]], frame_index: int) -> None:
        """The key patches for the next frame (`motion.renewed_keys`): the faces followed keep theirs."""
        self._keys, self._followed_keys = renewed_keys(self._followed_keys, frame, detected, frame_index), {}

    def _guarded(self, work: Callable[[], T], deadline_s: float) -> T | None:
        """Run `work` on the tracker thread, waiting at most `deadline_s`: (value) or None (late or failed)."""
        self._started_late = self._look_failed = False
        starts = self._call.idle  # busy: the previous look still runs, nothing is started
        try:
            done, value = self._call.call(work, deadline_s)
        except Exception as exc:  # a failing detector is a miss for this frame, not a crash
            self._look_failed = self._failing = True
            self.errors += 1
            if self.errors <= 3 or self.errors % 100 == 0:
                log.error("face tracking failed (%d so far): %s", self.errors, exc)
            return None
        if not done:
            self.late += deadline_s > 0  # a look started without a wait is not late (`unwaited`)
            self._started_late = starts and self._call.late_pending
            return None
        self._failing = False
        done_value: T = value  # what `work` returned (BoundedCall hands it back untyped)
        return done_value

    def _look(self, frame: Frame, frame_index: int, looked_for: list[Face], unchanged: list[bool], full_size: int,
              track_size: int, deadline_s: float) -> tuple[list[Face | None] | None, FullDetection | None]:
        """`looked_for` found again in this frame, by crops or one full detection, whichever costs
        less: (per face its detection or None, this frame's full detection or None); (None, None)
        when it ran late — kept for a later frame (`latelook`) — or failed. `unchanged`: per face,
        whether its pixels only moved since its key (kept with a late look)."""
        sizes, crop_shapes, unready = plan_shapes(looked_for, track_size, self._warm.ready)
        self._shapes_wanted = bool(unready)
        self._warm.build(unready, self.faces)
        if not self._call.idle:  # the last look still runs: none starts (`_guarded`), so nothing is cut for one
            self.late, self._started_late, self._look_failed = self.late + 1, False, False
            return None, None
        crops_ms = sum(self.costs.estimate(shape) for shape in crop_shapes)
        full_shape = input_shape_for(frame.shape[:2], full_size)
        full_ms = self.costs.estimate(full_shape)
        # ... only where it can see every face looked for: one found at a finer size than
        # this full detection's would be lost by it (the watchdog's low_res sizes).
        use_full = full_ms < crops_ms and full_size >= self.book.finest_size
        # The full detection's cost is measured by the FullDetector's own runs; the crops' is
        # extrapolated until they ran, so now and then they are tried while it is.
        if use_full and frame_index % cropplan.PROBE_EVERY == 0 and self.costs.unmeasured(crop_shapes):
            use_full = False
        detect, costs = self.faces, self.costs
        self.plans["full" if use_full else "crops"] += 1
        # A look whose CPU, stretched as the last looks' was (`LookStretch`), is past the deadline is
        # started, not waited for: its frame is late at once, as after the wait. (Not while the
        # detector fails: its failure is met, and counted, within the wait.)
        estimate = full_ms if use_full else crops_ms
        if (estimate * self.stretch.value > 1000.0 * deadline_s or deadline_s <= 0.0) and not self._failing:
            deadline_s = 0.0
            self.unwaited += 1
        if use_full:
            small, scale = downscaled(frame, full_size)

            def full_work() -> list[Face]:
                dets = timed_detect(detect, small, full_size, costs)
                return [scaled(f, 1.0 / scale) for f in dets] if scale != 1.0 else dets

            work: Callable[[], Any] = full_work
            decode: Callable[[Any], list[Face | None]] = lambda dets: nearest_each(looked_for, dets)  # noqa: E731
        else:
            runs = cut_runs(frame, looked_for, sizes, self._warm.ready)  # `sizes` as plan_shapes chose them
            work = lambda: [timed_detect(detect, run.image, run.size, costs) for run in runs]  # noqa: E731
            decode = lambda found_lists: cropplan.crop_results(runs, found_lists, len(looked_for))  # noqa: E731
        t0 = time.monotonic()
        value = self._guarded(work, deadline_s)
        if value is not None:
            self.stretch.seen(1000.0 * (time.monotonic() - t0), estimate)
        if value is None:
            if self._started_late:
                self._late, self._late_since = LateLook.cut(frame, frame_index, looked_for, unchanged, decode), (t0, estimate)
            return None, None
        # One full detection of this frame: where every face is now.
        return decode(value), FullDetection(value, frame_index, full_size) if use_full else None

    def _late_news(self, frame: Frame, frame_index: int, faces: list[Face], wait_s: float) -> list[Landed | None]:
        """Per face of `faces` (the tracks and lost faces to look for in this frame): what the last
        late look, landed since (or within `wait_s`), says of it now (`LateLook.holds_now`), or None."""
        late, self._late = self._late, None
        if late is None:
            return [None] * len(faces)
        try:
            done, value = self._call.take_late(wait_s)
        except Exception as exc:  # a failing detector is a miss; the next look is waited for (counted there)
            log.debug("a late look failed: %s", exc)
            self._failing = True
            return [None] * len(faces)
        if not done:
            if self._call.late_pending:
                self._late = late  # still running
            return [None] * len(faces)
        self._failing = False  # ... and a look not waited for tells the stretch too (at most a frame late: an upper bound)
        self.stretch.seen(1000.0 * (time.monotonic() - self._late_since[0]), self._late_since[1])
        now = late.holds_now(frame, frame_index, value)
        return [None if j is None else now[j] for j in same_face_pairs(faces, late.faces)]

    def _key_tracks(self, everyone: list[Face], news_at: dict[int, Landed], frame_index: int) -> None:
        """On a late frame, the keys a landed late look gave, on the tracks as they are (the tracks are
        kept): those faces are followed from the next frame, and the next look is that much smaller."""
        landed = [(i, n) for i, n in news_at.items() if n.face is not None and n.key is not None and i < self.book.track_count]
        for k, (i, n) in enumerate(landed):
            assert n.key is not None
            self._keys[id(everyone[i])] = (everyone[i], replace(n.key, due=spread_due(frame_index, k, len(landed))))

"""One camera frame in, one frame out: the loop's work on each frame, in the order a frame travels.

`FrameProcessor.process(captured)`: where the faces are (the tracker, or the last positions on
frame_skip's skipped frames), which to swap (`face_selection`, through `FollowedFace`: "largest"
keeps the face it chose; a failed selection makes the positions unknown) and which to obscure
(the others, unless `[swap] others = "show"`), the face region handed to the swap worker without
waiting, then `compose` decides what each face gets (swapped / held / obscured), and `send` badges
and publishes. Before the
first face pipeline is installed (models loading at start-up), and while the first swap is being
computed, every frame is obscured whole and the tracker runs on every 4th frame only. Runs
on the loop's thread only; reads the engine's parts as they are now (a reload may replace them
between two frames).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import cv2
import numpy as np

from vcamd.common.quality import Level, rung
from vcamd.common.types import Captured, Face, Frame, Outcome, as_frame
from vcamd.config.schema import Config, OnMiss, Others, SmoothingConfig, SwapConfig
from vcamd.faces.following import FollowedFace
from vcamd.live.measures.stats import CAMERA_THREAD
from vcamd.live.measures.watchdog import Transition, TransitionResult
from vcamd.live.output.repaint import Repaint
from vcamd.live.startframes import StartFrames, Startup
from vcamd.live.swapbook import RefreshSlices, Swap, SwapBook
from vcamd.live.swapworker import SwapJob
from vcamd.live.tracking.smoothing import FaceSmoother
from vcamd.live.tracking.trackedfaces import FaceReport
from vcamd.live.tracking.unseen import UnseenChanges
from vcamd.privacy import rule
from vcamd.privacy.geometry import near_any
from vcamd.privacy.obscure import obscure_frame
from vcamd.privacy.rule import UNKNOWN_SOURCE, Box, Composed, FaceOutcome, Scene, lost_to_cover, region
from vcamd.privacy.turning import TurnedFaces

if TYPE_CHECKING:
    from vcamd.faces.results import SwappedFace
    from vcamd.live.parts import LiveParts

log = logging.getLogger(__name__)

TRACK_DEADLINE_FRAMES = 2.0
"""The loop waits at most this many frame intervals for the crop re-detection of a frame."""

SWAP_REGION_SCALE = 2.0
"""The region handed to the swap worker around the faces, relative to each box."""

FIRST_SWAP_TRACK_STRIDE = 4
"""While the first swap is computed (frames covered whole), the tracker runs on every 4th frame."""

NO_SOURCE_FACE = "no source face is set — use `vcamd set-face PHOTO`, the tray's Source face menu, or [swap] source_face"


@dataclass(frozen=True)
class FramePolicy:
    """The settings the loop applies to every frame (`FrameProcessor.configure`)."""

    others: Others
    cover_changes: bool
    on_miss: OnMiss
    max_result_age_s: float
    smoothing: SmoothingConfig

    @classmethod
    def of(cls, swap: SwapConfig, smoothing: SmoothingConfig) -> FramePolicy:
        return cls(swap.others, swap.cover_changes, swap.on_miss, swap.max_result_age_s, smoothing)


class FrameProcessor:
    """The loop's per-frame work on the engine's `parts`, and what it remembers from one frame to the next."""

    def __init__(self, parts: LiveParts, cfg: Config, started_at: float) -> None:
        self._parts = parts
        self.policy = FramePolicy.of(cfg.swap, cfg.smoothing)
        self.startup = Startup(started_at)
        parts.worker.first_shown = self.startup.shown  # the swap after the first waits until it is shown
        self._index = 0
        self._report: FaceReport | None = None  # the last frame's, reused on frame_skip's skipped frames
        self._report_t = 0.0  # the capture time of the frame `_report` looked at
        self.targets: list[Face] = []  # faces being swapped, as of the last processed frame
        self._faces_to_swap = 0  # how many the selection wanted swapped (targets may hold fewer: faces_per_round)
        self._covered_lost: list[Face] = []  # lost faces covered in the last frame
        self._others: list[Face] = []  # faces face_selection does not swap, obscured ([swap] others)
        self._follow = FollowedFace()  # which face "largest" keeps swapping; with a face map, who is who
        self._sources: dict[int, str | None] | None = None  # with a face map: id(target) → the source key it must show
        self._repaint = Repaint()  # the last frame's covers and swaps, put back where nothing changed
        self._book = SwapBook()  # the newest swap per face
        self._matched: tuple[int, list[Face], list[Swap | None], bool] | None = None  # this frame's (`_matched_swaps`)
        self._refresh = RefreshSlices()  # which due swaps are made again now
        self._turned = TurnedFaces()  # which faces read side-on in a recent look: covered, not half swapped
        self._steady = FaceSmoother()  # each tracked face's position filtered over time
        self._no_source_logged = False
        self.unseen = UnseenChanges()
        """Where the picture changed away from the known faces since a detection looked: covered."""
        self._unseen_shown: list[Box] = []
        """The last frame's `unseen` boxes as it showed them covered (the change map's backstop skips them)."""
        self.start = StartFrames()  # the start's newest covered frame, processed again when its wait is over
        self._again = False  # the frame being processed is a kept one, processed again (`startframes`)
        self._cpu = parts.stats.cpu.loop  # the loop's CPU by stage: marked as each stage ends
        # ... and the threads this work hands frames to, read through `parts` (a part replaced by a
        # reload is followed): each one's CPU is one stage of the frame.
        ledger = parts.stats.cpu
        ledger.watch(CAMERA_THREAD, "camera: read + decode", lambda: parts.reader.cpu_s)
        ledger.watch("face-tracker", "crop detection (tracker thread)", lambda: parts.tracker.cpu_s)
        ledger.watch("full-detector", "full detection", lambda: parts.full_detector.cpu_s)
        ledger.watch("swap-worker", "swap: align, model, crops", lambda: parts.worker.cpu_s)

    def configure(self, swap: SwapConfig, smoothing: SmoothingConfig) -> None:
        """Apply the per-frame policy's settings, [swap]'s and [smoothing] (from the next frame on)."""
        self.policy = FramePolicy.of(swap, smoothing)

    def process(self, captured: Captured, *, again: bool = False) -> None:
        """`again`: a kept frame of the start, processed again now that what it waited for is here."""
        parts = self._parts
        self._again = again
        self._cpu.begin()
        t_take = parts.clock()
        parts.stats.record_stage("queue", (t_take - captured.t_capture) * 1000.0)
        if again:
            parts.stats.again += 1
        else:
            parts.stats.processed += 1
        self.start.begin(parts)  # what the start waits on, as this frame finds it (`startframes`)
        frame = self._fit(captured.frame)
        level = parts.watchdog.level
        self._index += 1
        stage_ms: dict[str, float] = {}
        if not parts.enabled:
            self._repaint.forget()
            self.send(frame, Outcome.off, captured.t_capture)
            return
        if parts.faces is None:
            self.startup.while_loading += 1
            self.start.keep(captured, frame, parts, swap_shown=False)
            self.send_covered(frame, captured.t_capture)
            return
        thumb = self.unseen.remember(frame, self._index)  # before anything is drawn on it
        unseen_shown, self._unseen_shown = self._unseen_shown, []  # kept again below when this frame draws them
        self._cpu.mark("cover changes")
        if self._first_swap_running():
            if self._index % FIRST_SWAP_TRACK_STRIDE == 0:
                self._locate_and_submit(frame, level, captured.t_capture, stage_ms)
            self.start.keep(captured, frame, parts, swap_shown=False)
            self.send_covered(frame, captured.t_capture)
            return

        # 1. Where are the faces? 2. The swap worker gets their region. (Between strides of a
        # frame-skipping rung: the last positions, no new job.)
        if self._index % rung(level).frame_stride != 0 and self._report is not None:
            report, targets, lost = self._report, self.targets, self._covered_lost
        else:
            report, targets, lost = self._locate_and_submit(frame, level, captured.t_capture, stage_ms, unseen_shown)
        self.start.keep(captured, frame, parts, swap_shown=self.startup.first_swap is not None)  # before it is drawn on

        # 3. What changed away from those faces since a detection looked there is covered, and
        # looked at as soon as it holds still and the detector is free (`unseen`).
        unseen = (self.unseen.covers(thumb, report.faces + report.lost + report.unsure)
                  if report.known and self.policy.cover_changes else [])
        self._unseen_shown = unseen if self.policy.on_miss is not OnMiss.passthrough else []
        if unseen and self.unseen.settled:
            parts.tracker.look_soon(parts.tracker.vouch_size)
        self._cpu.mark("cover changes")

        # 4. What each face gets: its newest swap at its current place, held, or obscured.
        t2 = parts.clock()
        matched, usable = self._matched_swaps(targets)
        swaps = [m.swapped if usable and m is not None else None for m in matched]
        makers = {id(m.swapped): m.maker for m in matched if m is not None}  # a new source's swaps are never held back
        painter = self._repaint.painter(frame, parts.faces.composite, thumb, makers)  # the camera's cells, before any drawing
        composed = rule.compose(  # the one rule, `vcamd swap` asks it too
            Scene(frame=frame, enabled=True, on_miss=self.policy.on_miss, known=report.known, targets=targets,
                  swaps=swaps, lost=lost, held=parts.publisher.held, unsure=report.unsure, others=self._others,
                  unseen=unseen, sources=self._wants(targets) or [], turned=self._turned.update(targets, captured.t_capture)),
            parts.faces.composite, painter,
        )
        # Positions unknown and the whole frame obscured: every face covered (`Repaint.covered_whole`).
        painter.finish(covered_whole=not report.known and composed.outcome is Outcome.blurred)
        stage_ms["composite"] = (parts.clock() - t2) * 1000.0
        parts.stats.record_stage("composite", stage_ms["composite"])
        self._cpu.mark("composite")
        swapped_at = self._swapped_at(targets, matched, swaps, level)
        self.send(composed.frame, composed.outcome, captured.t_capture, stage_ms, composed=composed, targets=targets, swapped_at=swapped_at)
        # The loop's own time for this frame (take → published), the base of the overhead figure.
        parts.stats.record_stage("loop", (parts.clock() - t_take) * 1000.0)

    def _locate_and_submit(self, frame: Frame, level: Level, t_capture: float, stage_ms: dict[str, float],
                           unseen_shown: Sequence[Box] = ()) -> tuple[FaceReport, list[Face], list[Face]]:
        """Where the faces are in this frame (the tracker), which to swap, which lost ones to cover
        (remembered for the frames that reuse them); their region handed to the swap worker.
        `unseen_shown`: the last frame's `unseen` covers as drawn (none: nothing is covered)."""
        parts = self._parts
        t0 = parts.clock()
        report = parts.tracker.locate(frame, self._index, level, deadline_s=self._track_deadline_s(), covered=unseen_shown)
        self._cpu.mark("track")
        self.unseen.looked(parts.tracker.looked, parts.tracker.vouch_size)
        report = replace(report, faces=self._steady.steady(report.faces, t_capture, self.policy.smoothing, report.appeared))
        wanted, report = self._select(report, frame)
        self._faces_to_swap = len(wanted)
        wanted_ids = {id(w) for w in wanted}
        others = [f for f in report.faces if id(f) not in wanted_ids] if self.policy.others is Others.obscure else []
        targets, left_out = self._per_round(wanted)
        others += left_out  # faces to swap the round leaves out: obscured whatever [swap] others says
        # Lost faces are covered when they were faces being swapped or covered (obscured
        # bystanders included); a bystander shown by choice (others = "show") stays alone.
        lost = lost_to_cover(report.lost, report.known, self.targets + self._covered_lost + self._others)
        self._report, self.targets, self._covered_lost, self._others = report, targets, lost, others
        self._report_t = t_capture
        t1 = parts.clock()
        stage_ms["detect"] = (t1 - t0) * 1000.0
        parts.stats.record_stage("detect", stage_ms["detect"])
        self._cpu.mark("smooth, select")
        # The swap worker gets the region of the faces whose swap is out of date (it never waits):
        # a face whose pixels only moved since its swap's frame keeps its swap (`swapbook`), pasted
        # where it is now. While a swap runs, every frame's region replaces the job waiting for
        # it: the next swap starts on the newest frame (the face on screen is that much younger
        # for the whole next swap).
        out_of_date = self._out_of_date(targets, report, level) if targets and report.known else []
        wants = self._wants(out_of_date)  # a face map: who is not known yet, is not swapped
        out_of_date = out_of_date if wants is None else [t for t, k in zip(out_of_date, wants) if k != UNKNOWN_SOURCE]
        if out_of_date:
            self._submit(frame, out_of_date, level, t_capture)
            stage_ms["submit"] = (parts.clock() - t1) * 1000.0
            parts.stats.record_stage("submit", stage_ms["submit"])
            self._cpu.mark("swap hand-off")
        return report, targets, lost

    def _matched_swaps(self, targets: list[Face]) -> tuple[list[Swap | None], bool]:
        """Per target, its newest swap (`SwapBook`, with the worker's newest result merged), once a
        frame; and whether swaps may be shown at all (not while the model fails or hangs)."""
        parts = self._parts
        if self._matched is None or self._matched[0] != self._index or self._matched[1] is not targets:
            result, failed = parts.worker.latest()
            self._book.merge(result)
            usable = result is not None and not failed and not parts.worker.stale(parts.clock(), self.policy.max_result_age_s)
            self._matched = (self._index, targets, self._book.match(targets), usable)
        return self._matched[2], self._matched[3]

    def _switches(self) -> tuple[bool, bool]:
        """Whether the running pipeline has an enhancer and a pixel boost (`SwapBook.current`), as the watchdog is told."""
        watchdog = self._parts.watchdog
        return watchdog.enhancer_enabled, watchdog.boost_enabled

    def _maker(self) -> tuple[object, object]:
        faces = self._parts.faces
        return faces, None if faces is None else faces.source

    def _out_of_date(self, targets: list[Face], report: FaceReport, level: Level) -> list[Face]:
        """The targets whose swap does not show them as they are now (all of them while the model
        fails or hangs: only a new swap clears that), and those whose swap is `due` to be made
        again (with them, or alone when the worker is free: a slice at a time, `RefreshSlices`)."""
        matched, usable = self._matched_swaps(targets)
        if not usable:
            return list(targets)
        since = self._stable_since(report)
        maker, now, wants = self._maker(), self._parts.clock(), self._wants(targets) or [None] * len(targets)
        switches = self._switches()
        stale = [not SwapBook.check(m, since.get(id(t), self._index), level, maker, now, self._report_t, switches)
                 or (want is not None and _source_of(m) != want)  # another person's swap
                 for t, m, want in zip(targets, matched, wants)]
        worker = self._parts.worker
        usual_s = worker.usual_s or 0.0
        lead = RefreshSlices.lead_s(len(targets), usual_s)
        due = [not old and SwapBook.due(m, now, lead) for old, m in zip(stale, matched)]
        refresh = any(due) and (any(stale) or worker.idle)
        again = self._refresh.take(matched, due, now, usual_s) if refresh else [False] * len(due)
        return [t for t, old, d in zip(targets, stale, again) if old or d]

    def _wants(self, faces: list[Face]) -> list[str | None] | None:
        """With a face map, the source key each face must show (`FollowedFace.pick`); None without one."""
        return None if self._sources is None else [self._sources.get(id(f), UNKNOWN_SOURCE) for f in faces]

    def _stable_since(self, report: FaceReport) -> dict[int, int]:
        """id(face) → the frame index since which its pixels only moved (`FaceReport.stable_since`)."""
        if len(report.stable_since) != len(report.faces):
            return {}
        return {id(f): since for f, since in zip(report.faces, report.stable_since)}

    def _swapped_at(self, targets: list[Face], matched: list[Swap | None], swaps: list[SwappedFace | None],
                    level: Level) -> float | None:
        """When the camera last showed the faces as the shown swaps show them (`SwapBook.shown_since`,
        each swap checked against the faces the frame of `_report` saw); None when none is shown.
        Publish time minus it is the frame's swap age (stats, watchdog)."""
        shown = [(t, m) for t, m, sw in zip(targets, matched, swaps) if sw is not None and m is not None]
        since, maker, now = self._stable_since(self._report) if self._report else {}, self._maker(), self._parts.clock()
        switches = self._switches()
        for t, m in shown:
            SwapBook.check(m, since.get(id(t), self._index), level, maker, now, self._report_t, switches)
        return SwapBook.shown_since([m for _, m in shown])

    def _per_round(self, targets: list[Face]) -> tuple[list[Face], list[Face]]:
        """The faces to swap this round under the watchdog's `faces_per_round` (the face young
        again when several made it old), and those left out. The face kept is the one kept last
        frame, where it still is (no flicker between two faces of a size), else the largest."""
        cap = self._parts.watchdog.faces_per_round
        if cap is None or len(targets) <= cap:
            return targets, []
        kept_before = near_any(targets, self.targets)
        ranked = sorted(range(len(targets)), key=lambda i: (not kept_before[i], -targets[i].area))
        kept = set(ranked[:cap])
        return ([f for i, f in enumerate(targets) if i in kept], [f for i, f in enumerate(targets) if i not in kept])

    def _first_swap_running(self) -> bool:
        """The swap worker is computing its first face and there is none to paste yet.

        Until it lands every face would be covered anyway, so the frame is covered whole and the
        tracker runs only on every FIRST_SWAP_TRACK_STRIDE-th frame: the frame costs a mosaic
        instead of following faces, and the first swap gets the cores (inswapper on a 2-core CPU:
        1.6 s alone, 2.2 s beside the tracker). Tracked that often, the faces are where they are
        when it lands (left alone for its 2 s, they were lost and looked for again: 2–3 frames
        later on screen), and the worker has their newest region to swap next."""
        worker = self._parts.worker
        result, failed = worker.latest()
        return result is None and not failed and not worker.idle

    def _select(self, report: FaceReport, frame: Frame) -> tuple[list[Face], FaceReport]:
        """The faces to swap (`FollowedFace`: "largest" keeps the face it chose). A failed selection
        (e.g. the recognizer behind it) makes the positions unknown for this frame: covered, never
        shown raw."""
        faces = self._parts.faces
        try:
            if faces is None:
                raise RuntimeError("no face pipeline")  # never: the loop selects only while one runs
            picked = self._follow.pick(faces, report.faces, frame, self._index)
            mapped = faces.face_map is not None
            self._sources = {id(f): k for f, k in zip(picked.targets, picked.sources)} if mapped else None
            return picked.targets, report
        except Exception as exc:
            self._sources = {} if self._sources is not None else None  # with a face map: nobody known
            log.error("face selection failed: %s", exc)
            return list(report.faces), FaceReport(known=False, faces=report.faces, lost=report.lost, appeared=report.appeared, full=report.full,
                                                  unsure=report.unsure)

    def _track_deadline_s(self) -> float:
        """How long the loop waits for the tracker: TRACK_DEADLINE_FRAMES frame intervals. Long
        enough that a busy machine's slow frame is late rather than a miss; short enough that a
        hung detector costs the stream one short hiccup."""
        return TRACK_DEADLINE_FRAMES / max(1.0, self._parts.source.fps)

    def _fit(self, frame: Frame) -> Frame:
        """Frames must keep the size the sink was opened with (a camera may reopen at another)."""
        size = self._parts.publisher.size
        assert size is not None
        if (frame.shape[1], frame.shape[0]) != size:
            return as_frame(cv2.resize(frame, size, interpolation=cv2.INTER_AREA))
        return frame

    def _submit(self, frame: Frame, targets: list[Face], level: Level, t_capture: float) -> None:
        if not self._parts.has_source_face():
            if not self._no_source_logged:
                log.warning("%s; faces are covered until one is chosen", NO_SOURCE_FACE)
                self._no_source_logged = True
            return
        self._no_source_logged = False
        x0, y0, x1, y1 = region(frame, targets, SWAP_REGION_SCALE)
        crop = frame[y0:y1, x0:x1].copy()  # private copy: the loop keeps drawing on `frame`
        if (seen := getattr(self._parts.faces, "seen", None)) is not None:  # an int8 copy waits for calibration frames
            seen.offer_frame(frame)
        local = [_shift(f, x0, y0) for f in targets]
        self._parts.worker.submit(SwapJob(crop, local, list(targets), level, t_capture, self._index, self._maker(),
                                          sources=[k or "" for k in wants] if (wants := self._wants(targets)) is not None else None))

    def send_covered(self, frame: Frame, t_capture: float) -> None:
        """The whole frame obscured, without the face pipeline's per-frame work: no face pipeline
        yet (the models load at start-up: nothing can say where the faces are), or the first swap
        running. Whatever on_miss says: `passthrough` is the user's opt-out for a running swapper's
        misses, not for the seconds before any swap exists. The watchdog does not judge the frame."""
        obscure_frame(frame)
        self._repaint.covered_whole()  # every face covered: their first swaps come a few a frame
        self._cpu.mark("composite")
        self.send(frame, Outcome.blurred, t_capture, composed=Composed(frame, Outcome.blurred, [], fresh_badge=True, all_swapped=False),
                  judged=False)

    def send(
        self,
        frame: Frame,
        outcome: Outcome,
        t_capture: float | None,
        stage_ms: dict[str, float] | None = None,
        *,
        composed: Composed | None = None,
        targets: list[Face] | None = None,
        swapped_at: float | None = None,
        judged: bool = True,
    ) -> None:
        parts = self._parts
        if composed is not None and composed.fresh_badge:
            # held whole frames already carry the badge; off/passthrough/offline frames are not altered
            t = parts.clock()
            parts.publisher.badge(frame)
            if stage_ms is not None:
                stage_ms["badge"] = (parts.clock() - t) * 1000.0
                parts.stats.record_stage("badge", stage_ms["badge"])
            self._cpu.mark("badge")
        t_send = parts.clock()
        parts.publisher.send(frame, parts.status)
        self._cpu.mark("publish")
        now = parts.clock()
        parts.stats.record_stage("publish", (now - t_send) * 1000.0)
        swapped = composed is not None and FaceOutcome.swapped in composed.faces
        self.startup.published(now, swapped=swapped)
        if swapped:
            self.start.shown()
        if composed is not None:
            if composed.all_swapped:
                parts.publisher.remember_good(frame, targets or [], tuple(self._wants(targets or []) or ()))
            parts.stats.record_faces(composed.faces, None if swapped_at is None else (now - swapped_at) * 1000.0, composed.unsure_covered,
                                     composed.side_on_covered)
        latency = None if t_capture is None else (now - t_capture) * 1000.0
        parts.stats.record_publish(outcome, parts.watchdog.level, latency)
        # The watchdog judges the face pipeline's cost: frames without it (swapping off, models still
        # loading, covered whole while the first swap runs) say nothing about it. Lowered by cheap
        # loading frames on a busy machine, the first detections would run at a lower size and miss
        # small faces never seen before.
        # Nor do the frames of the tracker's warm-up (sessions being built, the first full
        # detection not in yet): they took a group to low_res before it was measured at full.
        # Nor a kept frame processed again: its latency holds the wait for what it waited for.
        if judged and not self._again and latency is not None and outcome is not Outcome.off and parts.faces is not None:
            swap_age_ms = None if composed is None or swapped_at is None else (now - swapped_at) * 1000.0
            log_events(parts.watchdog.observe(latency, stage_ms, warming=parts.tracker.warming, swap_age_ms=swap_age_ms,
                                              faces_to_swap=self._faces_to_swap))
        self._cpu.mark("stats, watchdog")


def log_events(events: list[Transition | TransitionResult]) -> None:
    for event in events:
        log.info(event.log_line())


def _shift(face: Face, dx: float, dy: float) -> Face:
    x1, y1, x2, y2 = face.box
    kps = (face.kps - np.array([dx, dy], np.float32)).astype(np.float32)
    return Face(box=(x1 - dx, y1 - dy, x2 - dx, y2 - dy), score=face.score, kps=kps)


def _source_of(swap: Swap | None) -> str | None:
    """Which source face a held swap shows (`SwappedFace.source`); None without one."""
    return swap.swapped.source if swap is not None and swap.swapped is not None else None

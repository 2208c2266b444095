"""Which swap each face shows, and which faces need a new one: `SwapBook`.

The swap worker returns swaps for the faces of the job it was given. The book keeps, per face, the
newest swap made for it (with the frame it was made from), merging each new result into what it
holds, so a job need only carry the faces whose swap is out of date:

* a face's swap is **current** when it was made from a frame since which the face's pixels only
  moved (`FaceReport.stable_since`: the tracker followed it, or found it unchanged where it looked
  again), with the swap work of the rung the frame is at (enhancer, pixel boost), by the same
  face pipeline and source face, at most REFRESH_S ago — drawn at the face's current keypoints it
  is the face as the camera shows it now;
* a face without a current swap goes into the next job; one with a current swap does not: a still
  group of 29 faces, or a crowd of 150, costs no swaps at all while nobody moves, and the faces
  that change are swapped a few at a time instead of the whole group with them.

Its age on screen (`swap_age_ms`: the face trailing the person, `shown_since`) counts from the
capture of the newest frame at which it was checked current for its face (`Swap.t_current`; at
first the frame it was made from): a swap kept for a face that then changed (or went past
REFRESH_S) showed the face as the camera did until that frame, not only at its own. A kept swap is
made again ahead of REFRESH_S (`due`), early enough that the new one lands before the old one goes
out of date; many faces' swaps, made together, are made again in slices (`RefreshSlices`), not all
in one job. A swap found for no face for KEEP_UNMATCHED frames is dropped. Loop thread only; no
models, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vcamd.common.quality import Level, swap_work
from vcamd.common.types import Face
from vcamd.privacy.geometry import near_any
from vcamd.privacy.rule import match_swaps

if TYPE_CHECKING:
    from vcamd.faces.results import SwappedFace
    from vcamd.live.swapworker import SwapResult

REFRESH_S = 2.0
"""A swap older than this is made again even for a face that did not change: what the book cannot
see changing (the enhancer's strength, a swapper replaced inside the pipeline) shows within it."""

REFRESH_AHEAD = 1.5
"""A kept swap is asked again this many usual swap times before REFRESH_S (the wait for the worker
and a slower swap under load fit in the margin)."""

REFRESH_AHEAD_MAX = 0.75
"""... but at most this share of REFRESH_S ahead (a swap as slow as REFRESH_S swaps the still face
all the time, not more)."""

REFRESH_SLICE = 8
"""Current swaps are made again at most this many at a time, or an eighth of the faces (REFRESH_SLICES)
if that is more; a group of up to this many goes in one job, as before."""

REFRESH_SLICES = 8
"""... so many faces are made again in up to this many slices, the oldest swaps first, at least
REFRESH_GAP_S apart, each when its turn must come for all to land in time (`RefreshSlices`). A
crowd's swaps are made together (its first swaps, a new source face) and so come due together:
made again in one job, that job is every face — a core for ~0.2 s beside the loop for
crowd_selfie's 146 faces and 146 new swaps to paste — and the watchdog took that wave, every
REFRESH_S, for overload (docs/performance.md, "The live loop"). In slices the same work comes a
slice at a time, and the swaps' ages spread apart for the next round."""

REFRESH_GAP_S = REFRESH_S / 32
"""The least time between two slices of a refresh (`REFRESH_SLICES`): 8 slices over ~0.5 s at 30 fps.
They are asked twice that far ahead (`RefreshSlices.lead_s`): slices go on frames, so a gap is up to
a frame longer."""

KEEP_UNMATCHED = 30
"""A swap no face has matched for this many frames is dropped (its face left, or was lost for
a second: found again, it is swapped again)."""


@dataclass(slots=True)
class Swap:
    """The newest swap made for one face."""

    face: Face  # where the face was, in the frame it was made from (frame coordinates)
    swapped: SwappedFace | None  # what `FacePipeline.composite` pastes; None: the swap showed too little of the face
    t_capture: float  # when the camera captured that frame
    frame_index: int  # that frame's index (`FrameProcessor`'s)
    level: Level  # the quality rung it was made at
    maker: tuple[Any, Any]  # (the face pipeline, its source face) it was made by: another's swap is out of date
    unmatched: int = 0  # frames in a row no face matched it
    seen: Face | None = None  # the face it was matched to last (frame coordinates)
    t_current: float = float("-inf")  # capture of the newest frame it was checked current for (`SwapBook.check`)

    def __post_init__(self) -> None:
        self.t_current = max(self.t_current, self.t_capture)  # it shows the face of its own frame


class SwapBook:
    """The newest swap per face, merged from the swap worker's results."""

    def __init__(self) -> None:
        self._swaps: list[Swap] = []
        self._merged: object | None = None  # the worker's result merged last (by identity)

    def clear(self) -> None:
        self._swaps = []

    def merge(self, result: SwapResult | None) -> None:
        """Take the worker's newest result (`swapworker.SwapResult`) once: each of its faces' swap
        replaces the one held for that face."""
        if result is None or result is self._merged:
            return
        self._merged = result
        faces = list(result.faces)
        # A new swap replaces the one made where its face was, and the one shown on its face (made
        # where the face was long ago: left behind, it would be matched again as the face passes).
        made_here = near_any([s.face for s in self._swaps], faces)
        shown_here = near_any([s.seen or s.face for s in self._swaps], faces)
        kept = [s for s, a, b in zip(self._swaps, made_here, shown_here) if not (a or b)]
        self._swaps = kept + [Swap(face, swapped, result.t_capture, result.frame_index, result.level, result.maker)
                              for face, swapped in zip(faces, result.swapped)]

    def match(self, targets: list[Face]) -> list[Swap | None]:
        """Per target, the swap made for it (greedily the nearest, as `compose.match_swaps` pairs
        them), or None; swaps no target matched age by one frame, and go after KEEP_UNMATCHED."""
        matched = match_swaps(targets, [s.face for s in self._swaps], list(self._swaps)) if targets else []
        ids = {id(s) for s in matched if s is not None}
        for target, s in zip(targets, matched):
            if s is not None:
                s.seen = target
        for s in self._swaps:
            s.unmatched = 0 if id(s) in ids else s.unmatched + 1
        self._swaps = [s for s in self._swaps if s.unmatched < KEEP_UNMATCHED]
        return matched

    @staticmethod
    def current(swap: Swap | None, stable_since: int, level: Level, maker: tuple[Any, Any], now: float,
                switches: tuple[bool, bool]) -> bool:
        """Whether `swap` shows its face as it is now (see the module doc). `switches`: whether the
        running pipeline has an enhancer and a pixel boost (`quality.swap_work`): a swap made at a
        rung that differs from this one in detection alone is the same swap, so a watchdog step to
        `low_res` without an enhancer does not make a crowd's every swap again."""
        enhancer, boost = switches
        return (swap is not None and swap.frame_index >= stable_since
                and swap_work(swap.level, enhancer, boost) == swap_work(level, enhancer, boost)
                and swap.maker[0] is maker[0] and swap.maker[1] is maker[1] and now - swap.t_capture <= REFRESH_S)


    @staticmethod
    def check(swap: Swap | None, stable_since: int, level: Level, maker: tuple[Any, Any], now: float, t_frame: float,
              switches: tuple[bool, bool]) -> bool:
        """`current`, for the frame captured at `t_frame` (the frame whose faces were looked at);
        when it is, the swap is remembered as showing its face as of that frame (`t_current`)."""
        ok = SwapBook.current(swap, stable_since, level, maker, now, switches)
        if ok and swap is not None:
            swap.t_current = max(swap.t_current, t_frame)
        return ok

    @staticmethod
    def shown_since(shown: list[Swap]) -> float | None:
        """When the camera last showed the shown faces as their swaps show them (the oldest of
        their `t_current`, after this frame's `check`); None when no swap is shown. Publish time
        minus it is the frame's swap age (stats, watchdog, status): one definition."""
        return min(s.t_current for s in shown) if shown else None

    @staticmethod
    def due(swap: Swap | None, now: float, lead_s: float) -> bool:
        """A current swap to make again now: within `lead_s` (about one swap's time, capped below
        REFRESH_S) of going past REFRESH_S, so its successor lands before it is out of date."""
        lead_s = min(max(lead_s, 0.0), REFRESH_AHEAD_MAX * REFRESH_S)
        return swap is not None and now - swap.t_capture > REFRESH_S - lead_s


class RefreshSlices:
    """Which due swaps are made again now (see REFRESH_SLICES): the oldest of them, up to a slice, at
    most once every REFRESH_GAP_S; asked far enough ahead (`lead_s`) that the last slice lands before
    REFRESH_S. A face whose swap is not current (a new face, one that changed) is never held back:
    this paces only swaps made again for faces that did not change. Loop thread only."""

    def __init__(self) -> None:
        self._last_t = float("-inf")

    @staticmethod
    def size(faces: int) -> int:
        """How many due swaps one slice makes again, for this many faces."""
        return max(REFRESH_SLICE, math.ceil(faces / REFRESH_SLICES))

    @staticmethod
    def lead_s(faces: int, usual_s: float) -> float:
        """How long before REFRESH_S a current swap is due: REFRESH_AHEAD usual swap times, and for
        faces that take more than one slice, two gaps a slice (`SwapBook.due` caps it at REFRESH_AHEAD_MAX).
        Due is a candidate: `take` says when its slice goes."""
        slices = math.ceil(faces / RefreshSlices.size(faces)) if faces else 0
        return REFRESH_AHEAD * usual_s + (2 * slices * REFRESH_GAP_S if slices > 1 else 0.0)

    def take(self, swaps: Sequence[Swap | None], due: Sequence[bool], now: float, usual_s: float = 0.0) -> list[bool]:
        """Per face, whether its due swap is made again now: the oldest due ones, up to a slice of
        len(swaps) faces, when the slices left could not all land in time if this one waited
        (`_start_by`), and not within REFRESH_GAP_S of the last slice. Faces that fit in one slice
        are made again together whenever due, as they always were."""
        size = self.size(len(swaps))
        if len(swaps) <= size:
            return list(due)
        if not any(due) or now - self._last_t < REFRESH_GAP_S:
            return [False] * len(due)
        order = sorted((k for k, d in enumerate(due) if d), key=lambda k: _made_at(swaps[k]))
        if now < _start_by([_made_at(swaps[k]) for k in order[::size]], usual_s):
            return [False] * len(due)
        chosen = set(order[:size])
        self._last_t = now
        return [k in chosen for k in range(len(due))]


def _start_by(slice_oldest: list[float], usual_s: float) -> float:
    """When the first of these slices (each given by its oldest swap's capture time, oldest first)
    must go for every one to land before REFRESH_S: each lands REFRESH_AHEAD usual swap times after
    it goes, and goes two gaps after the one before it (slices go on frames, and a gap is up to a
    frame longer). A slice asked earlier than that only makes its faces' swaps again sooner: a
    crowd whose swaps were spread apart by one round is made again once per REFRESH_S, a slice at a
    time as each comes due, not round after round a gap apart (crowd_selfie's 156 faces: every face
    made again every 0.84 s, 186 swaps a second, when each slice went as soon as it was due)."""
    slot = 2 * REFRESH_GAP_S
    return min(made + REFRESH_S - REFRESH_AHEAD * usual_s - (k + 1) * slot for k, made in enumerate(slice_oldest))


def _made_at(swap: Swap | None) -> float:
    return float("-inf") if swap is None else swap.t_capture

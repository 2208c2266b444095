"""The start's covered frames, processed again as soon as what they waited for is here.

Until the first swapped face goes out, every frame waits on something: the face models (loading:
the frame is covered whole), the first full detection (no face known yet: covered) or the first
swap (running: covered whole). Each lands between two camera frames, and the loop noticed it only
when the next camera frame came — up to a frame interval later (33 ms at 30 fps), once for each
of the three at every start. So while one of them is awaited, the loop keeps a copy of the newest
frame it processed (`StartFrames.keep`, before anything is drawn on it) and looks every POLL_S
between camera frames (`StartFrames.take`); once what the frame waited for is here, that frame is
processed again at once (`FrameProcessor.process`): located afresh and composed by the same rule
as every frame — a swap is put only on a face found in that very frame, where it was found, and
whatever cannot be said is covered. Each kept frame is processed again at most once; the first
full detection after an install at most once per pipeline (in an empty room every look lands
with nothing, and the frames are not sent twice for it).

What a frame waits on is judged from what it found when it began (`StartFrames.begin`, `Marks`),
not when it is kept: the detector and the swap worker deliver on their own threads, and a result
that lands while the frame is being processed — after the frame decided without it, before it is
kept — is news to that frame. Judged at keep time it was taken as already there: the frame went
out covered, was not kept, and with the camera stalled nothing showed the swap. `Startup` records when the first frame and
the first swapped face went out (the stats' `startup_ms`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from vcamd.common.types import Captured, Frame

if TYPE_CHECKING:
    from vcamd.live.capture.reader import LatestFrame
    from vcamd.live.parts import LiveParts

POLL_S = 0.005
"""While a kept frame waits, the loop looks this often between camera frames whether its wait is over."""


class Awaits(StrEnum):
    """What a frame of the start, covered, waits on."""

    models = "models"  # the face pipeline is loading
    look = "look"  # installed, nothing handed to the swap model yet: the first full detection
    swap = "swap"  # the first swap is running


def _mark(awaits: Awaits, marks: Marks, parts: LiveParts) -> int:
    """A number that changes when what `awaits` names is here, read from `marks` (now, or as a frame found it)."""
    if awaits is Awaits.models:
        return 0 if parts.faces is None else 1
    return marks.look if awaits is Awaits.look else marks.swap


@dataclass(frozen=True, slots=True)
class Marks:
    """What a frame found when it began (`StartFrames.begin`): the full detector's and the swap
    worker's result numbers, and whether a swap (or the model's failure) was there to go by."""

    look: int
    swap: int
    swap_done: bool

    @classmethod
    def of(cls, parts: LiveParts) -> Marks:
        result, swap = parts.worker.results.latest()
        return cls(parts.full_detector.results.latest()[1], swap, result is not None or parts.worker.latest()[1])


@dataclass(frozen=True, slots=True)
class Kept:
    captured: Captured  # a private copy of the frame as the camera gave it
    awaits: Awaits
    mark: int  # `_mark` when it was kept


class StartFrames:
    """The newest frame of the start, kept while it waits on something (see the module doc)."""

    def __init__(self) -> None:
        self._kept: Kept | None = None
        self._looked_for: object | None = None  # the pipeline whose first look was waited for already
        self._began: Marks | None = None  # what the frame being processed found when it began

    def begin(self, parts: LiveParts) -> None:
        """A frame begins: before anything in it reads the detector's or the swap worker's results."""
        self._began = Marks.of(parts)

    def keep(self, captured: Captured, frame: Frame, parts: LiveParts, *, swap_shown: bool) -> None:
        """After the loop located the faces of `frame` (the camera's `captured`, fitted), before
        anything is drawn on it: kept while the start waits on something, else nothing is."""
        began = self._began or Marks.of(parts)
        awaits = self._awaits(parts, swap_shown, began)
        self._kept = None if awaits is None else Kept(Captured(frame.copy(), captured.t_capture, captured.seq), awaits,
                                                      _mark(awaits, began, parts))

    def shown(self) -> None:
        """The frame kept last went out with a swapped face: nothing to show again."""
        self._kept = None

    def again(self, parts: LiveParts) -> Captured | None:
        """The kept frame, once what it waited for is here (then it is no longer kept); else None."""
        kept = self._kept
        if kept is None or _mark(kept.awaits, Marks.of(parts), parts) == kept.mark:
            return None
        self._kept = None
        if kept.awaits is Awaits.look:
            self._looked_for = parts.faces
        return kept.captured

    def take(self, slot: LatestFrame, interval: float, clock: Callable[[], float],
             between: Callable[[], Captured | None]) -> tuple[Captured | None, bool]:
        """The next camera frame within `interval` (and True), or None when none came. While a frame
        is kept, looked at every POLL_S: `between()` (the loop's commands, then `again`) may hand
        the kept frame back instead (and False)."""
        deadline = clock() + interval
        while True:
            left = max(0.0, deadline - clock())
            if self._kept is None:
                return slot.take(timeout=left), True
            captured = slot.take(timeout=min(POLL_S, left))
            if captured is not None:
                return captured, True
            if (kept := between()) is not None:
                return kept, False
            if left <= POLL_S:
                return None, True

    def _awaits(self, parts: LiveParts, swap_shown: bool, began: Marks) -> Awaits | None:
        if swap_shown or not parts.enabled:
            return None
        if parts.faces is None:
            return Awaits.models
        if began.swap_done:
            return None
        # Running, or landed since the frame began (its mark then differs at once: processed again).
        if not parts.worker.idle or parts.worker.results.latest()[1] != began.swap:
            return Awaits.swap
        return Awaits.look if self._looked_for is not parts.faces else None


@dataclass
class Startup:
    """When the first frame and the first swapped face reached the output, on the engine's clock,
    counted from `started_at` (the process start: `vcamd run` passes it)."""

    started_at: float
    first_frame: float | None = None
    first_swap: float | None = None
    before_first_swap: int = 0
    """Frames published before the first swapped one (placeholder cards and covered frames)."""
    while_loading: int = 0
    """Frames published while no face pipeline ran yet (the models loading): the first ones, all covered whole."""
    shown: threading.Event = field(default_factory=threading.Event)
    """Set once the first swapped face went out: what waits for the first swap's frame to have the
    cores (the swap worker's next job, the detector's lower-rung shapes) waits on it."""

    def published(self, now: float, *, swapped: bool) -> None:
        if self.first_frame is None:
            self.first_frame = now
        if swapped and self.first_swap is None:
            self.first_swap = now
            self.shown.set()
        if self.first_swap is None:
            self.before_first_swap += 1

    def to_json(self) -> dict[str, float | None]:
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - self.started_at) * 1000.0, 1)

        return {"first_frame": ms(self.first_frame), "first_swap": ms(self.first_swap)}

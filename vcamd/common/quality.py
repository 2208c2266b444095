"""The quality ladder: every quality level and what it turns on, in one table.

The watchdog walks this ladder one rung at a time (best quality first) when the live loop runs late,
and the user can pin a rung (`vcamd quality LEVEL`, the tray, the control page). What a rung means
is read from `LADDER` — whether the enhancer runs, whether detection runs at the reduced size
(`[watchdog] lowres_scale`), and every how many frames the faces are looked for — never from a
level's position, so a new degradation step is one `Level` member plus one `LADDER` row.

Pure standard library on purpose: the CLI parser lists the levels without importing numpy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType


class Level(IntEnum):
    """A rung of the quality ladder, best quality first (the member order is the ladder's order)."""

    full = 0
    no_boost = 4  # added later: the values of the others stay what clients know
    no_enhancer = 1
    low_res = 2
    frame_skip = 3


@dataclass(frozen=True, slots=True)
class Rung:
    """What the live loop does at one quality level."""

    label: str  # what the tray and the control page show
    enhancer: bool  # the face enhancer runs (when one is configured)
    reduced_detection: bool  # detection and tracking at `[watchdog] lowres_scale` of their sizes
    frame_stride: int  # look for faces every Nth frame; in between, the last positions are re-composited
    pixel_boost: bool = False  # faces swapped at `[swap] pixel_boost` px (when above the swapper's own size)


LADDER: MappingProxyType[Level, Rung] = MappingProxyType({
    Level.full: Rung("Full quality", enhancer=True, reduced_detection=False, frame_stride=1, pixel_boost=True),
    Level.no_boost: Rung("No pixel boost", enhancer=True, reduced_detection=False, frame_stride=1),
    Level.no_enhancer: Rung("No enhancer", enhancer=False, reduced_detection=False, frame_stride=1),
    Level.low_res: Rung("Lower resolution", enhancer=False, reduced_detection=True, frame_stride=1),
    Level.frame_skip: Rung("Every other frame", enhancer=False, reduced_detection=True, frame_stride=2),
})

BEST = Level.full
"""Where the ladder starts, and what "not degraded" means."""

AUTO = "auto"
"""The quality name that unpins the level (the watchdog decides again)."""


def rung(level: Level) -> Rung:
    return LADDER[level]


def label(level: Level) -> str:
    return LADDER[level].label


def quality_names() -> list[str]:
    """What `vcamd quality`, the control socket and the control page accept: "auto" and each level."""
    return [AUTO, *(level.name for level in Level)]


def is_degraded(level: Level) -> bool:
    return level is not BEST


MIN_DETECT_SIZE = 128
"""The smallest detector input a rung with reduced detection scales down to."""


def detect_size(size: int, level: Level, scale: float) -> int:
    """The detector input size `size` becomes at `level`: on the rungs with reduced detection
    `scale` × `size` (`[watchdog] lowres_scale`), a multiple of 32 and at least MIN_DETECT_SIZE."""
    if not rung(level).reduced_detection:
        return size
    return max(MIN_DETECT_SIZE, int(round(size * scale / 32.0)) * 32)


def _work(level: Level, enhancer_configured: bool, boost_configured: bool) -> tuple[bool, bool, bool, int]:
    """What a rung really changes: its enhancer and pixel boost count only when configured."""
    r = LADDER[level]
    return (r.pixel_boost and boost_configured, r.enhancer and enhancer_configured, r.reduced_detection, r.frame_stride)


def _no_op(order: list[Level], i: int, enhancer_configured: bool, boost_configured: bool) -> bool:
    """A rung that does the same work as the one above it (switching off an enhancer or a pixel
    boost that is not configured gains nothing): the watchdog steps over it."""
    return i > 0 and _work(order[i], enhancer_configured, boost_configured) == _work(order[i - 1], enhancer_configured, boost_configured)


def _neighbour(level: Level, step: int, enhancer_configured: bool, boost_configured: bool) -> Level | None:
    order = list(Level)
    i = order.index(level) + step
    while 0 <= i < len(order) and _no_op(order, i, enhancer_configured, boost_configured):
        i += step
    return order[i] if 0 <= i < len(order) else None


def lower(level: Level, *, enhancer_configured: bool = True, boost_configured: bool = False) -> Level | None:
    """The next rung down that does less work, or None at the bottom. `boost_configured`:
    `[swap] pixel_boost` is above the swapper's own size (its rung is given up first)."""
    return _neighbour(level, +1, enhancer_configured, boost_configured)


def higher(level: Level, *, enhancer_configured: bool = True, boost_configured: bool = False) -> Level | None:
    """The next rung up that does more work, or None at the top (pixel boost is taken back last)."""
    return _neighbour(level, -1, enhancer_configured, boost_configured)


def swap_work(level: Level, enhancer_configured: bool, boost_configured: bool) -> tuple[bool, bool]:
    """What a rung changes in the swap worker's work per round (what makes the face on screen old,
    and what a swap made at another rung shows differently): the pixel boost's tiles per face and the
    enhancer, where configured. The rungs that differ in detection alone make the same swap."""
    r = LADDER[level]
    return (r.pixel_boost and boost_configured, r.enhancer and enhancer_configured)


def lower_swap_work(level: Level, *, enhancer_configured: bool = True, boost_configured: bool = False) -> Level | None:
    """The nearest rung down whose swap work is less than `level`'s, or None (nothing below makes a
    swap faster: the rungs below change only the loop's detection)."""
    order = list(Level)
    now = swap_work(level, enhancer_configured, boost_configured)
    for below in order[order.index(level) + 1:]:
        if _less_work(swap_work(below, enhancer_configured, boost_configured), now):
            return below
    return None


def adds_swap_work(frm: Level, to: Level, *, enhancer_configured: bool = True, boost_configured: bool = False) -> bool:
    """Whether going from `frm` to `to` gives the swap worker more to do per round."""
    return _less_work(swap_work(frm, enhancer_configured, boost_configured), swap_work(to, enhancer_configured, boost_configured))


def _less_work(a: tuple[bool, ...], b: tuple[bool, ...]) -> bool:
    """`a` does less than `b`: nowhere more, somewhere less."""
    return a != b and all(x <= y for x, y in zip(a, b))


def worst(levels: Iterable[Level]) -> Level:
    """The lowest rung among these (BEST when there are none)."""
    order = list(Level)
    return max(levels, key=order.index, default=BEST)

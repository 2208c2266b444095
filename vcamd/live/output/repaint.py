"""The last frame's drawing put back where nothing it depends on changed: `Repaint`.

`compose` draws a frame's covers and swaps in one order, through a `compose.Painter`. On a still
picture — a group photo, people holding still — most of that is what the last frame drew: the same
swap at the same face (the tracker followed it by its pixels and found it unmoved: the same `Face`
object), the same place covered. `Repaint` keeps, for each thing drawn (a paste: its face and its
swap, by identity; a cover: its rectangle, and for a held one the held frame), the pixels its
rectangle had at the end of the last frame, and puts those back instead of drawing it again: a
100-face crowd costs a hundred small copies, not a hundred warps, blends and mosaics.

It puts a thing back only where that gives what drawing it again would, or covers more:

* the same thing was drawn in the last frame;
* nothing drawn anew in this frame before it overlaps its rectangle (what lies beneath it
  changed: it is drawn anew, and so is everything after it that it overlaps);
* its rectangle is put back as it was at the end of the last frame: what was drawn over it then (a
  neighbour's swap or cover) comes back with it, and is drawn or put back again on top. Where
  something drawn over it last frame is not drawn this frame, its last picture stays there — a
  swap or a cover where the camera's pixels would be: never less covered.

The camera's own pixels inside a rectangle put back are the last frame's: a swap is put back only
at a face the tracker found unmoved (its pixels checked block by block against its key frame,
`tracking.motion.follow`), or not looked at on a frame-skipping rung (pasted at its last place
either way); a cover covers whatever lies beneath. Keys hold the objects they name, so an `id` is
never taken for another object's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vcamd.common.types import Face, Frame
from vcamd.privacy.obscure import obscure_region
from vcamd.privacy.rule import Box, Held

GRID_PX = 8
"""What was drawn anew in a frame is marked on a grid of this many pixels a cell (an overlap test
per thing drawn is then one array slice, however many things a crowd draws)."""


@dataclass(slots=True)
class _Drawn:
    box: Box  # the rectangle it drew on, half-open, inside the frame
    refs: tuple[Any, ...]  # the objects its key names by id (kept alive: an id is never reused meanwhile)
    pixels: np.ndarray | None = None  # the rectangle at the end of the frame


class Repaint:
    """What the last frame drew, per thing drawn; `painter(frame, paste)` for each frame's compose,
    then `finish()`."""

    def __init__(self) -> None:
        self._last: dict[tuple[Any, ...], _Drawn] = {}
        self._shape: tuple[int, ...] | None = None
        self.put_back = 0
        """Things put back instead of drawn again, since the start (stats, tests)."""
        self.drawn = 0
        """Things drawn anew."""

    def painter(self, frame: Frame, paste: Callable[[Frame, Any, Face], Any]) -> FramePainter:
        if frame.shape != self._shape:
            self._last, self._shape = {}, frame.shape
        return FramePainter(self, frame, paste)

    def forget(self) -> None:
        """A frame was drawn some other way (covered whole, swapping off): nothing to put back."""
        self._last = {}


class FramePainter:
    """One frame's `compose.Painter`: puts back what it can (see the module doc), draws the rest."""

    def __init__(self, memo: Repaint, frame: Frame, paste: Callable[[Frame, Any, Face], Any]) -> None:
        self._memo = memo
        self._frame = frame
        self._paste = paste
        self._now: dict[tuple[Any, ...], _Drawn] = {}
        self._fresh_keys: set[tuple[Any, ...]] = set()
        h, w = frame.shape[:2]
        self._fresh = np.zeros((-(-h // GRID_PX), -(-w // GRID_PX)), bool)  # drawn anew this frame

    # -- compose.Painter ------------------------------------------------------------------------
    def hold(self, frame: Frame, box: Box, held: Held) -> None:
        box = _clipped(frame, box)
        key = ("hold", box, id(held.frame))
        if self._put_back(frame, key):
            return
        x0, y0, x1, y1 = box
        frame[y0:y1, x0:x1] = held.frame[y0:y1, x0:x1]
        self._drawn(key, box, (held.frame,))

    def obscure(self, frame: Frame, box: Box) -> None:
        box = _clipped(frame, box)
        key = ("obscure", box)
        if self._put_back(frame, key):
            return
        obscure_region(frame, box)
        self._drawn(key, box, ())

    def paste(self, frame: Frame, swapped: Any, face: Face) -> None:
        key = ("paste", id(face), id(swapped))
        if self._put_back(frame, key):
            return
        region = self._paste(frame, swapped, face)
        if region is not None:
            self._drawn(key, (region.x0, region.y0, region.x1, region.y1), (face, swapped))

    # -- the frame's end ----------------------------------------------------------------------------
    def finish(self) -> None:
        """Keep what each thing drawn this frame left in its rectangle: a thing drawn anew, or one
        put back that something drawn anew overlaps, is copied from the frame; the others keep
        the pixels they had (the same)."""
        frame = self._frame
        for key, drawn in self._now.items():
            if drawn.pixels is None or key in self._fresh_keys or self._overlaps_fresh(drawn.box):
                x0, y0, x1, y1 = drawn.box
                drawn.pixels = frame[y0:y1, x0:x1].copy()
        self._memo._last = self._now

    # -- helpers ----------------------------------------------------------------------------------
    def _put_back(self, frame: Frame, key: tuple[Any, ...]) -> bool:
        last = self._memo._last.get(key)
        if last is None or last.pixels is None or key in self._now or self._overlaps_fresh(last.box):
            return False
        x0, y0, x1, y1 = last.box
        frame[y0:y1, x0:x1] = last.pixels
        self._now[key] = last
        self._memo.put_back += 1
        return True

    def _drawn(self, key: tuple[Any, ...], box: Box, refs: tuple[Any, ...]) -> None:
        x0, y0, x1, y1 = box
        if x1 <= x0 or y1 <= y0:
            return
        self._fresh[y0 // GRID_PX : -(-y1 // GRID_PX), x0 // GRID_PX : -(-x1 // GRID_PX)] = True
        self._now[key] = _Drawn(box, refs)
        self._fresh_keys.add(key)
        self._memo.drawn += 1

    def _overlaps_fresh(self, box: Box) -> bool:
        x0, y0, x1, y1 = box
        return bool(self._fresh[y0 // GRID_PX : -(-y1 // GRID_PX), x0 // GRID_PX : -(-x1 // GRID_PX)].any())


def _clipped(frame: Frame, box: Box) -> Box:
    """`box` inside the frame, whole pixels (as `obscure.obscure_region` clips it)."""
    h, w = frame.shape[:2]
    return max(0, int(box[0])), max(0, int(box[1])), min(w, int(box[2])), min(h, int(box[3]))

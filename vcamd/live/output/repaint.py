"""The last frame's drawing put back where what it shows did not change: `Repaint`.

`compose` draws a frame's covers and swaps in one order, through a `compose.Painter`. On a still
picture — a group photo, a crowd, people holding still — most of that is what the last frame drew.
`Repaint` keeps, for each thing drawn, its **layer**: the pixels its rectangle had right after it was
drawn (a large cover's as its `obscure.Mosaic`, which draws them again), and the change detector's cell
means (`unseen.cell_means`, the frame's thumbnail the loop makes anyway) under that rectangle as
the camera showed them then. It puts the layer back instead of drawing the thing again when:

* the same thing is drawn: a cover at the same rectangle (a held one from the same last good
  output), a paste of the same swap (`SwappedFace`, by identity: a new swap is always drawn) at
  its face where it was — keypoints within PLACE_WIDTHS of its width of where they were;
* a swap: the camera did not change under it — no cell of the thumbnail under its rectangle moved
  by more than the change detector's own `changes.CHANGE_LIMIT` since the layer was drawn (compared
  with that frame, not the previous one: a slow change adds up until it shows). Sensor noise moves
  a cell mean by a level or two — a noisy camera's still faces are put back; a face, a hand, a pan
  moves them by tens — drawn again. (A cover is put back at the same rectangle whatever lies
  beneath it: its mosaic of what was there hides it as well as a new one would);
* for a paste (its feathered edge blends into what lies beneath), nothing beneath it changed: no
  thing overlapping it was drawn anew before it in this frame, no cover that lay beneath it last
  frame is gone, and no swap put back before it overlapping it came after it last frame. A cover
  (held or obscured) hides what lies beneath whole: it needs none of this, so one cover changing in
  a crowd redraws that cover and the swaps over it, not every cover that overlaps it in turn; a
  rectangle inside one of the last frame's covers (an unsure place's box jittered) keeps that one.

A layer put back keeps the cells it was drawn with (the picture's drift is measured from there)
and holds what the thing drew, not what was drawn over it afterwards: the things after it are put
back or drawn again on top, in compose's order. A cover that lay beneath a swap last frame and is
not drawn now leaves the swap drawn again over the camera's pixels. A cover drawn after a swap in the
same frame (a paste that failed) is always drawn. Keys hold the objects they name, so an `id` is
never taken for another object's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from vcamd.common.types import Face, Frame
from vcamd.live.tracking.changes import CHANGE_LIMIT, largest_change
from vcamd.live.tracking.unseen import cell_means
from vcamd.privacy.obscure import Mosaic, obscure_region
from vcamd.privacy.rule import MISS_REGION_SCALE, Box, Held, region

GRID_PX = 8
"""What was drawn anew in a frame is marked on a grid of this many pixels a cell (an overlap test
per thing drawn is then one array slice, however many things a crowd draws)."""

PLACE_WIDTHS = 0.1
"""A swap's layer is put back for its face while each keypoint is within this share of the face's
width of where it was drawn. The camera's pixels under it did not change (the cells say so), so the
face is where the layer shows it: what moves the keypoints by less is the detector's jitter on the
same pixels; a face taken for another (a swap matched to a neighbour) is a width away."""


MOSAIC_KEPT_FROM = 160_000
"""A cover of this many pixels or more is kept as its mosaic (`obscure.Mosaic`), drawn again when put
back; a smaller one as a copy of its rectangle. Drawing a mosaic again writes the rectangle once; a
copy is read and written when kept and again when put back — but a copy of a small rectangle is one
numpy call (a 40² cover: 1 µs against 8 µs to draw its mosaic again), and a crowd puts back
hundreds a frame. Even at 400² (2026-12-06, this VM: 74 µs against 40 + 31 µs), ahead from there
(1000²: 286 against 256 + 254 µs; a 1080p frame half covered by a moving body: 0.2 CPU-ms a frame)."""

PLACE_CELL_PX = 64
"""The last frame's swaps are found by place on squares of this side (a face's centre moves less
than a square between two frames where its layer is still good: PLACE_WIDTHS of its width)."""

NEW_SWAPS_PER_FRAME = 8
"""A swap made again for a face whose picture did not change (the swap worker refreshes a crowd's
still faces together, `swapbook.REFRESH_S`) is pasted in at most this many faces a frame; the
others keep their layer — the older swap of the same face by the same face pipeline, source photo
and face map source (`FramePainter`'s `makers`), as the camera shows it — until a later frame's turn
(150 faces: twenty frames, two thirds of a second — the swaps are made again every two — instead of
one frame of 150 pastes). A face that moved, changed or is new, or a swap made by another pipeline
or of another source, is pasted at once — unless it was covered last frame (a cover over it, or
the whole frame covered: the first swap running, positions unknown): then it takes the same turns,
covered until its own (a crowd's start: 150 first swaps 8 a frame, not 150 pastes in one)."""


@dataclass(slots=True)
class _Layer:
    box: Box  # the rectangle it drew on, half-open, inside the frame
    refs: tuple[Any, ...]  # the objects its key names by id (kept alive: an id is never reused meanwhile)
    pixels: np.ndarray | Mosaic | None  # the rectangle right after it was drawn: a copy, or a cover's mosaic (drawn again)
    cells: np.ndarray  # the camera's cell means (the whole thumbnail) of the frame it was drawn on
    seq: int  # its place in its frame's drawing order
    under: tuple[int, int, int, int]  # the thumbnail's cells its rectangle touches (x0, y0, x1, y1, half-open)
    face: Face | None = None  # a paste: the face it was drawn at
    shows: tuple[Any, ...] = ()  # a paste: what its swap shows (`FramePainter.paste`'s `makers`)
    nose: tuple[float, float] = (0.0, 0.0)  # a paste: its face's third keypoint (`_nose`, for `FramePainter._before`)


class Repaint:
    """What the last frame drew, per thing drawn; `painter(frame, paste, cells)` for each frame's
    compose, then `finish()`."""

    def __init__(self) -> None:
        self._last: dict[tuple[Any, ...], _Layer] = {}
        self._stand_ins: set[tuple[Any, ...]] = set()  # of `_last`: covers kept in a swap's place, not beneath the swaps
        self._shape: tuple[int, ...] | None = None
        self._cells: np.ndarray | None = None  # the newest camera cells told apart (`_same_cells`)
        self._covered_whole = False  # the last frame was covered whole: every face in it was covered
        self.put_back = 0
        """Things put back instead of drawn again, since the start (stats, tests)."""
        self.drawn = 0
        """Things drawn anew."""

    def painter(self, frame: Frame, paste: Callable[[Frame, Any, Face], Any], cells: np.ndarray | None = None,
                makers: Mapping[int, tuple[Any, ...]] | None = None) -> FramePainter:
        """`cells`: the camera frame's `unseen.cell_means`, taken before anything was drawn on it
        (made here when not given). `makers`: per swapped face (by id), what made it — the face
        pipeline and source face, and the face map's source (`swapbook.Swap.maker`, `SwappedFace.source`):
        a new swap that shows something else than a face's older layer is never held back behind it."""
        if frame.shape != self._shape:
            self._last, self._shape = {}, frame.shape
        return FramePainter(self, frame, paste, self._same_cells(cell_means(frame) if cells is None else cells), makers or {})

    def _same_cells(self, cells: np.ndarray) -> np.ndarray:
        """`cells`, or the last frame's cells where they are equal: a still camera's layers then all
        hold one cells object, and the camera's change under a layer drawn on it is no change at
        all without a look (`FramePainter._camera_changed`) — one comparison a frame instead of
        one summed table for each frame a crowd's layers were drawn on."""
        if self._cells is not None and self._cells.shape == cells.shape and np.array_equal(self._cells, cells):
            return self._cells
        self._cells = cells
        return cells

    def forget(self) -> None:
        """A frame was shown some other way (swapping off: raw): nothing to put back."""
        self._last, self._covered_whole = {}, False

    def covered_whole(self) -> None:
        """A frame was covered whole (no face pipeline yet, the first swap running, positions
        unknown): the next frame's swaps take turns (NEW_SWAPS_PER_FRAME). The layers stay, as
        for any frame compose drew nothing on (each checked against its own frame's cells)."""
        self._covered_whole = True


class FramePainter:
    """One frame's `compose.Painter`: puts back what it can (see the module doc), draws the rest."""

    def __init__(self, memo: Repaint, frame: Frame, paste: Callable[[Frame, Any, Face], Any], cells: np.ndarray,
                 makers: Mapping[int, tuple[Any, ...]]) -> None:
        self._memo = memo
        self._last = memo._last  # the last frame's layers (read only: `finish` replaces them)
        self._makers = makers
        self._frame = frame
        self._paste = paste
        self._cells = cells
        h, w = frame.shape[:2]
        self._to_cells = (cells.shape[1] / w, cells.shape[0] / h)
        self._changed: dict[int, np.ndarray] = {}  # id(a layer's cells) → summed table of the cells changed since
        self._now: dict[tuple[Any, ...], _Layer] = {}
        self._seq = 0
        self._pasting = False
        self._stand_ins: set[tuple[Any, ...]] = set()  # covers put back in a swap's place (`paste`)
        self._new_swaps = 0  # swaps pasted anew at a face whose older swap's layer was still good
        self._covers: dict[tuple[int, int], list[tuple[tuple[Any, ...], _Layer]]] | None = None  # `_covers_near`
        self._by_place: dict[tuple[int, int], list[tuple[tuple[Any, ...], _Layer, float, float]]] | None = None  # `_before`
        self._by_face: dict[int, tuple[tuple[Any, ...], _Layer]] | None = None  # `_before`: by id(the face drawn at)
        grid = (-(-h // GRID_PX), -(-w // GRID_PX))
        self._fresh = np.zeros(grid, bool)  # drawn anew this frame (or a cover beneath the swaps gone)
        self._any_fresh = False  # whether `_fresh` has a cell marked (none: nothing to look up)
        self._order = np.full(grid, -1, np.int64)  # per cell, the latest last-frame place of a swap put back there
        # `_order`'s marks are written when a check needs them (`_overlaps_order`): while the swaps
        # come back in the order they had, no mark is above the one checked and none is written.
        self._order_due: list[tuple[Box, int]] = []
        self._order_top = -1  # the highest mark, written or due

    # -- compose.Painter ------------------------------------------------------------------------
    def hold(self, frame: Frame, box: Box, held: Held) -> None:
        box = _clipped(frame, box)
        key = ("hold", box)
        x0, y0, x1, y1 = box
        frame[y0:y1, x0:x1] = held.frame[y0:y1, x0:x1]  # a copy either way: no camera pixel beneath shows
        last = self._last.get(key)
        if (last is not None and isinstance(last.pixels, np.ndarray) and not self._pasting and key not in self._now
                and np.array_equal(last.pixels, frame[y0:y1, x0:x1])):
            self._keep(key, last)  # the same pixels as last frame: nothing beneath the swaps changed
        else:
            self._drawn(key, box, (), frame)

    def obscure(self, frame: Frame, boxes: Sequence[Box]) -> None:
        # A still crowd's hundreds of covers a frame are the last frame's, put back here in one
        # loop (no call a cover for the common case).
        last_of, now = self._last.get, self._now
        for box in _clipped_all(frame, boxes):
            key = ("obscure", box)
            if not self._pasting:
                last = last_of(key)
                if last is not None and last.pixels is not None and key not in now:  # a cover: no cells to check
                    _paint(frame, last)
                    self._keep(key, last)
                    continue
                # The detector's jitter moves an unsure place's box by a pixel or two between looks:
                # a cover of the last frame around it whole covers it (more, never less).
                if any(_contains(layer.box, box) and (near_key in now or self._put_back(frame, near_key, layer))
                       for near_key, layer in self._covers_near(box)):
                    continue
            self._drawn(key, box, (), frame, drawing=obscure_region(frame, box))

    def paste(self, frame: Frame, swapped: Any, face: Face) -> None:
        if not self._pasting:
            self._pasting = True
            self._covers_gone()
        key = ("paste", id(swapped))
        last = self._last.get(key)
        if last is not None and self._still(last, face) and self._put_back(frame, key, last):
            return
        # A new swap for a face whose older swap's layer still shows it as the camera does: one of
        # the frame's NEW_SWAPS_PER_FRAME, or that layer again until a later frame's turn.
        before = self._before(face) if last is None else None
        shows = self._shows(swapped)
        same_place = before is not None and not self._camera_changed(before[1])
        unchanged = same_place and before is not None and self._still(before[1], face) and _same_maker(before[1].shows, shows)
        if unchanged and self._new_swaps >= NEW_SWAPS_PER_FRAME and before is not None:
            self._put_back(frame, before[0], before[1])
            return
        # A face covered last frame (a cover over it, or the frame covered whole) and swapped now:
        # the same turns, covered until then — by that cover where it still hides the face's miss
        # region whole, else by that region obscured anew.
        cover = self._cover_over(frame, face) if last is None and before is None else None
        was_covered = cover is not None or self._memo._covered_whole
        if was_covered and self._new_swaps >= NEW_SWAPS_PER_FRAME:
            if cover is not None and cover[2] and self._put_back(frame, cover[0], cover[1]):
                self._mark_fresh(cover[1].box)  # over what was pasted before it: new beneath the rest
                self._stand_ins.add(cover[0])
            else:
                self._cover_anew(frame, face)
            return
        rect = self._paste(frame, swapped, face)
        if rect is None:
            return
        self._new_swaps += was_covered
        # Drawn at the place it had, over a camera that did not change: what lies over it keeps
        # its layer (a swap of this same face in its feathered edge), if it lay over it before
        # (its place in the last frame's order marks the grid). Elsewhere it is new beneath them.
        had = before[1] if before is not None else last
        same_place = same_place or (last is not None and last.face is not None and _same_place(last.face, face)
                                    and not self._camera_changed(last))
        self._new_swaps += unchanged
        box = (rect.x0, rect.y0, rect.x1, rect.y1)
        if same_place and had is not None:
            self._mark_order(box, had.seq)
        self._drawn(key, box, (face, swapped), frame, face, fresh=not same_place, shows=shows)

    # -- the frame's end ----------------------------------------------------------------------------
    def finish(self, *, covered_whole: bool = False) -> None:
        """What this frame drew is what the next one may put back. A frame compose drew nothing on
        (the whole frame held or obscured: positions unknown) leaves the layers as they were: each
        is checked against the camera's cells of its own frame, not the last one's.
        `covered_whole`: compose covered the whole frame (`Repaint.covered_whole`)."""
        if self._now:
            self._memo._last, self._memo._stand_ins = self._now, self._stand_ins
            self._memo._covered_whole = False
        if covered_whole:
            self._memo.covered_whole()

    # -- helpers ----------------------------------------------------------------------------------
    def _put_back(self, frame: Frame, key: tuple[Any, ...], last: _Layer) -> bool:
        if key in self._now or last.pixels is None or (last.face is not None and self._camera_changed(last)):
            return False
        _paint(frame, last)
        self._keep(key, last)
        return True

    def _keep(self, key: tuple[Any, ...], last: _Layer) -> None:
        """`last` put back: kept with the face it was drawn at and the cells it was drawn over."""
        if last.face is not None:  # a swap's layer: the order among swaps (`_overlaps_order`)
            self._mark_order(last.box, last.seq)
        last.seq = self._seq  # its place in this frame's order (read again only once it is placed)
        self._now[key] = last
        self._seq += 1
        self._memo.put_back += 1

    def _still(self, layer: _Layer, face: Face) -> bool:
        """A swap's layer at `face`: drawn where the face is, nothing new beneath it, and the swaps
        overlapping it put back before it in the order they had."""
        return (layer.face is not None and _same_place(layer.face, face) and not self._fresh_under(layer.box)
                and not self._overlaps_order(layer))

    def _shows(self, swapped: Any) -> tuple[Any, ...]:
        """What `swapped` shows: its maker as the loop says (`makers`), and the source it was made of."""
        return (*self._makers.get(id(swapped), ()), getattr(swapped, "source", ""))

    def _covers_near(self, box: Box) -> list[tuple[tuple[Any, ...], _Layer]]:
        """The last frame's obscured rectangles centred near `box`'s centre."""
        if self._covers is None:
            self._covers = {}
            for key, layer in self._last.items():
                if key[0] == "obscure":
                    self._covers.setdefault(_box_cell(layer.box), []).append((key, layer))
        cx, cy = _box_cell(box)
        return [found for dx in (-1, 0, 1) for dy in (-1, 0, 1) for found in self._covers.get((cx + dx, cy + dy), ())]

    def _cover_over(self, frame: Frame, face: Face) -> tuple[tuple[Any, ...], _Layer, bool] | None:
        """The last frame's cover over this face's box, not put back yet, and whether it hides the
        face's miss region whole (compose's own cover for it; such a cover first)."""
        wanted = region(frame, [face], MISS_REGION_SCALE)
        inner = _clipped(frame, (math.floor(face.box[0]), math.floor(face.box[1]), math.ceil(face.box[2]), math.ceil(face.box[3])))
        over = [(key, layer) for key, layer in self._covers_near(wanted) if key not in self._now and _contains(layer.box, inner)]
        whole = next(((key, layer, True) for key, layer in over if _contains(layer.box, wanted)), None)
        return whole or (None if not over else (*over[0], False))

    def _cover_anew(self, frame: Frame, face: Face) -> None:
        """The face's miss region obscured, a cover in its swap's place until its turn (`paste`)."""
        box = _clipped(frame, region(frame, [face], MISS_REGION_SCALE))
        key = ("obscure", box)
        own = key not in self._now
        self._drawn(key, box, (), frame, drawing=obscure_region(frame, box))
        if own:
            self._stand_ins.add(key)

    def _before(self, face: Face) -> tuple[tuple[Any, ...], _Layer] | None:
        """The last frame's layer of a swap at this same face (the face object the tracker handed
        on, else the nearest layer drawn at its place: `_same_place`), not put back yet."""
        if self._by_face is None:  # a still crowd's faces are the objects their layers were drawn at
            self._by_face = {id(layer.face): (key, layer) for key, layer in self._last.items() if layer.face is not None}
        same = self._by_face.get(id(face))
        if same is not None and same[1].face is face and same[0] not in self._now:
            return same
        if self._by_place is None:
            self._by_place = {}
            for key, layer in self._last.items():
                if layer.face is not None:
                    self._by_place.setdefault(_box_cell(layer.face.box), []).append((key, layer, *layer.nose))
        cx, cy = _box_cell(face.box)
        limit = PLACE_WIDTHS * max(face.width, 1.0)
        # A nose further than this on an axis is a keypoint further than `limit` (float32 or not): no _gap needed.
        reach = limit * 1.001 + 1e-3
        nx, ny = _nose(face)
        best: tuple[float, tuple[Any, ...], _Layer] | None = None  # the nearest, the first of equals (as `min`)
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                for key, layer, lx, ly in self._by_place.get((cx + dx, cy + dy), ()):
                    if key in self._now or (layer.face is not face and (abs(lx - nx) > reach or abs(ly - ny) > reach)):
                        continue
                    gap = _gap(layer.face, face)
                    if (layer.face is face or gap <= limit) and (best is None or gap < best[0]):
                        best = (gap, key, layer)
        return None if best is None else (best[1], best[2])

    def _drawn(self, key: tuple[Any, ...], box: Box, refs: tuple[Any, ...], frame: Frame | None, face: Face | None = None,
               *, fresh: bool = True, shows: tuple[Any, ...] = (), drawing: Mosaic | None = None) -> None:
        """`drawing`: a cover's mosaic, kept instead of a copy of its rectangle when that is large
        (MOSAIC_KEPT_FROM): the same pixels when drawn again."""
        x0, y0, x1, y1 = box
        if x1 <= x0 or y1 <= y0:
            return
        if fresh:
            self._mark_fresh(box)
        kept_as_drawn = drawing is not None and (x1 - x0) * (y1 - y0) >= MOSAIC_KEPT_FROM
        pixels = drawing if kept_as_drawn else None if frame is None else frame[y0:y1, x0:x1].copy()
        if key in self._now:  # drawn twice in one frame: only the first is a layer (the second is never put back)
            self._memo.drawn += 1
            return
        self._now[key] = _Layer(box, refs, pixels, self._cells, self._seq, self._under(box), face, shows,
                                (0.0, 0.0) if face is None else _nose(face))
        self._seq += 1
        self._memo.drawn += 1

    def _covers_gone(self) -> None:
        """Before the first swap: the covers of the last frame not drawn in this one leave the camera's
        pixels where they were — a swap whose layer blended over one is drawn again."""
        for key, layer in self._last.items():
            if key[0] != "paste" and key not in self._now and key not in self._memo._stand_ins:
                self._mark_fresh(layer.box)

    def _camera_changed(self, layer: _Layer) -> bool:
        """Whether a cell of the thumbnail under the layer's rectangle moved by more than
        CHANGE_LIMIT since the layer was drawn (one summed table per frame drawn on, four reads
        per layer)."""
        if layer.cells is self._cells:
            return False
        if layer.cells.shape != self._cells.shape:
            return True
        table = self._changed.get(id(layer.cells))
        if table is None:
            # One summed-area table per frame the layers were drawn on: a noisy camera's cells differ
            # every frame, so a crowd's layers, drawn over a dozen or two frames, need as many (a
            # 1080p crowd: ~20 a frame; OpenCV's integral 10 µs each, numpy's cumsums and a list 72).
            changed = (largest_change(self._cells, layer.cells) > CHANGE_LIMIT).view(np.uint8)
            table = self._changed[id(layer.cells)] = cv2.integral(changed)
        cx0, cy0, cx1, cy1 = layer.under
        return table.item(cy1, cx1) - table.item(cy0, cx1) - table.item(cy1, cx0) + table.item(cy0, cx0) > 0

    def _under(self, box: Box) -> tuple[int, int, int, int]:
        """The thumbnail's cells a frame rectangle touches (at least one)."""
        kx, ky = self._to_cells
        th, tw = self._cells.shape[:2]
        x0, y0, x1, y1 = box
        cx0, cy0 = min(tw - 1, math.floor(x0 * kx)), min(th - 1, math.floor(y0 * ky))
        return cx0, cy0, min(tw, max(cx0 + 1, math.ceil(x1 * kx))), min(th, max(cy0 + 1, math.ceil(y1 * ky)))

    def _overlaps_order(self, layer: _Layer) -> bool:
        """Whether a swap put back before this one in this frame, overlapping it, came after it last frame."""
        if self._order_top <= layer.seq:  # no mark above it anywhere
            return False
        for box, seq in self._order_due:
            cells = self._cells_of(self._order, box)
            np.maximum(cells, seq, out=cells)
        self._order_due.clear()
        return bool(self._cells_of(self._order, layer.box).max(initial=-1) > layer.seq)

    def _fresh_under(self, box: Box) -> bool:
        """Whether something was drawn anew (or a cover beneath the swaps gone) under `box` this frame."""
        return self._any_fresh and bool(self._cells_of(self._fresh, box).any())

    @staticmethod
    def _cells_of(grid: np.ndarray, box: Box) -> np.ndarray:
        x0, y0, x1, y1 = box
        return grid[y0 // GRID_PX : -(-y1 // GRID_PX), x0 // GRID_PX : -(-x1 // GRID_PX)]

    def _mark_fresh(self, box: Box) -> None:
        self._cells_of(self._fresh, box)[...] = True
        self._any_fresh = True

    def _mark_order(self, box: Box, seq: int) -> None:
        """`box`'s cells hold at least `seq` (written when `_overlaps_order` reads them)."""
        self._order_due.append((box, seq))
        self._order_top = max(self._order_top, seq)


def _same_maker(then: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    """The same things made both swaps (by identity: a rebuilt pipeline or a new source photo is
    another object, even when equal)."""
    return len(then) == len(now) and all(a is b or (isinstance(a, str) and a == b) for a, b in zip(then, now))


def _same_place(then: Face, now: Face) -> bool:
    """The face drawn at `then` is where `now` says (PLACE_WIDTHS)."""
    return then is now or _gap(then, now) <= PLACE_WIDTHS * max(now.width, 1.0)


def _nose(face: Face) -> tuple[float, float]:
    """The face's third keypoint, as `_gap` reads it (float32)."""
    x, y = np.asarray(face.kps, np.float32).reshape(-1, 2)[2].tolist()
    return x, y


def _box_cell(box: tuple[float, float, float, float]) -> tuple[int, int]:
    """The PLACE_CELL_PX square a box's centre lies in (`FramePainter` looks in it and its eight neighbours)."""
    return int((box[0] + box[2]) // (2 * PLACE_CELL_PX)), int((box[1] + box[3]) // (2 * PLACE_CELL_PX))


def _contains(outer: Box, inner: Box) -> bool:
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def _gap(then: Face | None, now: Face) -> float:
    """The largest keypoint move from `then` to `now`, in pixels."""
    return float("inf") if then is None else float(np.abs(np.asarray(now.kps, np.float32) - np.asarray(then.kps, np.float32)).max())


def _paint(frame: Frame, layer: _Layer) -> None:
    """The layer's drawing put back on its rectangle: its copy, or its cover's mosaic drawn again."""
    if isinstance(layer.pixels, Mosaic):
        layer.pixels.paint(frame)
    elif layer.pixels is not None:
        x0, y0, x1, y1 = layer.box
        frame[y0:y1, x0:x1] = layer.pixels


def _clipped(frame: Frame, box: Box) -> Box:
    """`box` inside the frame, whole pixels (as `obscure.obscure_region` clips it)."""
    return _clipped_all(frame, (box,))[0]


def _clipped_all(frame: Frame, boxes: Sequence[Box]) -> list[Box]:
    """`_clipped` of each box."""
    h, w = frame.shape[:2]
    return [(max(0, int(x0)), max(0, int(y0)), min(w, int(x1)), min(h, int(y1))) for x0, y0, x1, y1 in boxes]

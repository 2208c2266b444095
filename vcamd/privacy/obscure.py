"""Making a face unrecognisable: the one place that decides how an uncovered face is obscured.

Used by the live engine for every face it cannot swap or hold (start-up, misses, lost tracks) and for
the whole frame when it cannot say where the faces are.

How: a coarse mosaic, BLOCKS_ACROSS blocks along the longer side of the box (so a head gets a
handful of blocks whatever its size), each block's colour pulled most of the way to the box's mean
(the light/dark layout that draws eyes, nose and mouth is what detectors and recognisers key on) and
offset by a fixed brightness noise, so what remains is a patchwork rather than a blurred face.
A fine 16-px mosaic was not enough: at 720p a person and SCRFD still found the face. The effect is
measured on real photos with both SCRFD detectors and MobileFaceNet (tests/privacy,
`python benchmarks/privacy.py`, docs/reliability.md "privacy: obscured faces").

The box must cover the head, not just the face box: the face box grown at least 1.2× (the engine
uses 1.6×). Hair and ears left around a mosaic of exactly the face box still read as a head.

Cost: the pixels of the box, nothing outside it. A big box (BY_ROWS_FROM pixels or more) is read
once by `cv2.reduce` and written one row of blocks at a time: the mosaic cv2.resize would draw
(INTER_AREA down to the blocks, INTER_NEAREST back up), each block within one level, for a whole
720p frame 1.66 → 0.25 ms (the unseen cover mosaics half of a sliding picture's frame, every
frame); a small box by the two resizes. Deterministic: the same box on the same pixels gives the
same output, and the noise is tied to the block grid, so a still face does not flicker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.types import Frame

BLOCKS_ACROSS = 4
"""Mosaic blocks along the longer side of the box: with the engine's 1.6× head box, about 2.5 across
the face. 6 blocks let SCRFD find some Solvay faces again at 0.5; 3 looked no safer."""

CONTRAST_KEPT = 0.25
"""Share of each block's difference from the box's mean colour that is kept."""

NOISE_LEVEL = 32
"""Largest brightness offset (of 255) added to a block: breaks up what shading is left."""

BY_ROWS_FROM = 40_000
"""Boxes of at least this many pixels are averaged and written row by row (`block_means`); smaller
ones by two cv2.resize calls, cheaper there (the same mosaic within one level)."""

_NOISE_GRID = 16
"""The noise table's side; the mosaic never has more than BLOCKS_ACROSS blocks per side."""


def _noise_table() -> npt.NDArray[np.int16]:
    table = np.random.default_rng(8).integers(-NOISE_LEVEL, NOISE_LEVEL + 1, size=(_NOISE_GRID, _NOISE_GRID, 1), dtype=np.int16)
    table.setflags(write=False)
    return table


_BLOCK_NOISE = _noise_table()
"""Fixed (read-only) brightness offset per block position; the same on every channel, so the
mosaic keeps the picture's colours (a grey photo stays grey)."""


@dataclass(frozen=True, slots=True)
class Mosaic:
    """An obscured rectangle as its mosaic: the box (clipped to the frame, whole pixels) and its blocks'
    colours. `paint` draws it again, pixel for pixel what `obscure_region` drew, without reading the
    frame: a cover put back where it was (`live.output.repaint`) writes the box once instead of
    keeping a copy of it and copying that back (a 1080p frame half covered: 3 MB a frame)."""

    box: tuple[int, int, int, int]
    blocks: npt.NDArray[np.uint8]  # rows × cols × channels

    def paint(self, frame: Frame) -> None:
        x0, y0, x1, y1 = self.box
        roi = frame[y0:y1, x0:x1]
        w, h = x1 - x0, y1 - y0
        rows, cols = self.blocks.shape[:2]
        if w * h < BY_ROWS_FROM:
            roi[...] = cv2.resize(self.blocks, (w, h), interpolation=cv2.INTER_NEAREST).reshape(roi.shape)
            return
        # Each row of blocks widened to the box (the block under each column, as INTER_NEAREST picks
        # it), copied down the box rows that take that row of blocks.
        across, down = _nearest(w, cols), _nearest(h, rows)
        starts = np.searchsorted(down, np.arange(rows + 1))
        for r in range(rows):
            roi[starts[r] : starts[r + 1]] = self.blocks[r, across].reshape(1, *roi.shape[1:])


def obscure_region(frame: Frame, box: tuple[int, int, int, int]) -> Mosaic | None:
    """Make whatever face is inside `box` (x0, y0, x1, y1; clipped to the frame) unrecognisable, in
    place. Only the pixels inside the box change. Returns the mosaic drawn (None: the box lies
    outside the frame)."""
    height, width = frame.shape[:2]
    x0, y0 = max(0, int(box[0])), max(0, int(box[1]))
    x1, y1 = min(width, int(box[2])), min(height, int(box[3]))
    w, h = x1 - x0, y1 - y0
    if w < 1 or h < 1:
        return None
    roi = frame[y0:y1, x0:x1]
    block = -(-max(w, h) // BLOCKS_ACROSS)  # ceil: never more than BLOCKS_ACROSS blocks per side
    cols, rows = -(-w // block), -(-h // block)
    blocks = (cv2.resize(roi, (cols, rows), interpolation=cv2.INTER_AREA).reshape(rows, cols, -1).astype(np.float32)
              if w * h < BY_ROWS_FROM else block_means(roi.reshape(h, w, -1), cols, rows))
    mean = blocks.reshape(-1, blocks.shape[2]).mean(axis=0)
    blocks = mean + (blocks - mean) * CONTRAST_KEPT + _BLOCK_NOISE[:rows, :cols]
    mosaic = Mosaic((x0, y0, x1, y1), np.clip(blocks, 0, 255).astype(np.uint8))
    mosaic.paint(frame)
    return mosaic


def block_means(image: np.ndarray, cols: int, rows: int) -> npt.NDArray[np.float32]:
    """`image` (h, w, channels) averaged down to cols × rows, as cv2.resize INTER_AREA averages it
    (window j spans [j·w/cols, (j+1)·w/cols), a pixel counting with the share of it inside),
    rounded to whole levels, float32 (rows, cols, channels). Within one level of INTER_AREA (the
    sums' order differs) for a fraction of the time: the whole pixels of a row of windows summed by
    `cv2.reduce`, the part-pixels at its edges added by their shares, then the columns weighted."""
    h, w = image.shape[:2]
    sums = np.empty((rows, w, image.shape[2]), np.float64)
    for r, (whole_from, whole_to, parts) in enumerate(_windows(h, rows)):
        row = sums[r]
        row[...] = cv2.reduce(image[whole_from:whole_to], 0, cv2.REDUCE_SUM, dtype=cv2.CV_32S).reshape(w, -1) if whole_to > whole_from else 0.0
        for y, share in parts:
            row += share * image[y]
    across = np.zeros((w, cols))
    for c, (whole_from, whole_to, parts) in enumerate(_windows(w, cols)):
        across[whole_from:whole_to, c] = 1.0
        for x, share in parts:
            across[x, c] = share
    means = (sums.transpose(0, 2, 1) @ across).transpose(0, 2, 1) * (cols * rows / (w * h))
    rounded: npt.NDArray[np.float32] = np.rint(np.clip(means, 0, 255)).astype(np.float32)
    return rounded


def _windows(size: int, count: int) -> list[tuple[int, int, list[tuple[int, float]]]]:
    """INTER_AREA's `count` windows over `size` pixels: per window, the pixels wholly inside it
    [from, to) and the pixels partly inside with their shares (under 1e-3 left out, as OpenCV does)."""
    step = size / count
    out = []
    for i in range(count):
        lo, hi = i * step, min(size, (i + 1) * step)
        first, last = min(math.ceil(lo), size), max(math.floor(hi), 0)
        first = min(first, last)
        parts = []
        if first - lo > 1e-3:
            parts.append((first - 1, first - lo))
        if hi - last > 1e-3 and last < size:
            parts.append((last, min(hi - last, 1.0)))
        out.append((first, last, parts))
    return out


def _nearest(size: int, count: int) -> npt.NDArray[np.intp]:
    """Which of `count` blocks each of `size` pixels takes in cv2.resize INTER_NEAREST's upscale
    (floor(x · count/size), computed as OpenCV computes it)."""
    picks: npt.NDArray[np.intp] = np.minimum(np.floor(np.arange(size) * (1.0 / (size / count))).astype(np.intp), count - 1)
    return picks


def obscure_frame(frame: Frame) -> None:
    """The whole frame, for when the engine cannot say where the faces are."""
    obscure_region(frame, (0, 0, frame.shape[1], frame.shape[0]))

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

Cost: one area-averaging downscale of the box and one nearest-neighbour upscale back into it: the
pixels of the box, nothing outside it. Deterministic: the same box on the same pixels gives the same
output, and the noise is tied to the block grid, so a still face does not flicker.
"""

from __future__ import annotations

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

_NOISE_GRID = 16
"""The noise table's side; the mosaic never has more than BLOCKS_ACROSS blocks per side."""


def _noise_table() -> npt.NDArray[np.int16]:
    table = np.random.default_rng(8).integers(-NOISE_LEVEL, NOISE_LEVEL + 1, size=(_NOISE_GRID, _NOISE_GRID, 1), dtype=np.int16)
    table.setflags(write=False)
    return table


_BLOCK_NOISE = _noise_table()
"""Fixed (read-only) brightness offset per block position; the same on every channel, so the
mosaic keeps the picture's colours (a grey photo stays grey)."""


def obscure_region(frame: Frame, box: tuple[int, int, int, int]) -> None:
    """Make whatever face is inside `box` (x0, y0, x1, y1; clipped to the frame) unrecognisable, in
    place. Only the pixels inside the box change."""
    height, width = frame.shape[:2]
    x0, y0 = max(0, int(box[0])), max(0, int(box[1]))
    x1, y1 = min(width, int(box[2])), min(height, int(box[3]))
    w, h = x1 - x0, y1 - y0
    if w < 1 or h < 1:
        return
    roi = frame[y0:y1, x0:x1]
    block = -(-max(w, h) // BLOCKS_ACROSS)  # ceil: never more than BLOCKS_ACROSS blocks per side
    cols, rows = -(-w // block), -(-h // block)
    blocks = cv2.resize(roi, (cols, rows), interpolation=cv2.INTER_AREA).reshape(rows, cols, -1).astype(np.float32)
    mean = blocks.reshape(-1, blocks.shape[2]).mean(axis=0)
    blocks = mean + (blocks - mean) * CONTRAST_KEPT + _BLOCK_NOISE[:rows, :cols]
    mosaic = np.clip(blocks, 0, 255).astype(np.uint8)
    roi[...] = cv2.resize(mosaic, (w, h), interpolation=cv2.INTER_NEAREST).reshape(roi.shape)


def obscure_frame(frame: Frame) -> None:
    """The whole frame, for when the engine cannot say where the faces are."""
    obscure_region(frame, (0, 0, frame.shape[1], frame.shape[0]))

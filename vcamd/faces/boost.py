"""Pixel boost: an N-px swapped face from a swapper that takes 128-px crops (FaceFusion's name).

The face is aligned at N = 128·k px; that crop is split into k² polyphase tiles — tile (i, j) holds
the pixels (k·y + i, k·x + j), a whole 128² face seen at one sub-pixel offset — each tile is
swapped as the model takes it (all of them in one batch), and the k² outputs are interleaved back
into one N-px face, which is blended at that size. Every tile gets the same source latent; the
alignment matrix is the one for size N.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vcamd.common.types import Frame
from vcamd.faces.specs import CropSpec

SIZES = (128, 256, 512)
"""The face sizes `[swap] pixel_boost` accepts (k = 1, 2, 4 for a 128-px swapper)."""


def factor(size: int, side: int) -> int:
    """k: how many swapper crops of `side` px fit along a boosted face of `size` px."""
    if size % side or size < side:
        raise ValueError(f"a pixel boost of {size} px needs a multiple of the swapper's {side}-px crop")
    return size // side


def boosted(spec: CropSpec, size: int) -> CropSpec:
    """The swapper's crop geometry at `size` px (same template and normalisation)."""
    return spec if size == spec.size else replace(spec, size=size)


def split(crop: Frame, k: int) -> list[Frame]:
    """The k² polyphase tiles of an N×N crop, tile (i, j) = crop[i::k, j::k], in row-major (i, j) order."""
    n = crop.shape[0]
    side = n // k
    tiles = crop.reshape(side, k, side, k, -1).transpose(1, 3, 0, 2, 4).reshape(k * k, side, side, -1)
    return [np.ascontiguousarray(tile) for tile in tiles]


def merge(tiles: list[Frame], k: int) -> Frame:
    """The inverse of `split`: k² tiles interleaved back into one crop k times their side."""
    side = tiles[0].shape[0]
    stacked = np.stack(tiles).reshape(k, k, side, side, -1)
    return np.ascontiguousarray(stacked.transpose(2, 0, 3, 1, 4).reshape(k * side, k * side, -1))

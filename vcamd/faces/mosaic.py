"""Face crops tiled into one detector run: the layout the tracker's crop re-detection runs
(`vcamd.live.tracking.cropplan.Mosaic`) and the int8 detector's check looks at
(`vcamd.models.int8detector`), defined once so the check's mosaics are the tracker's."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vcamd.common.types import Frame
from vcamd.faces.detect import SHAPE_STEP

MOSAIC_MIN = 3
"""From this many crops of one input size on, the tracker tiles them into one detector run (where that
costs no more pixels: `cropplan.pays`), and the check makes a mosaic look of them."""


def mosaic_columns(n: int) -> int:
    """The columns of a mosaic of n tiles: 2, 4 or 8, as many rows as needed (few distinct shapes,
    one detector session each)."""
    return 2 if n <= 4 else 4 if n <= 16 else 8


def mosaic_shape(n: int, tile: int) -> tuple[int, int]:
    """(height, width) of a mosaic of n `tile`-px tiles: the detector input, padded to SHAPE_STEP."""
    cols = mosaic_columns(n)
    return _padded(-(-n // cols) * tile), _padded(cols * tile)


def tiled_crops(crops: Sequence[Frame], tile: int) -> Frame:
    """The crops (`tile`-px squares) row by row in `mosaic_columns(len(crops))` columns, on a black canvas of `mosaic_shape`."""
    cols = mosaic_columns(len(crops))
    image = np.zeros((*mosaic_shape(len(crops), tile), 3), np.uint8)
    for k, crop in enumerate(crops):
        r, c = divmod(k, cols)
        image[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile] = crop
    return image


def _padded(value: int) -> int:
    return SHAPE_STEP * -(-value // SHAPE_STEP)

"""`greedy_pairs`, the one pairing rule of the tracker's detections and the compose's swaps, against
the rule as its doc states it (row by row, the nearest allowed column no earlier row took) on random
matrices: few columns and many rows (rows competing for one column), ties (whole distances), a
crowd where each row has its own column, and distances that are not finite."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vcamd.privacy.geometry import greedy_pairs


def _row_by_row(allowed: np.ndarray, distance: np.ndarray) -> list[int | None]:
    taken: set[int] = set()
    out: list[int | None] = []
    for k in range(allowed.shape[0]):
        free = [j for j in range(allowed.shape[1]) if allowed[k, j] and j not in taken]
        best = free[int(np.argmin(distance[k, free]))] if free else None  # the first of equals (a NaN first)
        if best is not None:
            taken.add(best)
        out.append(best)
    return out


@settings(max_examples=300, deadline=None)
@given(data=st.data(), rows=st.integers(0, 12), cols=st.integers(0, 12), density=st.floats(0.0, 1.0),
       whole=st.booleans(), odd=st.sampled_from([None, np.inf, np.nan]))
def test_the_pairs_are_the_row_by_row_rule(data, rows, cols, density, whole, odd) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    allowed = rng.random((rows, cols)) < density
    distance = rng.integers(0, 4, (rows, cols)).astype(float) if whole else rng.random((rows, cols)) * 100
    if odd is not None and rows and cols:
        distance[rng.integers(rows), rng.integers(cols)] = odd
    assert greedy_pairs(allowed, distance) == _row_by_row(allowed, distance)


def test_a_crowd_each_near_its_own_column_pairs_each_with_it() -> None:
    rng = np.random.default_rng(3)
    n = 150
    order = rng.permutation(n)
    distance = rng.random((n, n)) * 100 + 50
    distance[np.arange(n), order] = rng.random(n)
    allowed = distance < 60
    assert greedy_pairs(allowed, distance) == _row_by_row(allowed, distance) == order.tolist()

"""`near_matrix`, the one rule of whether two positions are one face for many pairs at once, against
`near` pair by pair: a group (every pair measured) and crowds against crowds (only the pairs that
can be near: found by sorting), with faces of every size, overlapping, at the same centre, at the
reach's edge, outside the frame and with positions that are not finite. (Up to 160 × 160 pairs: both
sides of `DENSE_PAIRS`.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vcamd.common.types import Face
from vcamd.privacy.geometry import near, near_matrix


def _faces(rng: np.random.Generator, n: int, spread: float, odd: float | None) -> list[Face]:
    faces = []
    for _ in range(n):
        x, y = rng.uniform(-60.0, spread, 2)
        w = float(rng.choice([rng.uniform(0.1, 2.0), rng.uniform(10.0, 90.0)]))
        faces.append(Face(box=(x, y, x + w, y + 1.2 * w), score=0.9, kps=np.zeros((5, 2), np.float32)))
    if odd is not None and faces:
        k = int(rng.integers(len(faces)))
        faces[k] = Face(box=(odd, 5.0, 40.0, 50.0), score=0.9, kps=np.zeros((5, 2), np.float32))
    return faces


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # inf − inf: not near, as `near` says
@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(0, 160), m=st.integers(0, 160), spread=st.sampled_from([5.0, 200.0, 1900.0]),
       widths=st.sampled_from([0.3, 0.5, 1.0]), odd=st.sampled_from([None, np.inf, np.nan]), same=st.booleans())
def test_every_pair_is_near_as_the_pairwise_rule_says(data, n, m, spread, widths, odd, same) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    faces = _faces(rng, n, spread, odd)
    others = list(faces) if same else _faces(rng, m, spread, None)
    if same and len(faces) > 1:  # one at the reach's edge of another: the limit itself decides
        f = faces[0]
        edge = f.box[0] + widths * max(f.width, 1.0)
        others[1] = Face(box=(edge, f.box[1], edge + f.width, f.box[3]), score=0.9, kps=f.kps)
    expected = np.array([[near(f, o, widths) for o in others] for f in faces], bool).reshape(len(faces), len(others))
    assert np.array_equal(near_matrix(faces, others, widths), expected)


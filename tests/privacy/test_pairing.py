"""`greedy_pairs`, the one pairing rule of the tracker's detections and the compose's swaps, against
the rule as its doc states it (row by row, the nearest allowed column no earlier row took) on random
matrices: few columns and many rows (rows competing for one column), ties (whole distances), a
crowd where each row has its own column, and distances that are not finite."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vcamd.common.types import Face
from vcamd.privacy.geometry import greedy_pairs, near, same_face_pairs


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


def _by_the_rule(faces: list[Face], others: list[Face]) -> list[int | None]:
    """`same_face_pairs` as its doc states it: `near`, the nearest centre not taken by an earlier face,
    and the same object (its last place in `others`) before any other."""
    if not faces or not others:
        return [None] * len(faces)
    last = {id(o): j for j, o in enumerate(others)}
    allowed = np.array([[near(o, f) or last.get(id(f)) == j for j, o in enumerate(others)] for f in faces])
    centre = lambda f: ((f.box[0] + f.box[2]) / 2, (f.box[1] + f.box[3]) / 2)  # noqa: E731
    distance = np.array([[-1.0 if last.get(id(f)) == j else
                          (centre(o)[0] - centre(f)[0]) ** 2 + (centre(o)[1] - centre(f)[1]) ** 2 for j, o in enumerate(others)]
                         for f in faces])
    return _row_by_row(allowed, distance)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(0, 12), kept=st.floats(0.0, 1.0), new=st.integers(0, 3), twice=st.booleans(),
       others_twice=st.booleans())
def test_faces_pair_by_the_rule_also_when_they_are_last_frames_objects(data, n, kept, new, twice, others_twice) -> None:
    """A still picture's faces are the last frame's objects (each pairs with itself, without the matrices);
    any mix of those, moved copies of them, new faces and repeated objects pairs as the rule says."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))

    def face(x: float, y: float, w: float) -> Face:
        return Face(box=(x, y, x + w, y + w), score=0.9, kps=np.zeros((5, 2), np.float32))

    others = [face(*rng.uniform(0, 200, 2), rng.uniform(10, 60)) for _ in range(n)]
    if others_twice and others:
        others.append(others[int(rng.integers(len(others)))])
    faces = [o for o in others if rng.random() < kept]
    faces += [face(o.box[0] + rng.normal(0, 8), o.box[1] + rng.normal(0, 8), o.width) for o in others[:new]]
    if twice and faces:
        faces.append(faces[int(rng.integers(len(faces)))])
    faces = [faces[k] for k in rng.permutation(len(faces))]
    assert same_face_pairs(faces, others) == _by_the_rule(faces, others)


def test_the_last_frames_faces_each_pair_with_themselves() -> None:
    rng = np.random.default_rng(5)
    others = [Face(box=(x, 0.0, x + 30, 30.0), score=0.9, kps=np.zeros((5, 2), np.float32)) for x in rng.uniform(0, 40, 150)]
    order = rng.permutation(150)
    assert same_face_pairs([others[k] for k in order], others) == order.tolist()

"""Whether two face positions are one face: the rule the tracker, the smoothing and the composing
of a frame share. Pure (no state, no threads, no models)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from vcamd.common.types import Face

SAME_TRACK_WIDTHS = 0.5
"""Two positions are one face when their centres are closer than this × the smaller width (both
are positions of one face a frame or a detection apart; a neighbour is a width away)."""


def near(face: Face, other: Face, widths: float = SAME_TRACK_WIDTHS) -> bool:
    """Whether two positions are one face (see SAME_TRACK_WIDTHS)."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    ox, oy = (other.box[0] + other.box[2]) / 2, (other.box[1] + other.box[3]) / 2
    return bool(np.hypot(ox - cx, oy - cy) < widths * max(min(face.width, other.width), 1.0))


def centres_widths(faces: list[Face]) -> tuple[np.ndarray, np.ndarray]:
    """The faces' box centres (n × 2) and widths (n), float64."""
    if not faces:
        return np.empty((0, 2)), np.empty(0)
    boxes = np.array([f.box for f in faces], np.float64).reshape(-1, 4)
    return (boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2] - boxes[:, 0]


def near_matrix(faces: list[Face], others: list[Face], widths: float = SAME_TRACK_WIDTHS) -> npt.NDArray[np.bool_]:
    """`near(faces[i], others[j], widths)` for every pair, as one len(faces) × len(others) bool
    array: a crowd's hundred faces against a hundred others in one array operation instead of ten
    thousand calls. The same rule, the same float64 arithmetic."""
    (fc, fw), (oc, ow) = centres_widths(faces), centres_widths(others)
    if len(fc) * len(oc) <= DENSE_PAIRS:
        return _within(fc[:, None], fw[:, None], oc[None, :], ow[None, :], widths)
    # Many against many (a crowd's covers against its last good output's faces): only the pairs
    # whose centres are less than the face's own reach apart across (`near` never holds further:
    # the smaller width is at most the face's), found by sorting — then the rule on those pairs.
    reach = widths * np.maximum(fw, 1.0)
    order = np.argsort(oc[:, 0], kind="stable")
    xs = oc[order, 0]
    lo = np.searchsorted(xs, fc[:, 0] - reach * (1 + 1e-9), "left")
    hi = np.searchsorted(xs, fc[:, 0] + reach * (1 + 1e-9), "right")
    counts = np.maximum(hi - lo, 0)
    rows = np.repeat(np.arange(len(fc)), counts)
    cols = order[np.repeat(lo, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)]
    within = np.zeros((len(fc), len(oc)), bool)
    within[rows, cols] = _within(fc[rows], fw[rows], oc[cols], ow[cols], widths)
    return within


def _within(fc: np.ndarray, fw: np.ndarray, oc: np.ndarray, ow: np.ndarray, widths: float) -> npt.NDArray[np.bool_]:
    """`near`'s rule on arrays of centres (…, 2) and widths (…) that broadcast together: every pair
    of a group, or a crowd's chosen pairs."""
    distance = np.hypot(oc[..., 0] - fc[..., 0], oc[..., 1] - fc[..., 1])
    within: npt.NDArray[np.bool_] = distance < widths * np.maximum(np.minimum(fw, ow), 1.0)
    return within


DENSE_PAIRS = 4096
"""`near_matrix` measures every pair up to this many pairs (a group; a face against a crowd), and
only the pairs it must above (a crowd against a crowd: 500 covers × 150 faces a frame)."""


def near_any(faces: list[Face], others: list[Face], widths: float = SAME_TRACK_WIDTHS) -> list[bool]:
    """Per face: whether it is `near` any of `others`."""
    if not faces or not others:
        return [False] * len(faces)
    rows: npt.NDArray[np.bool_] = np.any(near_matrix(faces, others, widths), axis=1)
    near_rows: list[bool] = rows.tolist()
    return near_rows


def greedy_pairs(allowed: np.ndarray, distance: np.ndarray) -> list[int | None]:
    """Row by row (in order), the column nearest by `distance` among those `allowed` for the row
    and not taken by an earlier row; None where there is none. Both arrays rows × columns: the
    one pairing rule the tracker's detections and the compose's swaps use."""
    rows, cols = allowed.shape
    if rows == 0 or cols == 0:
        return [None] * rows
    # Most frames (a crowd's faces each near their own swap) no two rows want the same column:
    # then each row's nearest allowed column is what the row-by-row rule gives it, found for all
    # rows at once. Two rows wanting one column, or a distance that is not finite: row by row.
    masked = np.where(allowed, distance, np.inf)
    nearest = np.argmin(masked, axis=1)
    found: npt.NDArray[np.bool_] = np.any(allowed, axis=1)
    wanted = nearest[found]
    if np.isfinite(masked[found, wanted]).all() and len(np.unique(wanted)) == len(wanted):
        rows_found: list[bool] = found.tolist()
        return [int(j) if ok else None for j, ok in zip(nearest.tolist(), rows_found)]
    taken = np.zeros(cols, bool)
    return [take_nearest(allowed[k], distance[k], taken) for k in range(rows)]


def take_nearest(allowed: np.ndarray, distance: np.ndarray, taken: np.ndarray) -> int | None:
    """One row of `greedy_pairs`' rule: the column nearest by `distance` among those `allowed` and not
    `taken` (the first of equals), marked taken; None when there is none."""
    candidates = np.flatnonzero(allowed & ~taken)
    if len(candidates) == 0:
        return None
    best = int(candidates[np.argmin(distance[candidates])])
    taken[best] = True
    return best


def same_face_pairs(faces: list[Face], others: list[Face]) -> list[int | None]:
    """Per face (in order), the index of the one of `others` that is the same face (`near`, the
    nearest not taken by an earlier face: `greedy_pairs`' rule), or None. The same object always pairs
    with itself (a track not moved since a look is its own face) unless an earlier face took it.

    Most of a crowd's faces in a frame are the very objects of the last frame (followed by their pixels,
    unmoved): such a face takes its own place (its distance, −1, is the least) unless an earlier face took
    it. So only the other faces — and one whose own place was taken — are measured against every place:
    150 faces of which a re-detection renewed 20 cost 20 rows, not a 150 × 150 matrix."""
    if not faces or not others:
        return [None] * len(faces)
    same = {id(o): j for j, o in enumerate(others)}  # an object twice in `others`: its last place
    own = [same.get(id(face)) for face in faces]
    rows = _pair_rows(faces, others, [i for i, j in enumerate(own) if j is None], own)
    taken = np.zeros(len(others), bool)
    out: list[int | None] = []
    for i, j in enumerate(own):
        if j is not None and not taken[j]:
            taken[j] = True
            out.append(j)
            continue
        allowed, distance = rows[i] if i in rows else _pair_rows(faces, others, [i], own)[i]
        out.append(take_nearest(allowed, distance, taken))
    return out


def _pair_rows(faces: list[Face], others: list[Face], rows: list[int],
               own: list[int | None]) -> dict[int, tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]]:
    """`same_face_pairs`' rule for the faces at `rows`: per row, which of `others` it may pair with
    (`near(other, face)`, or its own object) and their squared centre distances (its own object: −1)."""
    if not rows:
        return {}
    picked = [faces[i] for i in rows]
    close = near_matrix(others, picked).T  # rows × others, `near(other, face)` as the rule reads
    (fc, _), (oc, _) = centres_widths(picked), centres_widths(others)
    distance = (oc[None, :, 0] - fc[:, None, 0]) ** 2 + (oc[None, :, 1] - fc[:, None, 1]) ** 2
    out = {}
    for k, i in enumerate(rows):
        j = own[i]
        if j is not None:
            distance[k, j] = -1.0
            close[k, j] = True
        out[i] = (close[k], distance[k])
    return out


FOLLOW_WIDTHS = 1.0
"""A face followed from one frame to the next (`FollowedFace`, `WhoIsWho`) moved to a face whose
centre is closer than this × its width to where it was (consecutive selections are a frame or a
few apart; a neighbour is at least a face width away)."""

FOLLOW_SIZE_CHANGE = 0.35
"""... and whose width differs from its width there by at most this share: a face of another size
at that place (someone leaning in over the user) is checked by identity first."""


def at_place_of(last: Face, face: Face) -> bool:
    """Whether `face` is where a face was (`last`), at about its size."""
    width = max(last.width, 1.0)
    dx = (face.box[0] + face.box[2] - last.box[0] - last.box[2]) / 2
    dy = (face.box[1] + face.box[3] - last.box[1] - last.box[3]) / 2
    return bool(np.hypot(dx, dy) < FOLLOW_WIDTHS * width and abs(face.width - last.width) <= FOLLOW_SIZE_CHANGE * width)

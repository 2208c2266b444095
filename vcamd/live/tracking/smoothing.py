"""Steady faces: each tracked face's position filtered over time, so the paste of a still head
stands still and the paste of a moving one follows it without lag.

The detector's keypoints shimmer by a pixel or so from one frame to the next even on a still
head (sensor noise moves the anchors' regressions); the paste follows them, and a viewer sees
the face swim. Each tracked face's five keypoints and box are filtered with one One-Euro filter
(Casiez, Roussel & Vogel, CHI 2012): an exponential smoothing whose cutoff rises with the face's
speed — low on a still head (the noise is averaged away), high while it moves (no lag). All the
points of a face share one cutoff, taken from the speed of their centre in face widths a
second, so the face's shape moves as one and the same settings fit a near and a far face.

A filter starts afresh (its output the detector's position) for a face that appeared, one not
`near` any face filtered in the last frame (another identity, or a track that jumped), one that
moved more than JUMP_WIDTHS in one step, and after a gap of more than GAP_S. Its output never
lags the detector's position by more than MAX_LAG_WIDTHS: the paste stays on the face it covers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vcamd.common.types import Face
from vcamd.config.schema import SmoothingConfig
from vcamd.privacy.geometry import same_face_pairs

D_CUTOFF_HZ = 4.0
"""Cutoff of the speed estimate's own smoothing (Hz). Lower steadies the speed against noise but
lets the position lag when a face starts to move."""

SHAPE_D_CUTOFF_HZ = 0.5
"""... of the shape's growth and roll (their noise is larger against slower true changes)."""

SHAPE_BETA_SHARE = 0.25
"""The shape's beta, as a share of the position's: a size measured from five noisy points
shimmers more than their centre, while a real change of size or roll is slower than a pan."""

MAX_LAG_WIDTHS = 0.02
"""The filtered position is never further than this × the face's width from the detector's
(a bound the filter's own settings already keep in normal motion: a guard, not a setting)."""

JUMP_WIDTHS = 0.25
"""A face whose centre moved more than this × its width in one step is taken where it is, unfiltered."""

GAP_S = 0.5
"""A face not filtered for longer than this starts afresh (its last position is stale)."""

STILL_EPSILON_PX = 0.05
"""An unchanged detection whose filtered position moves less than this keeps its last output
object: a still face's paste is then put back (`output.repaint.Repaint` compares faces by identity)."""


def _alpha(dt: float, cutoff_hz: float) -> float:
    """The smoothing factor of an exponential filter with this cutoff, for a step of `dt` seconds."""
    return 1.0 / (1.0 + 1.0 / (2.0 * math.pi * cutoff_hz * dt))


Speed = Callable[[np.ndarray, np.ndarray], float]
"""(filtered points, their filtered velocity per second) → the speed the cutoff follows (per second)."""


class OneEuro:
    """A One-Euro filter of a set of points (N×2) that move together: one cutoff for all of them,
    from a speed the caller defines (`Speed`)."""

    def __init__(self, min_cutoff_hz: float, beta: float, speed: Speed, d_cutoff_hz: float = D_CUTOFF_HZ) -> None:
        self.min_cutoff_hz = min_cutoff_hz
        self.beta = beta
        self.d_cutoff_hz = d_cutoff_hz
        self._speed = speed
        self._x: np.ndarray | None = None  # the filtered points
        self._dx: np.ndarray | None = None  # their filtered velocity (per second)
        self._t = 0.0

    def reset(self) -> None:
        self._x = self._dx = None

    def __call__(self, points: np.ndarray, t: float) -> np.ndarray:
        """The filtered points for `points` observed at time `t` (seconds)."""
        x = np.asarray(points, np.float64)
        dt = t - self._t
        if self._x is None or self._dx is None:
            self._x, self._dx, self._t = x.copy(), np.zeros_like(x), t
            return self._x.copy()
        if dt <= 0.0:  # the same instant again: nothing new to filter
            return self._x.copy()
        self._t = t
        self._dx = self._dx + _alpha(dt, self.d_cutoff_hz) * ((x - self._x) / dt - self._dx)
        cutoff = self.min_cutoff_hz + self.beta * self._speed(self._x, self._dx)
        self._x = self._x + _alpha(dt, cutoff) * (x - self._x)
        return self._x.copy()


def _shape_speed(shape: np.ndarray, velocity: np.ndarray) -> float:
    """How fast a centred shape grows and turns (relative size and radians per second): the
    velocity's parts along the shape's scale and rotation. Noise that only jiggles single points
    averages out here (an expression change is left to the points' own filtering)."""
    norm = float(np.sum(shape**2))
    if norm <= 0.0:
        return 0.0
    grow = float(np.sum(velocity * shape)) / norm
    turn = float(np.sum(velocity[:, 1] * shape[:, 0] - velocity[:, 0] * shape[:, 1])) / norm
    return math.hypot(grow, turn)


class FaceFilter:
    """One face's filter: where it is (the centre of its points, speed in face widths a second)
    and its shape (the points around that centre, speed from its growth and roll) filtered apart.
    A head that only moves keeps its size steady; one that comes closer or rolls opens the
    shape's filter."""

    def __init__(self, min_cutoff_hz: float, beta: float) -> None:
        self._width = 1.0
        self.centre = OneEuro(min_cutoff_hz, beta, lambda _x, v: float(np.hypot(*v[0])) / self._width)
        self.shape = OneEuro(min_cutoff_hz, beta * SHAPE_BETA_SHARE, _shape_speed, SHAPE_D_CUTOFF_HZ)

    def tune(self, min_cutoff_hz: float, beta: float) -> None:
        self.centre.min_cutoff_hz = self.shape.min_cutoff_hz = min_cutoff_hz
        self.centre.beta, self.shape.beta = beta, beta * SHAPE_BETA_SHARE

    def reset(self) -> None:
        self.centre.reset()
        self.shape.reset()

    def __call__(self, points: np.ndarray, t: float, width: float) -> np.ndarray:
        """The filtered points (N×2) of a face `width` px wide, observed at time `t`."""
        self._width = max(width, 1.0)
        centre = points.mean(axis=0, keepdims=True)
        out = self.centre(centre, t) + self.shape(points - centre, t)
        # Never far from where the face is (a guard: the paste must cover the face it is for).
        limit = MAX_LAG_WIDTHS * self._width
        kept: np.ndarray = points + np.clip(out - points, -limit, limit)
        return kept


def _points(face: Face) -> np.ndarray:
    """The face's five keypoints and its box's two corners, as 7×2."""
    x1, y1, x2, y2 = face.box
    return np.vstack([np.asarray(face.kps, np.float64).reshape(5, 2), [[x1, y1], [x2, y2]]])


def _face(points: np.ndarray, score: float) -> Face:
    (x1, y1), (x2, y2) = points[5], points[6]
    return Face(box=(float(x1), float(y1), float(x2), float(y2)), score=score, kps=points[:5].astype(np.float32))


def _centre(face: Face) -> tuple[float, float]:
    return (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2


@dataclass
class _Track:
    raw: Face  # the detector's last position
    out: Face  # what was given out for it
    filter: FaceFilter
    t: float  # when it was last filtered
    settled: bool = False  # `out` was given out again for the same `raw`: the filter has settled on it


class FaceSmoother:
    """The filters of the faces tracked now, one per face, matched from frame to frame by place."""

    def __init__(self) -> None:
        self._tracks: list[_Track] = []
        self.resets = 0
        """Filters started afresh for a face seen in the last frame (a jump, a gap, an appearance)."""

    def reset(self) -> None:
        self._tracks = []

    def steady(self, faces: Sequence[Face], t: float, cfg: SmoothingConfig, appeared: Sequence[Face] = ()) -> list[Face]:
        """`faces` (the tracker's positions at time `t`) with each position filtered; the same
        list when smoothing is off. `appeared`: faces the tracker did not track in the last frame
        (their filters start afresh)."""
        if not cfg.enabled:
            self._tracks = []
            return list(faces)
        previous = self._tracks
        tracks: list[_Track] = []
        for face, j in zip(faces, _tracks_of(faces, previous, {id(f) for f in appeared}), strict=True):
            if j is None:
                track = _Track(face, face, FaceFilter(cfg.min_cutoff_hz, cfg.beta), t)
                track.filter(_points(face), t, face.width)
                tracks.append(track)
                continue
            track = previous[j]
            if face is track.raw and track.settled and t - track.t <= GAP_S:
                # The same detection again (a face followed by its pixels, unmoved) and its filter
                # already settled on it: the same output, without running the filter.
                tracks.append(_Track(face, track.out, track.filter, t, settled=True))
                continue
            (cx, cy), (px, py) = _centre(face), _centre(track.raw)
            if t - track.t > GAP_S or math.hypot(cx - px, cy - py) > JUMP_WIDTHS * max(face.width, 1.0):
                self.resets += 1
                track.filter.reset()
            track.filter.tune(cfg.min_cutoff_hz, cfg.beta)
            points = track.filter(_points(face), t, face.width)
            settled = face is track.raw and np.abs(points - _points(track.out)).max() < STILL_EPSILON_PX
            out = track.out if settled else _face(points, face.score)  # unchanged input, settled output: replayable
            tracks.append(_Track(face, out, track.filter, t, settled=settled))
        self._tracks = tracks
        return [track.out for track in tracks]


def _tracks_of(faces: Sequence[Face], previous: list[_Track], appeared: set[int]) -> list[int | None]:
    """For each face of this frame (in order), the last frame's track that is the same face
    (`geometry.same_face_pairs`: near, the nearest not taken by an earlier face); None for a face
    that `appeared` (by id: its filter starts afresh, and it takes no track) or has no such track."""
    kept = [k for k, face in enumerate(faces) if id(face) not in appeared]
    out: list[int | None] = [None] * len(faces)
    for k, j in zip(kept, same_face_pairs([faces[k] for k in kept], [track.raw for track in previous]), strict=True):
        out[k] = j
    return out

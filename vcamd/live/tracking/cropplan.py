"""How the tracker looks for the known faces in one frame, and what each way costs.

* `crop_around` / `TrackCrop` — the square patch CROP_FACTOR × a face's box, cut and scaled to a
  detector input in one resize (one warpAffine near the frame's edges) that reads only the face's
  region of the frame, and how a detection in it maps back to the frame; `nearest_to_centre` — the
  detection in a patch that is the face followed;
* `crop_input_size` — the detector input for one face's crop: a small face's crop at 64² (a 35-px
  face in a group photo is not scaled up to 192²), a larger one never below its own pixels;
* `Mosaic` — crops of one input size tiled into one image (`vcamd.faces.mosaic`'s layout, the int8
  detector's check's too; `pays`: where that costs no more pixels), so many faces cost one detector
  run instead of one each;
* `plan_shapes` / `cut_runs` — the detector runs one frame's crops take, priced before they are cut;
* `DetectCosts` — a running estimate of the CPU one detector run costs per input shape, measured
  on the threads that run them; the tracker compares Σ crops against one full detection with it;
* `ShapeWarmer` — builds the sessions of new crop sizes and mosaic shapes off the tracker's thread.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np

from vcamd.common.types import Face, Frame, as_frame
from vcamd.faces.mosaic import MOSAIC_MIN, mosaic_columns, mosaic_shape, tiled_crops


class Detecting(Protocol):
    """What the tracker needs of a detector (`vcamd.faces.detect.FaceDetector`)."""

    def detect(self, frame: Frame, input_size: int | None = None, threshold: float | None = None) -> list[Face]: ...


CROP_FACTOR = 2.0
"""Side of the tracking crop, relative to the larger side of the face box."""

SMALL_CROP = 96
"""A crop at most this many pixels wide (a face under ~48 px) is re-detected at TRACK_MIN_SIZE —
a group photo's 35-px faces at 64² (found as surely there: 29 of 29 on the 1927 Solvay photo at
720p, against 29 at 192²), not scaled up to 192², and all in one mosaic; a larger crop
is never scaled below its own pixels (up to `track_size`): the keypoints the swap is pasted at keep
the precision they had at 192² (tests/live/test_engine.py holds them within 3 % of a full
detection; a 170-px crop at 160² went past that)."""

TRACK_MIN_SIZE = 64
"""The smallest crop input: SCRFD's coarsest stride is 32, and a face below ~16 px is not found."""

SMALL_TILE = 48
"""In a mosaic, small faces' crops (TRACK_MIN_SIZE alone) are tiles of this side: on the Solvay
photo at 720p all 29 faces are found in 48-px tiles (a 384×192 run, ~11 ms against ~18 ms at 64),
their keypoints within 3.7 % (mean) of the face width of 192² crops' — the full 640-wide detection
they are anchored to is 3.9 % off the same crops."""

COST_SMOOTHING = 0.2
"""Weight of a new measurement in the running cost per input shape."""

PROBE_EVERY = 15
"""Every this many frames the tracker tries the crops instead of a full detection while their
cost has not been measured yet (`LiveTracker.update`)."""

BACKSTOP_SHARE = 0.125
"""At most this share of the loop's deadline a frame (by the running cost estimates, over frames:
`BackstopCredit`) goes to the periodic looks at faces whose pixels only moved
(`motion.REDETECT_EVERY`); the rest wait, most overdue first (`backstop_share`): a 150-face crowd's
periodic looks cost ~21 CPU-ms a frame."""


def backstop_share_ms(deadline_s: float) -> float:
    """One frame's BACKSTOP_SHARE of the loop's deadline, in ms."""
    return BACKSTOP_SHARE * 1000.0 * deadline_s


MAX_DEBT_FRAMES = 16
"""A periodic look dearer than the share leaves at most this many frames' share to pay back
(`BackstopCredit`): a look priced far past what it costs (a shape measured while the machine
stalled) delays the next one by at most this many frames."""

_DEFAULT_MS_PER_PIXEL = 1.3e-4
"""The cost model before anything was measured (SCRFD-2.5G on one CPU core: ~32 ms for 640×384)."""


@dataclass(frozen=True, slots=True)
class TrackCrop:
    """Square crop: crop pixel = (frame pixel - origin) * scale."""

    x0: float
    y0: float
    scale: float

    def to_frame(self, face: Face) -> Face:
        inv = 1.0 / self.scale
        x1, y1, x2, y2 = face.box
        box = (x1 * inv + self.x0, y1 * inv + self.y0, x2 * inv + self.x0, y2 * inv + self.y0)
        kps = (face.kps * np.float32(inv) + np.array([self.x0, self.y0], dtype=np.float32)).astype(np.float32)
        return Face(box=box, score=face.score, kps=kps)


def crop_around(frame: Frame, face: Face, size: int) -> tuple[Frame, TrackCrop]:
    """The size² tracking patch around `face` (CROP_FACTOR × its box), and how to map back.

    The patch is a private array, so a detector thread may keep using it after the frame has moved
    on. When the square lies inside the frame it is cut on whole pixels and scaled with one resize
    (about 3× cheaper than a warpAffine); near an edge one warpAffine cuts and scales it, filling
    what lies outside the frame with black. Both read only the face's region of the frame."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    side = CROP_FACTOR * max(face.width, face.height, 1.0)
    height, width = frame.shape[:2]
    # Whole pixels: the resize's own mapping is then exact (pixel centres, as below).
    side_px = max(1, round(side))
    x0, y0 = round(cx - side_px / 2), round(cy - side_px / 2)
    if x0 >= 0 and y0 >= 0 and x0 + side_px <= width and y0 + side_px <= height:
        scale = size / side_px
        patch = as_frame(cv2.resize(frame[y0 : y0 + side_px, x0 : x0 + side_px], (size, size), interpolation=cv2.INTER_LINEAR))
        # resize maps patch pixel p to frame pixel (p + 0.5) / scale - 0.5 + x0.
        offset = 0.5 / scale - 0.5
        return patch, TrackCrop(x0=x0 + offset, y0=y0 + offset, scale=scale)
    crop = TrackCrop(x0=cx - side / 2, y0=cy - side / 2, scale=size / side)
    m = np.array([[crop.scale, 0, -crop.x0 * crop.scale], [0, crop.scale, -crop.y0 * crop.scale]], dtype=np.float32)
    patch = as_frame(cv2.warpAffine(frame, m, (size, size), flags=cv2.INTER_LINEAR, borderValue=0))
    return patch, crop


def nearest_to_centre(found: list[Face], size: int) -> Face:
    """The face we follow is the detection nearest the patch's centre."""
    centre = size / 2
    return min(found, key=lambda f: ((f.box[0] + f.box[2]) / 2 - centre) ** 2 + ((f.box[1] + f.box[3]) / 2 - centre) ** 2)


def crop_input_size(face: Face, track_size: int) -> int:
    """The square input the face's crop is re-detected at (see SMALL_CROP), between
    TRACK_MIN_SIZE and `track_size`, a multiple of 32."""
    side = CROP_FACTOR * max(face.width, face.height, 1.0)
    size = TRACK_MIN_SIZE if side <= SMALL_CROP else 32 * math.ceil(side / 32.0)
    return int(min(track_size, max(TRACK_MIN_SIZE, size)))


@dataclass(frozen=True, slots=True)
class Mosaic:
    """`len(crops)` square crops of side `tile`, row by row in `cols` columns, as one image."""

    image: Frame
    crops: list[TrackCrop]
    tile: int
    cols: int

    @classmethod
    def of(cls, patches: list[tuple[Frame, TrackCrop]], tile: int) -> Mosaic:
        image = tiled_crops([patch for patch, _ in patches], tile)
        return cls(image, [crop for _, crop in patches], tile, mosaic_columns(len(patches)))

    def split(self, found: list[Face]) -> list[Face | None]:
        """Per crop, in frame coordinates, the detection nearest its tile's centre among those
        inside the tile (centre in it, box within it give or take an eighth of a tile), else None.
        A detection straddling two tiles (halves of two neighbours' faces) belongs to neither."""
        t = self.tile
        slack = t / 8.0
        best: list[tuple[float, Face] | None] = [None] * len(self.crops)
        for face in found:
            x1, y1, x2, y2 = face.box
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            col, row = int(cx // t), int(cy // t)
            k = row * self.cols + col
            if not (0 <= col < self.cols and 0 <= k < len(self.crops)):
                continue
            ox, oy = col * t, row * t
            if x1 < ox - slack or y1 < oy - slack or x2 > ox + t + slack or y2 > oy + t + slack:
                continue
            d = (cx - ox - t / 2) ** 2 + (cy - oy - t / 2) ** 2
            held = best[k]
            if held is None or d < held[0]:
                local = Face(box=(x1 - ox, y1 - oy, x2 - ox, y2 - oy), score=face.score,
                             kps=(face.kps - np.array([ox, oy], np.float32)).astype(np.float32))
                best[k] = (d, local)
        return [self.crops[k].to_frame(b[1]) if b is not None else None for k, b in enumerate(best)]


@dataclass(frozen=True, slots=True)
class CropRun:
    """One detector run of the crop re-detection: a single crop, or a mosaic of several."""

    image: Frame
    size: int  # detector input size (long side)
    members: list[int]  # indices into the faces looked for
    mosaic: Mosaic | None  # None: one crop, `crop` maps it back
    crop: TrackCrop | None = None


def pays(n: int, size: int) -> bool:
    """Whether n crops of this input size are tiled: from MOSAIC_MIN on, when the mosaic has no
    more pixels than the crops one by one (3 crops in a 2×2 mosaic would be a quarter dearer)."""
    h, w = mosaic_shape(n, mosaic_tile(size))
    return n >= MOSAIC_MIN and h * w <= n * size * size


def mosaic_tile(size: int) -> int:
    """The tile side in a mosaic for crops of this input size."""
    return SMALL_TILE if size == TRACK_MIN_SIZE else size


def plan_shapes(faces: list[Face], track_size: int, ready: Callable[[tuple[int, int]], bool] = lambda _: True
                ) -> tuple[list[int], list[tuple[int, int]], list[tuple[int, int]]]:
    """(input size per face, the input shapes the crop runs will have, shapes wanted but not
    `ready` — a crop size not built yet runs at `track_size`, a mosaic not built yet as single
    crops, meanwhile) — without cutting anything, so the tracker can price the crops before
    choosing them, and `cut_runs` cuts them at these sizes."""
    # A crop size whose session is not built yet runs at track_size (built at start-up) meanwhile.
    sizes = [size if size == track_size or ready((size, size)) else track_size
             for size in (crop_input_size(f, track_size) for f in faces)]
    wanted = {crop_input_size(f, track_size) for f in faces} - {track_size}
    unready: list[tuple[int, int]] = [(size, size) for size in sorted(wanted) if not ready((size, size))]
    shapes, mosaics_unready = run_shapes(sizes, ready)
    return sizes, shapes, unready + mosaics_unready


def run_shapes(sizes: list[int], ready: Callable[[tuple[int, int]], bool]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(the input shapes of the detector runs crops of these input sizes take, the mosaic shapes
    that would pay but are not `ready`: those crops run one by one meanwhile)."""
    shapes: list[tuple[int, int]] = []
    unready: list[tuple[int, int]] = []
    for size in sorted(set(sizes)):
        n = sizes.count(size)
        shape = mosaic_shape(n, mosaic_tile(size))
        if pays(n, size) and ready(shape):
            shapes.append(shape)
        else:
            if pays(n, size):
                unready.append(shape)
            shapes += [(size, size)] * n
    return shapes, unready


@dataclass(slots=True)
class BackstopCredit:
    """The periodic looks' share kept over frames rather than per frame. Each frame adds its share
    (capped at one frame's: no saving up for a burst); a look spends its estimated price, and one
    dearer than the credit leaves the next frames without a periodic look until their shares have
    paid for it (at most MAX_DEBT_FRAMES). Per frame, "at least one face a look" took every frame
    past the share whenever one face's look cost more than it: a 146-face crowd at det_10g's cost
    (`loop_cost.py --at-10g`) looked at one face every frame for 6–26 ms against a share of 8.3,
    12 CPU-ms a frame on the tracker's thread."""

    credit_ms: float = 0.0
    last_frame: int | None = None

    def available(self, frame_index: int, share_ms: float) -> float:
        """The credit for a look at frame `frame_index`, this frame's share (and any frames' since
        the last call) added."""
        frames = 1 if self.last_frame is None else max(0, frame_index - self.last_frame)
        self.last_frame = frame_index
        self.credit_ms = min(share_ms, self.credit_ms + frames * share_ms)
        return self.credit_ms

    def spend(self, price_ms: float, share_ms: float) -> None:
        self.credit_ms = max(-MAX_DEBT_FRAMES * share_ms, self.credit_ms - price_ms)


def backstop_share(costs: DetectCosts, must: list[Face], due: list[Face], track_size: int,
                   ready: Callable[[tuple[int, int]], bool], budget_ms: float) -> tuple[int, float]:
    """How many of `due` (faces whose pixels only moved, due for their periodic look; most overdue
    first) one look takes besides `must` (the faces it has to look at), and their added estimated
    CPU: the most whose added price is within `budget_ms` — at least one while there is any budget
    (`BackstopCredit`), so every face is looked at in its turn; none without."""
    if not due or budget_ms <= 0.0:
        return 0, 0.0
    sizes = plan_shapes(must + due, track_size, ready)[0]

    def price(k: int) -> float:  # the look with the first k due faces
        return sum(costs.estimate(shape) for shape in run_shapes(sizes[: len(must) + k], ready)[0])

    base = price(0) if must else 0.0
    low, high = 1, len(due)  # the added price grows with the faces taken: the most that fit
    while low < high:
        mid = (low + high + 1) // 2
        if price(mid) - base <= budget_ms:
            low = mid
        else:
            high = mid - 1
    return low, price(low) - base


def cut_runs(frame: Frame, faces: list[Face], sizes: list[int],
             ready: Callable[[tuple[int, int]], bool] = lambda _: True) -> list[CropRun]:
    """The crops (private copies, cut on the caller's thread), grouped into detector runs."""
    runs: list[CropRun] = []
    for size in sorted(set(sizes)):
        members = [i for i, s in enumerate(sizes) if s == size]
        tile = mosaic_tile(size)
        if pays(len(members), size) and ready(mosaic_shape(len(members), tile)):
            mosaic = Mosaic.of([crop_around(frame, faces[i], tile) for i in members], tile)
            runs.append(CropRun(mosaic.image, max(mosaic.image.shape[:2]), members, mosaic))
        else:
            patches = [crop_around(frame, faces[i], size) for i in members]
            runs += [CropRun(patch, size, [i], None, crop) for i, (patch, crop) in zip(members, patches)]
    return runs


class DetectCosts:
    """Running CPU ms of one detector run per input shape (h, w), fed by the threads that run
    them. The first run of a shape is not counted (it may build the shape's session). A shape not
    measured yet is priced by its pixels at the measured shapes' median ms per pixel."""

    def __init__(self) -> None:
        self._ms: dict[tuple[int, int], float] = {}
        self._first: set[tuple[int, int]] = set()
        self._lock = threading.Lock()

    def record(self, shape: tuple[int, int], ms: float) -> None:
        with self._lock:
            if shape not in self._first:
                self._first.add(shape)
                return
            old = self._ms.get(shape)
            self._ms[shape] = ms if old is None else old + COST_SMOOTHING * (ms - old)

    def estimate(self, shape: tuple[int, int]) -> float:
        with self._lock:
            known = self._ms.get(shape)
            if known is not None:
                return known
            rates = [ms / (h * w) for (h, w), ms in self._ms.items()]
        rate = float(np.median(rates)) if rates else _DEFAULT_MS_PER_PIXEL
        return rate * shape[0] * shape[1]

    def unmeasured(self, shapes: list[tuple[int, int]]) -> bool:
        """Whether any of these shapes has no measured cost yet (its estimate is extrapolated)."""
        with self._lock:
            return any(shape not in self._ms for shape in shapes)

    def measured(self, shape: tuple[int, int]) -> float | None:
        with self._lock:
            return self._ms.get(shape)


class ShapeWarmer:
    """Builds the detector's session for a crop size or a mosaic shape on a short-lived thread of
    its own, one at a time, when a face first needs it (150–600 ms each here: on the tracker's
    thread a new group's first frames would miss their deadline; at start-up, every size a face
    might need would delay the first frame). Until then the crops run at shapes already built."""

    def __init__(self) -> None:
        self._ready: set[tuple[int, int]] = set()
        self._building: threading.Thread | None = None

    def ready(self, shape: tuple[int, int]) -> bool:
        return shape in self._ready

    @property
    def busy(self) -> bool:
        """A session is being built now (the tracker is warming up)."""
        return self._building is not None and self._building.is_alive()

    def build(self, shapes: list[tuple[int, int]], detector: Detecting) -> None:
        """Start building the first of `shapes` not built yet (one at a time; called every frame)."""
        if not shapes or (self._building is not None and self._building.is_alive()):
            return
        shape = shapes[0]
        blank = np.zeros((*shape, 3), np.uint8)

        def run() -> None:
            try:
                detector.detect(blank, max(shape))
            except Exception:  # a detector that fails here fails the crops too, where it is counted
                return
            self._ready.add(shape)  # one writer; readers see the shape once it is in

        self._building = threading.Thread(target=run, name="tracker-warm-up", daemon=True)
        self._building.start()


def crop_results(runs: list[CropRun], found_lists: list[list[Face]], n: int) -> list[Face | None]:
    """Per face looked for (of `n`), its detection in the crop runs' results (`cut_runs`), or None."""
    found: list[Face | None] = [None] * n
    for run, dets in zip(runs, found_lists):
        if run.mosaic is not None:
            for i, face in zip(run.members, run.mosaic.split(dets)):
                found[i] = face
        elif dets:
            assert run.crop is not None
            found[run.members[0]] = run.crop.to_frame(nearest_to_centre(dets, run.size))
    return found


class LookStretch:
    """How many times its CPU estimate a look on the tracker's thread takes in wall time, running
    (COST_SMOOTHING), never under 1: about 1 on a quiet machine, 2–3 beside a call app that keeps
    both cores busy. A look's estimated CPU times this is what the loop would wait for it."""

    def __init__(self) -> None:
        self.value = 1.0

    def seen(self, wall_ms: float, estimate_ms: float) -> None:
        """A look estimated at `estimate_ms` of CPU came back after `wall_ms`."""
        if estimate_ms > 0.0:
            self.value = max(1.0, self.value + COST_SMOOTHING * (wall_ms / estimate_ms - self.value))

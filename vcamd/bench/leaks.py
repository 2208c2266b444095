"""What the end-to-end leak tests (tests/privacy) and the privacy benchmarks (benchmarks/newcomer*.py,
selection.py) share: the checkers (both real SCRFD detectors, the real MobileFaceNet, the stranger),
camera clips with jumps and gaps, a stand-in swapper that puts a *different real person* on every
face, `vcamd run` until it has shown enough, and the check of every published frame. No pytest.

Why a different real person: the light stand-in swapper (vcamd.bench.standins) only tints the crop and
inverts its centre, so what it returns is still, to a recogniser, more or less the person in the
camera; a check "no face in the output is the camera's person" would then fail on correct swaps.
`build_identity_swapper` returns a fixed aligned crop of someone else whatever it is given — what
a perfect swapper would show — so a swapped face is a face SCRFD finds, of a stranger, and any
frame where the camera's person is recognised is a leak. It can also be made slow (a convolution
chain on its input whose result is multiplied by zero), so swaps arrive late and misses happen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vcamd.bench.clips import BACKGROUND
from vcamd.bench.daemon import DaemonRun
from vcamd.common.types import Face, Frame
from vcamd.faces.align import estimate_affine, warp
from vcamd.faces.detect import FaceDetector, iou
from vcamd.faces.identity import Recognizer
from vcamd.inference.runtime import Sessions

SWAP_SIZE = 128
MAX_COSINE = 0.3
"""A published face matching the camera's person above this is a leak (same person ≈ 0.95,
strangers ≈ 0.2; an obscured face ≤ 0.14, see docs/reliability.md)."""


# -- the checkers -----------------------------------------------------------------------------------

CHECK_DETECTORS = ("scrfd_500m_kps.onnx", "scrfd_2.5g_kps.onnx")


def load_checkers(models: Path, threads: int = 2) -> tuple[list[FaceDetector], Recognizer]:
    """(both real SCRFD models, the real MobileFaceNet) from the `models` folder: what the raw faces
    are placed and every published frame is checked with."""
    sessions = Sessions(["cpu"], threads=threads)
    both = [FaceDetector(models / name, sessions) for name in CHECK_DETECTORS]
    return both, Recognizer(models / "mobilefacenet.onnx", sessions)


def stranger(images: Path, detector: FaceDetector, recognizer: Recognizer) -> tuple[Frame, np.ndarray]:
    """The face the stand-in swapper puts on every face: crowd_selfie.jpg's largest (as `detector`
    finds it), as (its aligned crop, its embedding). Not for a clip of that crowd, where she is
    one of the people (`stranger_from` another photo there)."""
    return stranger_from(cv2.imread(str(images / "crowd_selfie.jpg")), detector, recognizer)


def stranger_from(photo: Frame, detector: FaceDetector, recognizer: Recognizer) -> tuple[Frame, np.ndarray]:
    """`photo`'s largest face (as `detector` finds it) as (its aligned crop, its embedding): the
    face a stand-in swapper pastes."""
    face = max(detector.detect(photo), key=lambda f: f.area)
    return aligned_crop(photo, face), recognizer.embed(photo, face)


# -- the stand-in swapper ------------------------------------------------------------------------


def aligned_crop(image: Frame, face: Face) -> Frame:
    """The face's 128² ArcFace-aligned crop, as inswapper sees (and returns) a face."""
    return warp(image, estimate_affine(face.kps, SWAP_SIZE, "arcface"), SWAP_SIZE)


def build_identity_swapper(path: Path, stranger_crop: Frame, *, slow_convs: int = 0) -> Path:
    """An inswapper_128-signature model (`target` [1,3,128,128], `source` [1,512] → `output`, RGB in
    [0,1]) whose output is always `stranger_crop` (a 128² aligned BGR face of another person).
    `slow_convs` 64-channel 3×3 convolutions over the target (≈ 600 M multiply-adds each) are
    computed and multiplied by zero: they cost time, not pixels."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.ascontiguousarray(stranger_crop[..., ::-1].transpose(2, 0, 1)[None] / 255.0).astype(np.float32), "stranger")]
    nodes = []
    x = "target"
    channels = 3
    for i in range(slow_convs):
        inits.append(numpy_helper.from_array((rng.standard_normal((64, channels, 3, 3)) * 0.05).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x, channels = f"r{i}", 64
    inits.append(numpy_helper.from_array(np.zeros((), np.float32), "zero"))
    nodes += [
        helper.make_node("ReduceMean", [x], ["busy"], keepdims=1),
        helper.make_node("Mul", ["busy", "zero"], ["nothing"]),
        helper.make_node("Add", ["stranger", "nothing"], ["shown"]),
        # the source latent is an input of the real model: consume it (times zero) like the target
        helper.make_node("MatMul", ["source", "emap"], ["latent"]),
        helper.make_node("ReduceMean", ["latent"], ["latent_mean"], keepdims=0),
        helper.make_node("Mul", ["latent_mean", "zero"], ["no_latent"]),
        helper.make_node("Add", ["shown", "no_latent"], ["output"]),
    ]
    inits.append(numpy_helper.from_array((rng.standard_normal((512, 512)) / np.sqrt(512)).astype(np.float32), "emap"))  # last, like inswapper
    graph = helper.make_graph(
        nodes, "identity_swapper",
        [helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, SWAP_SIZE, SWAP_SIZE]),
         helper.make_tensor_value_info("source", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, SWAP_SIZE, SWAP_SIZE])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="vcamd.bench.leaks")
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


# -- camera clips ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where the camera shows a face: its keypoints in the raw frame and its raw embedding."""

    face: Face
    embedding: np.ndarray


@dataclass
class Clip:
    path: Path
    size: tuple[int, int]
    fps: float
    frames: list[Frame] = field(repr=False)
    placements: list[Placement]
    """Every distinct place a raw face is shown in the clip."""


def paste(canvas: Frame, image: Frame, x: int, y: int) -> Frame:
    """`image` with its top-left corner at (x, y); what falls outside the canvas is cut off."""
    h, w = image.shape[:2]
    x0, y0, x1, y1 = max(0, x), max(0, y), min(canvas.shape[1], x + w), min(canvas.shape[0], y + h)
    if x1 > x0 and y1 > y0:
        canvas[y0:y1, x0:x1] = image[y0 - y : y1 - y, x0 - x : x1 - x]
    return canvas


def beside_frames(main: tuple[Frame, tuple[float, float]], newcomer: tuple[Frame, tuple[float, float]],
                  centres: list[float | None], size: tuple[int, int]) -> list[Frame]:
    """Frames of `size` on grey: the `main` head (a `head_cut`) at 30 % of the width in every frame,
    the `newcomer` head centred at `centres[i]` × the width in frame i (None: not there; near or
    past 1.0: partly outside the right edge, sliding in)."""
    width, height = size
    (head, (mcx, mcy)), (other, (ncx, ncy)) = main, newcomer
    frames = []
    for centre in centres:
        frame = np.full((height, width, 3), BACKGROUND, np.uint8)
        paste(frame, head, int(0.3 * width - mcx), int(height / 2 - mcy))
        if centre is not None:
            paste(frame, other, int(centre * width - ncx), int(height / 2 - ncy))
        frames.append(frame)
    return frames


def write_clip(path: Path, frames: list[Frame], fps: float) -> Path:
    """Lossless (FFV1), so the raw faces the check compares with are exactly what the camera shows."""
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"FFV1"), fps, (w, h))
    assert writer.isOpened(), f"cannot write {path} (FFV1)"
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def read_video(path: Path) -> list[Frame]:
    capture = cv2.VideoCapture(str(path))
    assert capture.isOpened(), f"cannot open {path}"
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames


def placements_in(frame: Frame, detectors: list[FaceDetector], recognizer: Recognizer, min_width: float = 0.0) -> list[Placement]:
    """The raw faces in a frame (either detector, 0.5; one face found by both counted once), at
    least `min_width` px wide."""
    faces: list[Face] = []
    for detector in detectors:
        faces += [f for f in detector.detect(frame) if f.score >= 0.5 and all(iou(f.box, g.box) <= 0.5 for g in faces)]
    return [Placement(f, recognizer.embed(frame, f)) for f in faces if f.width >= min_width]


def head_cut(portrait: Frame, face: Face, face_px: float, margin: tuple[float, float] = (1.1, 1.0)) -> tuple[Frame, tuple[float, float]]:
    """The head around `face`, scaled so the face is `face_px` high, and the face's centre in it.
    `margin`: how far the cut reaches from the centre, in face widths and heights."""
    scale = face_px / face.height
    scaled = cv2.resize(portrait, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    cx, cy = (face.box[0] + face.box[2]) / 2 * scale, (face.box[1] + face.box[3]) / 2 * scale
    half_w, half_h = int(face.width * scale * margin[0]), int(face.height * scale * margin[1])
    x0, y0 = max(0, int(cx - half_w)), max(0, int(cy - half_h))
    return scaled[y0 : int(cy + half_h), x0 : int(cx + half_w)], (cx - x0, cy - y0)


def portrait_clip(
    path: Path, portrait: Frame, face: Face, centres: list[float | None], *, size: tuple[int, int], fps: float,
    face_height: float, detectors: list[FaceDetector], recognizer: Recognizer,
) -> Clip:
    """The portrait's head (its face `face_height` of the frame high) on grey, centred at
    `centres[i]` × frame width in frame i, or absent where the centre is None."""
    width, height = size
    head, (head_cx, head_cy) = head_cut(portrait, face, height * face_height)
    frames, placements, seen = [], [], {}
    for centre in centres:
        frame = np.full((height, width, 3), BACKGROUND, np.uint8)
        if centre is not None:
            x, y = int(centre * width - head_cx), int(height / 2 - head_cy)
            paste(frame, head, x, y)
            if centre not in seen:
                seen[centre] = placements_in(frame, detectors, recognizer)
                assert len(seen[centre]) == 1, f"the clip's face at {centre} should be found once, got {len(seen[centre])}"
                placements += seen[centre]
        frames.append(frame)
    return Clip(write_clip(path, frames, fps), size, fps, frames, placements)


def still_clip(path: Path, picture: Frame, *, frames: int, fps: float, detectors: list[FaceDetector], recognizer: Recognizer) -> Clip:
    """A still camera showing `picture`."""
    h, w = picture.shape[:2]
    return Clip(write_clip(path, [picture] * frames, fps), (w, h), fps, [picture] * frames, placements_in(picture, detectors, recognizer))


# -- the daemon, run until it has shown enough ------------------------------------------------------

def run_daemon_until(work: Path, name: str, cfg, clip: Clip, *, frames: int, swapped_faces: int,
                     env: dict[str, str] | None = None) -> tuple[list[Frame], dict]:
    """`vcamd run` with `cfg` on `clip` (looped) into `work/NAME.mp4` until its status shows at least
    `frames` published frames and `swapped_faces` swapped faces — conditions, never a clock: on a busy
    machine the models load and the first swaps land later, so the run is longer — then `vcamd quit`.
    Returns every published frame and the run's stats JSON."""
    import tomli_w  # the `test` extra: only tests and benchmarks run this

    config, out, stats_path = work / f"{name}.toml", work / f"{name}.mp4", work / f"{name}.json"
    config.write_text(tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    with DaemonRun(config, clip.path, f"file:{out}", work / f"rt-{name}", args=["--stats-json", str(stats_path)], env=env) as daemon:
        daemon.wait_for(lambda s: s["frames"]["published"] >= frames and s["faces"]["swapped"] >= swapped_faces,
                        f"{frames} published frames and {swapped_faces} swapped faces")
        output = daemon.quit()
    assert daemon.returncode == 0, output[-2000:]
    stats = json.loads(stats_path.read_text())
    published = read_video(out)
    assert len(published) == stats["frames"]["published"] >= frames
    return published, stats


# -- the check -------------------------------------------------------------------------------------



@dataclass(frozen=True)
class Leak:
    frame: int
    how: str
    cosine: float

    def __str__(self) -> str:
        return f"frame {self.frame}: {self.how} (cosine {self.cosine:.2f})"


def recognised_as(embedding: np.ndarray, raw: np.ndarray, swapped_identity: np.ndarray | None = None) -> float | None:
    """The cosine with which published pixels (`embedding`) are the raw face `raw`, or None when
    they are not: at most MAX_COSINE, or matching the face swapped in at least as well (see
    `find_leaks`)."""
    cosine = float(embedding @ raw)
    if cosine <= MAX_COSINE:
        return None
    if swapped_identity is not None and float(embedding @ swapped_identity) >= cosine:
        return None  # recognised as the face swapped in
    return cosine


@dataclass(frozen=True)
class Crowd:
    """The raw faces of a whole crowd photo (either checker): the people a face shown in a window of
    it is identified among (`identified`)."""

    places: list[Placement]
    embeddings: np.ndarray

    @classmethod
    def of(cls, photo: Frame, detectors: list[FaceDetector], recognizer: Recognizer) -> Crowd:
        places = placements_in(photo, detectors, recognizer)
        return cls(places, np.stack([p.embedding for p in places]))

    def identified(self, embedding: np.ndarray, raw: Placement, offset: tuple[int, int],
                   swapped_identity: np.ndarray | None = None) -> float | None:
        """The cosine with which published pixels (`embedding`) identify the raw face `raw` of a
        window at `offset` (x, y) of the photo, or None when they do not: its own raw embedding must
        be closer to them than every other person of the crowd, and above MAX_COSINE (and closer
        than the face swapped in). The others are the photo's faces away from `raw`'s place (the
        same person cut by the window's edge is not another person).

        For crowds of small faces, where a cosine alone does not tell: on crowd_selfie's 40–140-px
        faces MobileFaceNet scores some obscured faces 0.3–0.6 against their raw selves, and as high
        against other people of the crowd. Measured on 413 faces (≥ 40 px) of twelve 1280×720 windows
        across it: raw, all 413 are identified this way; obscured in place, or with the frame
        obscured whole, none — where the cosine alone calls 27 and 37 of them recognised
        (tests/privacy/test_identification.py checks four of the windows)."""
        x, y = offset
        box = (raw.face.box[0] + x, raw.face.box[1] + y, raw.face.box[2] + x, raw.face.box[3] + y)
        others = self.embeddings[[iou(box, p.face.box) <= 0.1 for p in self.places]]
        own_cosine = float(embedding @ raw.embedding)
        if own_cosine <= MAX_COSINE or bool((others @ embedding > own_cosine).any()):
            return None
        if swapped_identity is not None and float(embedding @ swapped_identity) >= own_cosine:
            return None  # recognised as the face swapped in
        return own_cosine


def find_leaks(frames: list[Frame], placements: list[Placement], detectors: list[FaceDetector], recognizer: Recognizer,
               swapped_identity: np.ndarray | None = None) -> list[Leak]:
    """Every published frame, checked two ways:
    - at every place the camera ever showed a raw face, MobileFaceNet on the published pixels
      (aligned at the raw keypoints) must not match that raw face;
    - every face the SCRFD detectors find at 0.5 must not match the raw face it overlaps (or, with
      one person in the clip, that person wherever it is).

    "Match" is a cosine above MAX_COSINE. With `swapped_identity` (the embedding of the face the
    swapper puts in), a face that matches that identity at least as well as the raw person is a
    swap, not a leak: a swap replaces the inner face and keeps the person's hair, outline and
    lighting, and on a group photo's 25-px faces that context alone scores up to ~0.3 against the
    raw person while the face scores ~0.5 as the stranger it is (measured: docs/reliability.md,
    "End to end"). A raw face (≈ 0.9 raw, ≈ 0.1 stranger) and an obscured one (≤ 0.14 raw) are
    judged exactly as without it."""
    leaks: list[Leak] = []
    one_person = len(placements) > 0 and all(float(p.embedding @ placements[0].embedding) > 0.9 for p in placements)

    def recognised(embedding: np.ndarray, raw: np.ndarray) -> float | None:
        return recognised_as(embedding, raw, swapped_identity)

    for i, frame in enumerate(frames):
        for p in placements:
            cosine = recognised(recognizer.embed(frame, p.face), p.embedding)
            if cosine is not None:
                leaks.append(Leak(i, f"raw face at x={p.face.box[0]:.0f},y={p.face.box[1]:.0f} recognised in place", cosine))
        for detector in detectors:
            for face in detector.detect(frame):
                if face.score < 0.5:
                    continue
                if one_person:
                    against = placements[:1]
                else:
                    against = [p for p in placements if iou(face.box, p.face.box) > 0.3]
                if not against:
                    continue
                embedding = recognizer.embed(frame, face)
                matches = [c for c in (recognised(embedding, p.embedding) for p in against) if c is not None]
                if matches:
                    leaks.append(Leak(i, f"{detector.path.name} finds the raw person at x={face.box[0]:.0f} (score {face.score:.2f})", max(matches)))
    return leaks

"""What the face-mapping tests share: a stand-in swapper that shows the source face itself, and
people cut from the real portraits in ../shared/assets/images.

`build_source_swapper` has uniface_256's exact signature (`target` [1,3,256,256], `source` — the
source face aligned as FFHQ 256² — [1,3,256,256] → `output`); it returns its `source` input, so a
swapped face *is* the source photo's face, aligned to the camera face's keypoints: the real
recogniser tells which source a published face shows, as it would for a perfect swapper.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vcamd.common.types import Face, Frame
from vcamd.faces.detect import FaceDetector
from vcamd.faces.identity import Recognizer

SIDE = 256


def build_source_swapper(folder: Path) -> Path:
    """`folder/uniface_256.onnx` (named so its family is told by its name): output = source, mapped
    from uniface's [0, 1] source into its [-1, 1] output, plus zero times the target."""
    zero, two, one = (numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((0.0, "zero"), (2.0, "two"), (1.0, "one")))
    nodes = [
        helper.make_node("ReduceMean", ["target"], ["target_mean"], keepdims=0),
        helper.make_node("Mul", ["target_mean", "zero"], ["nothing"]),
        helper.make_node("Mul", ["source", "two"], ["doubled"]),
        helper.make_node("Sub", ["doubled", "one"], ["centred"]),
        helper.make_node("Add", ["centred", "nothing"], ["output"]),
    ]
    shape = [1, 3, SIDE, SIDE]
    graph = helper.make_graph(nodes, "source_swapper",
                              [helper.make_tensor_value_info("target", TensorProto.FLOAT, shape),
                               helper.make_tensor_value_info("source", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], initializer=[zero, two, one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests.support.mapping")
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "uniface_256.onnx"
    onnx.save_model(model, str(path))
    return path


def head(picture: Frame, face: Face, face_px: float) -> Frame:
    """The head around `face` (1.2 face widths each side, 1.1 heights), scaled so the face is `face_px` high."""
    scale = face_px / face.height
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    hw, hh = face.width * 1.2, face.height * 1.1
    x0, y0 = max(0, int(cx - hw)), max(0, int(cy - hh))
    cut = picture[y0 : int(cy + hh), x0 : int(cx + hw)]
    return cv2.resize(cut, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)


def one_face_heads(images: Path, detector: FaceDetector, count: int, face_px: float) -> list[Frame]:
    """`count` different real people's heads, each with exactly one face in it: Newton's portrait,
    then the Solvay photo's largest faces whose cut holds no neighbour's face."""
    newton = cv2.imread(str(images / "newton.png"))
    solvay = cv2.imread(str(images / "solvay_conference_1927.png"))
    candidates = [head(newton, max(detector.detect(newton), key=lambda f: f.area), face_px)]
    candidates += [head(solvay, f, face_px) for f in sorted(detector.detect(solvay, 1280), key=lambda f: f.area, reverse=True)]
    heads = [h for h in candidates if len(detector.detect(on_grey(h))) == 1]
    assert len(heads) >= count, f"only {len(heads)} one-face heads"
    return heads[:count]


def on_grey(picture: Frame, margin: int = 40) -> Frame:
    """`picture` on a grey border (a photo of one person, as a user would give)."""
    return cv2.copyMakeBorder(picture, margin, margin, margin, margin, cv2.BORDER_CONSTANT, value=(128, 128, 128))


# -- the mapping clip: three people, each in their own third of the frame -----------------------------

SIZE = (960, 540)
LANES = 3
MAX_COSINE = 0.3
"""Published pixels are a person when their cosine with that person is above this and above every
other person's (same person ≈ 0.9, strangers ≤ 0.35, an obscured face ≤ 0.15: `vcamd.bench.leaks`)."""


def lane_of(face: Face) -> int:
    return min(LANES - 1, int((face.box[0] + face.box[2]) / 2 / (SIZE[0] / LANES)))


def present(person: int, index: int, frames: int) -> bool:
    """Who is in frame `index`: person 2 (the unmapped one) comes in after a fifth of the clip;
    person 0 leaves for a sixth of it after half of it and comes back."""
    if person == 2:
        return index >= frames // 5
    if person == 0:
        return not (frames // 2 <= index < frames // 2 + frames // 6)
    return True


def clip_frames(heads: list[Frame], frames: int) -> list[Frame]:
    """Person k moves inside the k-th third of the frame (sways across it, bobs up and down, leans
    in and out by ±12 %), on grey; `present` says who is in which frame."""
    width, height = SIZE
    lane = width / LANES
    out = []
    for i in range(frames):
        canvas = np.full((height, width, 3), 128, np.uint8)
        for k, picture in enumerate(heads):
            if not present(k, i, frames):
                continue
            t = i / 30.0
            scale = 1.0 + 0.12 * np.sin(2 * np.pi * t / 2.3 + k)
            moving = cv2.resize(picture, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
            h, w = moving.shape[:2]
            cx = lane * (k + 0.5) + 0.18 * lane * np.sin(2 * np.pi * t / 1.7 + 2 * k)
            cy = height / 2 + 0.12 * height * np.sin(2 * np.pi * t / 2.9 + k)
            x, y = int(cx - w / 2), int(cy - h / 2)
            x0, y0 = max(0, x), max(0, y)
            canvas[y0 : y + h, x0 : x + w] = moving[y0 - y : min(h, height - y), x0 - x : min(w, width - x)][: height - y0, : width - x0]
        out.append(canvas)
    return out


def verdicts(published: Frame, faces: list[Face], embed, people: np.ndarray, wants: list[int | None]) -> list[str]:  # type: ignore[no-untyped-def]
    """What each face shown in `published` at `faces` is, judged per lane: a lane's face must be the
    source its person wants (`wants[lane]`: an index into `people`), or unrecognisable (covered);
    None: nobody may be recognised there. Returns the failures, one line each."""
    failures = []
    for face in faces:
        lane = lane_of(face)
        cosines = people @ embed(published, face)
        best = int(np.argmax(cosines))
        if cosines[best] <= MAX_COSINE or best == wants[lane]:
            continue
        failures.append(f"lane {lane}: shows person {best} (cosine {cosines[best]:.2f}), wants {wants[lane]}")
    return failures


@dataclass(frozen=True)
class Case:
    """Five real people (heads): 0, 1, 2 in the camera, 3 and 4 the sources; 0 is mapped to 3, 1 to
    4, 2 is not mapped. `photos`: each head as a photo on disk; `people`: their embeddings (the
    checker's MobileFaceNet); `config`: a `vcamd` config (real SCRFD-500M and MobileFaceNet, the
    source stand-in swapper, the two mappings) as a dict."""

    heads: list[Frame]
    photos: list[Path]
    people: np.ndarray
    config: dict

    WANTS = (3, 4, None)  # per lane: the person shown there must be this one, or nobody


def make_case(work: Path, assets: Path, detector: FaceDetector, recognizer: Recognizer, face_px: float = 100) -> Case:
    heads = one_face_heads(assets / "images", detector, 5, face_px)
    photos = []
    for k, picture in enumerate(heads):
        photos.append(work / f"person{k}.png")
        cv2.imwrite(str(photos[-1]), on_grey(picture))
    people = np.stack([recognizer.embed(on_grey(h), max(detector.detect(on_grey(h)), key=lambda f: f.area)) for h in heads])
    config = {
        "models": {"detector": str(assets / "models" / "scrfd_500m_kps.onnx"), "recognizer": str(assets / "models" / "mobilefacenet.onnx"),
                   "swapper": str(build_source_swapper(work)), "providers": ["cpu"], "threads": 1},
        "swap": {"source_consent": True, "on_miss": "blur",
                 "map": [{"reference": str(photos[0]), "source": str(photos[3])}, {"reference": str(photos[1]), "source": str(photos[4])}]},
        "disclosure": {"badge": False},
    }
    return Case(heads, photos, people, config)


def check_frames(published: list[Frame], detectors: list[FaceDetector], recognizer: Recognizer, case: Case,
                 raw: list[Frame] | None = None) -> tuple[list[str], int]:
    """Every published frame judged (`verdicts`): the faces either detector finds in it (0.5) and,
    with the `raw` frames it came from, the pixels at every raw face's own keypoints. Returns the
    failures and how many faces of the mapped people showed their own source."""
    failures, right = [], 0
    for i, frame in enumerate(published):
        faces = [f for d in detectors for f in d.detect(frame) if f.score >= 0.5]
        if raw is not None:
            faces += detectors[0].detect(raw[i])
        failures += [f"frame {i}: {line}" for line in verdicts(frame, faces, recognizer.embed, case.people, list(case.WANTS))]
        for face in [f for f in detectors[0].detect(frame) if f.score >= 0.5]:
            want = case.WANTS[lane_of(face)]
            cosines = case.people @ recognizer.embed(frame, face)
            right += want is not None and int(np.argmax(cosines)) == want and cosines[want] > MAX_COSINE
    return failures, right

"""Who a face is: ArcFace-style embeddings, the source identity, and reference-face selection.

The source identity (the face to put on the camera) is computed once per source photo, never per
frame. `pick_reference` serves `face_selection = "reference"`: in a frame with several people,
swap the one most like a reference photo.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from vcamd.common.errors import FaceError, ModelError
from vcamd.common.types import Face, Frame
from vcamd.common.wayout import ways_out
from vcamd.faces.specs import ARCFACE_PIXELS, RECOGNIZER_CROP, CropSpec

if TYPE_CHECKING:
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.source_cache import ReadFace
    from vcamd.inference.runtime import Sessions

log = logging.getLogger(__name__)

Embedding = npt.NDArray[np.float32]
"""(D,) float32, L2-normalised."""

CROP_SIZE = RECOGNIZER_CROP.size

RAW_PIXELS = (0.0, 1.0)
"""(mean, std) for exports that normalise inside the graph (mxnet-style ArcFace): raw 0..255 RGB."""

GRAPH_PREFIX_NODES = 8
"""How many leading graph nodes are searched for in-graph normalisation (insightface's rule)."""


SAME_PERSON_COSINE = 0.65
"""Two faces are one person at this cosine or above (the followed face, `vcamd.faces.following`;
a mapped person, `vcamd.faces.mapping`). ArcFace: the same person in one camera session ≈
0.7–0.95, strangers ≤ 0.3; the tests' stand-in recogniser gives strangers up to ≈ 0.64. Too
strict costs a returning user a few frames obscured; too loose would hand the swap to a stranger."""


def graph_normalisation(path: Path) -> tuple[float, float]:
    """(mean, std) a recognizer export wants, decided from its graph as insightface's ArcFaceONNX does:
    a Sub/`_minus` and a Mul/`_mul` among the first nodes mean the graph normalises by itself
    (mxnet-style exports) and takes raw pixels; otherwise ArcFace's (127.5, 127.5)."""
    from vcamd.inference.onnxwire import WireError, node_names

    try:
        names = node_names(path, GRAPH_PREFIX_NODES)
    except (WireError, OSError) as exc:
        raise ModelError(f"{path.name} is not a readable ONNX model ({exc})", fix=ways_out(pull_note=" to download it again")) from None
    subtracts = any(n.startswith(("Sub", "_minus")) for n in names)
    multiplies = any(n.startswith(("Mul", "_mul")) for n in names)
    return RAW_PIXELS if subtracts and multiplies else ARCFACE_PIXELS


class Recognizer:
    """`embed(frame, face)` → L2-normalised identity embedding of the face.

    `normalisation` = (mean, std) applied to the RGB crop; None decides it from the graph
    (`graph_normalisation`), never from the input's name.
    """

    def __init__(self, path: Path | str, sessions: Sessions, normalisation: tuple[float, float] | None = None) -> None:
        self.path = Path(path)
        self.session = sessions.get(self.path)
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        shape = inputs[0].shape if len(inputs) == 1 else []
        out_shape = outputs[0].shape if len(outputs) == 1 else []
        if len(shape) != 4 or list(shape[1:]) != [3, CROP_SIZE, CROP_SIZE] or len(out_shape) != 2 or not isinstance(out_shape[1], int):
            raise ModelError(
                f"{self.path.name} is not a face recognizer (expected input [1,3,112,112] and output [1,D]; "
                f"got inputs {[i.shape for i in inputs]}, outputs {[o.shape for o in outputs]})",
                fix="set [models] recognizer to buffalo_l (w600k_r50.onnx) or another ArcFace model",
            )
        self.input_name = inputs[0].name
        self.dim: int = int(out_shape[1])
        if normalisation is None:
            normalisation = graph_normalisation(self.path)
        self.mean, self.std = (float(v) for v in normalisation)
        self.crop = CropSpec(RECOGNIZER_CROP.template, RECOGNIZER_CROP.size, self.mean, self.std)

    def embed(self, frame: Frame, face: Face) -> Embedding:
        """The face's embedding, from its ArcFace-aligned 112² crop."""
        crop, _ = self.crop.align(frame, face.kps)
        return self.embed_crop(crop)

    def embed_crop(self, crop: Frame) -> Embedding:
        """Embedding of an already aligned 112×112 BGR crop."""
        raw = self.embed_crop_raw(crop)
        return raw / np.float32(np.linalg.norm(raw))

    def embed_raw(self, frame: Frame, face: Face) -> Embedding:
        """The recognizer's output for the face before L2 normalisation (what the embedding
        converters and the ghost family's identity blend take)."""
        crop, _ = self.crop.align(frame, face.kps)
        return self.embed_crop_raw(crop)

    def embed_crop_raw(self, crop: Frame) -> Embedding:
        """`embed_raw` of an already aligned 112×112 BGR crop; FaceError when it is empty."""
        blob = self.crop.to_blob([crop])
        raw: Embedding = self.session.run(None, {self.input_name: blob})[0].reshape(-1).astype(np.float32)
        norm = float(np.linalg.norm(raw))
        if not np.isfinite(norm) or norm == 0.0:
            raise FaceError("the recognizer returned an empty embedding for this face", fix="use a clearer, larger face")
        return raw


@dataclass(frozen=True, slots=True)
class SourceIdentity:
    """The face to put on the camera: where it came from, its embedding and its face in that photo."""

    path: Path
    embedding: Embedding
    face: Face
    faces_in_photo: int = 1
    raw_embedding: Embedding | None = None
    """The recognizer's output before L2 normalisation (the embedding converters take it)."""
    photo: Frame | None = None
    """The photo itself, read-only (the swappers that take the source face as an image cut it from here)."""

    def which_face(self) -> str | None:
        """Which face of a group photo was taken, in words; None for a photo of one face."""
        if self.faces_in_photo <= 1:
            return None
        x1, y1 = (round(v) for v in self.face.box[:2])
        return (f"the largest of the {self.faces_in_photo} faces in the photo ({round(self.face.width)}×"
                f"{round(self.face.height)} px at x={x1}, y={y1}); crop the photo to one face to choose another")


@dataclass(frozen=True, slots=True)
class SourceFace:
    """A source identity and its swapper latent, replaced as one object (thread-safe read)."""

    identity: SourceIdentity
    latent: npt.NDArray[np.float32] | None  # None: a model with its own trained identity takes no source input
    stamp: tuple[Path, int, int]  # resolved path, mtime_ns, size: re-embed only when these change


def file_stamp(path: Path) -> tuple[Path, int, int]:
    """(resolved path, mtime_ns, size): a photo is read again only when these change."""
    try:
        resolved = path.expanduser().resolve()
        st = resolved.stat()
    except (OSError, ValueError):  # missing, a NUL byte, a name over the limit, ...
        return path, -1, -1  # read_image will say what is wrong with it
    return resolved, st.st_mtime_ns, st.st_size


def largest_face(faces: list[Face]) -> Face:
    return max(faces, key=lambda f: f.area)


def load_source_identity(path: Path | str, detector: FaceDetector, recognizer: Recognizer, what: str = "source face") -> SourceIdentity:
    """Read a photo, find its face (the largest if several) and embed it. Raises FaceError.
    What the models find is kept per photo content and models (`vcamd.faces.source_cache`): a photo
    read before is not detected or embedded again."""
    from vcamd.faces import source_cache
    from vcamd.files.images import read_photo

    path = Path(path).expanduser()
    image, sha = read_photo(path, what)
    readers = source_cache.Readers(detector.path, detector.size, detector.threshold, recognizer.path, (recognizer.mean, recognizer.std),
                                   recognizer.dim)
    read = source_cache.lookup(image, sha, readers)
    if read is None:
        read = _read_face(image, path, detector, recognizer, what)
        source_cache.keep(sha, readers, read)
    else:
        detector.adopt_shape_verdict(*read.shape_verdict)
    raw = read.raw_embedding
    image.setflags(write=False)
    identity = SourceIdentity(path=path, embedding=raw / np.float32(np.linalg.norm(raw)), face=read.face, faces_in_photo=read.faces_in_photo,
                              raw_embedding=raw, photo=image)
    if (which := identity.which_face()) is not None:
        log.info("%s: using %s", path, which)
    return identity


def _read_face(image: Frame, path: Path, detector: FaceDetector, recognizer: Recognizer, what: str) -> ReadFace:
    """The photo's largest face and its raw embedding, from the models; FaceError when it has none."""
    from vcamd.faces.source_cache import ReadFace

    faces = detector.detect(image)
    if not faces:
        raise FaceError(
            f"no face found in {what} {path}",
            fix="use a photo with one clearly visible, roughly frontal face (at least ~60 px wide)",
        )
    face = largest_face(faces)
    return ReadFace(face, len(faces), recognizer.embed_raw(image, face), detector.shape_verdict())


def pick_reference(faces: list[Face], frame: Frame, reference_embedding: Embedding, recognizer: Recognizer) -> Face | None:
    """The face most like the reference (highest cosine similarity); None when there are no faces."""
    if not faces:
        return None
    if reference_embedding.shape != (recognizer.dim,):
        raise FaceError(
            f"the reference embedding has {reference_embedding.shape[0]} values, the recognizer gives {recognizer.dim}",
            fix="compute the reference with the same [models] recognizer",
        )
    scores = [float(recognizer.embed(frame, face) @ reference_embedding) for face in faces]
    return faces[int(np.argmax(scores))]

"""The source photo's face as read once, kept on disk so that a daily start skips reading it again.

Finding the face in the source photo and embedding it costs ~0.2 s of one core at every start,
while the swapper's session loads on the other (`live/loading.py`); what it gives is small and
depends only on the photo's bytes, the detector and recogniser model files and their settings. So
`load_source_identity` keeps it here: the chosen face (box, score, keypoints), how many faces the
photo holds and the recogniser's raw embedding.

Keyed by content: the SHA-256 of the bytes the photo was decoded from, and the SHA-256 of each model
file (remembered by the file's identity in the one home of those records, `vcamd.inference.modelhashes`,
shared with the int8 copies, so a start never hashes a model),
plus the detector's input size and threshold, the recogniser's normalisation and the ONNX Runtime version. A changed photo,
model or setting misses and is read afresh; an entry is never used for other bytes than it was
made from, so it cannot put a wrong face on the camera. A model whose hash is not remembered yet
misses without hashing; it is hashed (and remembered) when the fresh result is kept.

Everything here fails soft: a missing entry is read afresh, a damaged or half-written one (or one
that does not fit the photo it claims to be of) is logged and rebuilt, one that cannot be written
is logged — never an error of its own.

Where: `<optimised-graph cache>/faces/` (`~/.cache/facelive/optimized/faces` on Linux; it follows
`$VCAMD_CACHE_DIR`), one `<key>.npz` per photo and models, 0600 files in a 0700 folder (an
embedding of the user's face is as private as the photo). Delete the folder to drop the cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from vcamd.common.types import Face, Frame

log = logging.getLogger(__name__)

FORMAT = 1
"""The entry's own version: bumped when what an entry holds changes."""


def folder() -> Path:
    from vcamd.inference.ortcache import cache_dir

    return cache_dir() / "faces"


@dataclass(frozen=True, slots=True)
class ReadFace:
    """What the swapper needs from a source photo besides its pixels: the face taken, how many the
    photo holds, and the recogniser's output before L2 normalisation."""

    face: Face
    faces_in_photo: int
    raw_embedding: npt.NDArray[np.float32]
    shape_verdict: tuple[bool, str | None] = (False, None)
    """The detector's own-shape comparison after the read (`FaceDetector.shape_verdict`): the photo
    was the first frame it compared on, so a start that skips the read adopts it."""


@dataclass(frozen=True, slots=True)
class Readers:
    """The models that read a photo, as the cache keys them: their files and settings."""

    detector: Path
    detect_size: int
    detect_threshold: float
    recognizer: Path
    normalisation: tuple[float, float]
    dim: int

    def key(self, photo_sha256: str, *, hash_models: bool) -> str | None:
        """The entry's key for this photo's bytes; None when a model's SHA-256 is not remembered and
        `hash_models` is False (a lookup never hashes a model file)."""
        from vcamd.inference.modelhashes import known_sha256, sha256_of

        shas = []
        for model in (self.detector, self.recognizer):
            try:
                sha = sha256_of(model) if hash_models else known_sha256(model)
            except OSError as exc:
                log.info("%s cannot be hashed (%s): the source face is not kept", model, exc)
                return None
            if sha is None:
                return None
            shas.append(sha)
        import onnxruntime

        return json.dumps({"format": FORMAT, "onnxruntime": onnxruntime.__version__, "photo": photo_sha256, "detector": shas[0], "recognizer": shas[1],
                           "detect_size": self.detect_size, "detect_threshold": self.detect_threshold,
                           "normalisation": list(self.normalisation), "dim": self.dim}, sort_keys=True)


def _entry(key: str) -> Path:
    return folder() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"


def lookup(photo: Frame, photo_sha256: str, readers: Readers) -> ReadFace | None:
    """The face kept for this photo's bytes and these readers; None when there is none (or it is
    damaged: logged, and the caller's fresh read replaces it)."""
    key = readers.key(photo_sha256, hash_models=False)
    if key is None:
        return None
    path = _entry(key)
    try:
        with np.load(path, allow_pickle=False) as kept:
            if str(kept["key"]) != key:
                raise ValueError("its key is another photo's or models'")
            return _checked(kept, photo, readers.dim)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 — a damaged file of ours: read afresh, never an error
        log.info("the kept source face %s is unreadable (%s); reading the photo again", path, exc)
        return None


def _checked(kept: Any, photo: Frame, dim: int) -> ReadFace:
    """An entry's arrays as a `ReadFace`, or ValueError naming what does not fit."""
    box = np.asarray(kept["box"], dtype=np.float64)
    kps = np.asarray(kept["kps"])
    raw = np.asarray(kept["raw_embedding"])
    score = float(kept["score"])
    faces = int(kept["faces_in_photo"])
    height, width = photo.shape[:2]
    if box.shape != (4,) or kps.shape != (5, 2) or kps.dtype != np.float32 or raw.shape != (dim,) or raw.dtype != np.float32:
        raise ValueError(f"shapes box {box.shape}, kps {kps.shape} {kps.dtype}, embedding {raw.shape} {raw.dtype}")
    if not (np.isfinite(box).all() and np.isfinite(kps).all() and np.isfinite(raw).all() and np.isfinite(score)):
        raise ValueError("values that are not finite")
    inside = (kps[:, 0] >= -width) & (kps[:, 0] <= 2 * width) & (kps[:, 1] >= -height) & (kps[:, 1] <= 2 * height)
    if faces < 1 or float(np.linalg.norm(raw)) == 0.0 or not inside.all():
        raise ValueError("a face that does not fit the photo")
    reason = str(kept["own_shape_reason"])
    return ReadFace(Face(box=(float(box[0]), float(box[1]), float(box[2]), float(box[3])), score=score, kps=kps.copy()),
                    faces, raw.copy(), (bool(kept["shape_trusted"]), reason or None))


def keep(photo_sha256: str, readers: Readers, read: ReadFace) -> None:
    """Keep a fresh read of the photo (atomically: a half-written entry never has its name)."""
    from vcamd.files.private_files import private_dir, write_private_atomic

    key = readers.key(photo_sha256, hash_models=True)
    if key is None:
        return
    path = _entry(key)
    try:
        data = io.BytesIO()
        np.savez(data, key=np.array(key), box=np.asarray(read.face.box, dtype=np.float64), score=np.float64(read.face.score),
                 kps=np.asarray(read.face.kps, dtype=np.float32), faces_in_photo=np.int64(read.faces_in_photo),
                 raw_embedding=np.asarray(read.raw_embedding, dtype=np.float32), shape_trusted=np.bool_(read.shape_verdict[0]),
                 own_shape_reason=np.array(read.shape_verdict[1] or ""))
        private_dir(path.parent)
        write_private_atomic(path, data.getvalue())
    except OSError as exc:
        log.info("could not keep the source face in %s: %s", path.parent, exc)

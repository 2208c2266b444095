"""The faces an int8 copy is calibrated and checked on (`vcamd.models.quantize`): the source photo's face
and faces the camera saw, aligned to the model's crop (`vcamd.models.int8roles.calibration_crop`).

Below the face engine, which keeps the crops it swaps while a copy waits for them (`SeenFaces`,
`FaceEngine.seen`), and beside the detector and recogniser that find and embed them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from vcamd.common.types import Frame
    from vcamd.faces.identity import SourceIdentity
    from vcamd.faces.specs import CropSpec

CALIBRATION_FACES = 8
"""Faces a copy is calibrated and checked on: the source photo's and up to 7 the camera saw."""
SEEN_EVERY_S = 0.5
"""At most one face the camera saw is kept per this many seconds (different moments, not one pose)."""
SEEN_WAIT_S = 30.0
"""How long the daemon waits for faces from the camera before calibrating on what it has."""


@dataclass(frozen=True)
class CalibrationFaces:
    """Faces aligned to a model's crop (BGR uint8) and the source identity (the swapper swaps them to it)."""

    crops: list[Frame]
    source: np.ndarray
    """The source face's embedding (the recogniser's, L2-normalised)."""

    def save(self, path: Path) -> None:
        np.savez(path, crops=np.stack(self.crops), source=np.asarray(self.source, np.float32))

    @classmethod
    def load(cls, path: Path) -> CalibrationFaces:
        with np.load(path, allow_pickle=False) as data:
            return cls(list(data["crops"]), data["source"])


class SeenFaces:
    """Aligned crops the swapper was given (and whole camera frames with faces), kept while an int8 copy waits for its calibration faces:
    a copy of one at most every `every_s`, up to `limit` (then nothing more is kept)."""

    def __init__(self, limit: int = CALIBRATION_FACES - 1, every_s: float = SEEN_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit, self._every_s, self._clock = limit, every_s, clock
        self._crops: list[Frame] = []
        self._frames: list[Frame] = []
        self._last_frame: float | None = None
        self._last: float | None = None
        self._changed = threading.Condition()

    def offer(self, crops: Sequence[Frame]) -> None:
        """Called with each batch the swapper is given (the swap worker's thread): cheap when full."""
        if len(self._crops) >= self._limit or not crops:
            return
        now = self._clock()
        if self._last is not None and now - self._last < self._every_s:
            return
        with self._changed:
            self._crops.append(np.array(crops[0], copy=True))
            self._last = now
            self._changed.notify_all()

    def offer_frame(self, frame: Frame) -> None:
        """Called with each camera frame whose faces go to the swap (the loop's thread, before anything is
        drawn on it): the detector's copy is calibrated on whole frames (`frames`). Cheap when full."""
        if len(self._frames) >= self._limit:
            return
        now = self._clock()
        if self._last_frame is not None and now - self._last_frame < self._every_s:
            return
        with self._changed:
            self._frames.append(np.array(frame, copy=True))
            self._last_frame = now

    @property
    def frames(self) -> list[Frame]:
        """The camera frames kept (`offer_frame`)."""
        with self._changed:
            return list(self._frames)

    def wait(self, count: int, timeout_s: float, stop: threading.Event) -> list[Frame]:
        """The crops kept once there are `count` (or after `timeout_s`, or on `stop`: what there is)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self._crops) < count and not stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.5))
            return list(self._crops)


def faces_from_photos(photos: Sequence[Path], detector: Any, recognizer: Any, crop: Any, limit: int = CALIBRATION_FACES * 2) -> CalibrationFaces:
    """Calibration faces from photos (`faces_from_images`). FaceError when one cannot be read."""
    from vcamd.files.images import read_image

    return faces_from_images([read_image(photo, "calibration photo") for photo in photos], detector, recognizer, crop, limit)


def faces_from_images(images: Sequence[Frame], detector: Any, recognizer: Any, crop: Any, limit: int = CALIBRATION_FACES * 2) -> CalibrationFaces:
    """Calibration faces from images (photos, camera frames): the largest face of the first is the
    source; the faces of every image, largest first, aligned to the swapper's `crop`, up to
    `limit`. FaceError when the first image has no face."""
    from vcamd.common.errors import FaceError
    from vcamd.faces.identity import largest_face

    if not images:
        raise FaceError("no calibration image", fix="pass --face PHOTO")
    crops: list[Frame] = []
    source = None
    for image in images:
        faces = sorted(detector.detect(image), key=lambda f: -f.area)
        if source is None:
            if not faces:
                raise FaceError("no face found in the first calibration image (the source)", fix="use a photo with a clearly visible face")
            source = recognizer.embed(image, largest_face(faces))
        crops += [crop.align(image, face.kps)[0] for face in faces][: max(0, limit - len(crops))]
    assert source is not None
    return CalibrationFaces(crops, source)


def faces_for(source: SourceIdentity, seen: Sequence[Frame], seen_crop: CropSpec, crop: CropSpec) -> CalibrationFaces:
    """The daemon's calibration faces for a model taking `crop`: the source photo's face aligned to it
    from the photo, and the faces seen (crops the swapper was given, aligned as `seen_crop`) warped
    into it — for the enhancer that is what it restores live: a swapper-sized face in its larger
    crop. FaceError when the photo cannot be read."""
    from vcamd.faces.align import similarity_transform, template_points, warp
    from vcamd.files.images import read_image

    photo, _ = crop.align(read_image(source.path, "source face"), source.face.kps)
    if (seen_crop.size, seen_crop.template) != (crop.size, crop.template):
        m = similarity_transform(template_points(seen_crop.size, seen_crop.template), template_points(crop.size, crop.template))
        seen = [warp(face, m, crop.size) for face in seen]
    return CalibrationFaces([photo, *seen], source.embedding)


def letterboxed(images: Sequence[Frame], shape: tuple[int, int]) -> list[Frame]:
    """Each image scaled to fit `shape` (height, width) at its top left, the rest black, as the
    detector letterboxes a frame (a camera frame of that shape stays as it is): one array shape for
    every calibration image of the detector's copy."""
    import cv2

    h, w = shape
    out = []
    for image in images:
        if image.shape[:2] == (h, w):
            out.append(np.ascontiguousarray(image))
            continue
        scale = min(h / image.shape[0], w / image.shape[1])
        small = cv2.resize(image, (max(1, int(image.shape[1] * scale)), max(1, int(image.shape[0] * scale))))
        canvas = np.zeros((h, w, 3), np.uint8)
        canvas[: small.shape[0], : small.shape[1]] = small
        out.append(canvas)
    return out


def frames_for(source: SourceIdentity, frames: Sequence[Frame]) -> CalibrationFaces:
    """The detector copy's calibration images (in `CalibrationFaces.crops`): the source photo and the
    camera frames kept (`SeenFaces.frames`), letterboxed into the camera's frame shape (the photo's
    own without frames). FaceError when the photo cannot be read."""
    from vcamd.files.images import read_image

    photo = read_image(source.path, "source face")
    return CalibrationFaces(letterboxed([photo, *frames], frames[0].shape[:2] if frames else photo.shape[:2]), source.embedding)


def photo_frames(photos: Sequence[Path]) -> CalibrationFaces:
    """The detector copy's calibration images from photos (`vcamd models quantize`), letterboxed into
    the first one's shape (no source embedding: the detector's check has no use for one). FaceError
    when one cannot be read."""
    from vcamd.files.images import read_image

    images = [read_image(photo, "calibration photo") for photo in photos]
    return CalibrationFaces(letterboxed(images, images[0].shape[:2]), np.zeros(0, np.float32))


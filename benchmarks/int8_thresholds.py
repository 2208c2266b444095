"""What the int8 fidelity check's thresholds rest on (`vcamd/inference/fidelity.py`): how far a face crop already
moves on its way through a call, measured on real faces with the real recogniser. It prints what it
measured; it asserts nothing.

    .venv/bin/python benchmarks/int8_thresholds.py            # ~20 s on 2 cores

Two transports a swapped face passes anyway:

* the camera's own MJPG — each 128² inswapper-aligned face crop of `newton.png` and the 1927 Solvay
  photo (30 faces, SCRFD-2.5G) JPEG-encoded at quality 75, 85 and 95;
* a video call's H.264 — a 720p clip of newton sliding across the frame (the bench's kind) encoded
  with libx264 (PyAV; veryfast, zerolatency, as a call's encoder runs) at 0.8, 1.5 and 3 Mbps, and
  the face crop of every 6th frame of the last two seconds compared.

For each: the crop's PSNR (worst and median) and the MobileFaceNet cosine between the face before
and after (worst and median: how far the recogniser's view of the same face wobbles).
"""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"


def main() -> None:
    import av

    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Recognizer
    from vcamd.faces.specs import RECOGNIZER_CROP, SWAPPERS
    from vcamd.files.images import read_image
    from vcamd.inference.fidelity import psnr_db
    from vcamd.inference.runtime import Sessions

    sessions = Sessions(["cpu"], 2)
    detector = FaceDetector(ASSETS / "models" / "scrfd_2.5g_kps.onnx", sessions)
    recogniser = Recognizer(ASSETS / "models" / "mobilefacenet.onnx", sessions, normalisation=(127.0, 128.0))
    swap_crop = SWAPPERS[0].crop
    images = [read_image(ASSETS / "images" / name, "photo") for name in ("newton.png", "solvay_conference_1927.png")]
    faces = [(image, face) for image in images for face in detector.detect(image)]
    print(f"{len(faces)} faces")

    def report(what: str, psnrs: list[float], cosines: list[float]) -> None:
        print(f"{what:<24} crop PSNR worst / median {min(psnrs):5.1f} / {np.median(psnrs):5.1f} dB   "
              f"recogniser cosine worst / median {min(cosines):.4f} / {np.median(cosines):.4f}")

    for quality in (75, 85, 95):
        psnrs, cosines = [], []
        for image, face in faces:
            jpeg = cv2.imdecode(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])[1], cv2.IMREAD_COLOR)
            psnrs.append(psnr_db(swap_crop.align(image, face.kps)[0], swap_crop.align(jpeg, face.kps)[0]))
            cosines.append(float(recogniser.embed(image, face) @ recogniser.embed(jpeg, face)))
        report(f"camera JPEG q{quality}", psnrs, cosines)

    newton = images[0]
    frames = _sliding(newton)
    for rate in (800_000, 1_500_000, 3_000_000):
        decoded = _h264(frames, rate, av)
        psnrs, cosines = [], []
        for i in range(30, len(frames), 6):
            (face,) = detector.detect(frames[i])[:1]
            psnrs.append(psnr_db(swap_crop.align(frames[i], face.kps)[0], swap_crop.align(decoded[i], face.kps)[0]))
            before = recogniser.embed_crop(RECOGNIZER_CROP.align(frames[i], face.kps)[0])
            after = recogniser.embed_crop(RECOGNIZER_CROP.align(decoded[i], face.kps)[0])
            cosines.append(float(before @ after))
        report(f"720p H.264 {rate / 1e6:.1f} Mbps", psnrs, cosines)


def _sliding(image: np.ndarray, count: int = 90) -> list[np.ndarray]:
    """Newton at 0.66 of a 720p frame's height, 4 px further right each frame, on grey."""
    h, w = image.shape[:2]
    scale = 0.66 * 720 / h
    face = cv2.resize(image, (int(w * scale), int(h * scale)))
    frames = []
    for i in range(count):
        frame = np.full((720, 1280, 3), 90, np.uint8)
        x = 100 + 4 * i
        part = face[: 720 - 100, : 1280 - x]
        frame[100 : 100 + part.shape[0], x : x + part.shape[1]] = part
        frames.append(frame)
    return frames


def _h264(frames: list[np.ndarray], rate: int, av) -> list[np.ndarray]:
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.bit_rate, stream.pix_fmt = 1280, 720, rate, "yuv420p"
        stream.options = {"preset": "veryfast", "tune": "zerolatency"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="bgr24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    buffer.seek(0)
    with av.open(buffer) as source:
        return [f.to_ndarray(format="bgr24") for f in source.decode(video=0)]


if __name__ == "__main__":
    main()

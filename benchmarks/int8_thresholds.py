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

    .venv/bin/python benchmarks/int8_thresholds.py --parser   # the face parser's thresholds, ~10 s

The parser's (`fidelity.ParserThresholds`): how much of a face's area keeps its class when every boundary
moves by k px — the class maps of the FFHQ 512² crops of the faces of `newton.png` and the 1927 Solvay photo
(SCRFD-2.5G), made by the convolutional parser stand-in (`vcamd.bench.int8standins`: skin where red leads
blue, brows where dark — real faces' pixels, a face-shaped map) at BiSeNet's own resolution (logits at
64², upsampled), shifted by k px each of four ways and
compared by the check itself (`fidelity.compare_parses`: the share of the face with the same class, and the
share in another class farther than `edge_px` from the float map's edges; worst of the four ways); and what
the camera's MJPG (JPEG q75) does anyway: how far it moves the detector's keypoints (px at 512²) and how
much of the map it changes off the edges (the same crop, its pixels through JPEG).
"""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"


def main() -> None:
    import sys

    if "--parser" in sys.argv[1:]:
        parser_thresholds()
        return
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


def parser_thresholds() -> None:
    import tempfile

    from vcamd.bench.int8standins import build_conv_parser
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.parse import FACE_CLASSES, PARSER_CROP, FaceParser, face_core, parser_input
    from vcamd.files.images import read_image
    from vcamd.inference.fidelity import compare_parses
    from vcamd.inference.runtime import Sessions

    sessions = Sessions(["cpu"], 2)
    detector = FaceDetector(ASSETS / "models" / "scrfd_2.5g_kps.onnx", sessions)
    images = [read_image(ASSETS / "images" / name, "photo") for name in ("newton.png", "solvay_conference_1927.png")]
    faces = [(image, face) for image in images for face in detector.detect(image)]
    tmp = tempfile.TemporaryDirectory()
    parser = FaceParser(build_conv_parser(Path(tmp.name) / "parser.onnx"), sessions)
    maps = [_at_bisenets_resolution(parser.session.run(None, {"input": parser_input(PARSER_CROP.align(image, face.kps)[0])})[0][0])
            for image, face in faces]
    core = face_core(PARSER_CROP)
    print(f"{len(faces)} faces; face's area per crop (pixels) min / median {min(int(np.isin(m, FACE_CLASSES).sum()) for m in maps)} / "
          f"{int(np.median([np.isin(m, FACE_CLASSES).sum() for m in maps]))}")
    for k in (1, 2, 3, 4, 8):
        shifted = [[compare_parses([m], [_shifted(m, k, way)], FACE_CLASSES, core).faces[0] for way in range(4)] for m in maps]
        same = [min(f.agreement for f in four) for four in shifted]
        off = [max(f.off_edge for f in four) for four in shifted]
        seen = [max(f.visible_change for f in four) for four in shifted]
        print(f"boundaries moved {k} px: same class worst / median {100 * min(same):5.1f} / {100 * np.median(same):5.1f} % of the face; "
              f"another class off the edges worst / median {100 * max(off):5.2f} / {100 * np.median(off):5.2f} %; "
              f"core seen as face changes worst / median {max(seen):.3f} / {np.median(seen):.3f}")
    moved, jpeg_off = [], []
    for (image, face), m in zip(faces, maps):
        jpeg = cv2.imdecode(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 75])[1], cv2.IMREAD_COLOR)
        again = min(detector.detect(jpeg), key=lambda f: float(np.abs(f.kps - face.kps).sum()))
        crop, affine = PARSER_CROP.align(image, face.kps)
        moved.append(float(np.abs((again.kps - face.kps) * np.hypot(affine[0, 0], affine[0, 1])).max()))
        logits = parser.session.run(None, {"input": parser_input(PARSER_CROP.align(jpeg, face.kps)[0])})[0][0]
        jpeg_off.append(compare_parses([m], [_at_bisenets_resolution(logits)], FACE_CLASSES, core).faces[0].off_edge)
    print(f"camera JPEG q75: the FFHQ 512² crop's keypoints move worst / median {max(moved):.2f} / {np.median(moved):.2f} px; "
          f"the same crop's map, another class off the edges worst / median {100 * max(jpeg_off):.2f} / {100 * np.median(jpeg_off):.2f} %")


def _at_bisenets_resolution(logits: np.ndarray) -> np.ndarray:
    """The class map BiSeNet would draw from these logits: it predicts at 1/8 of its input (64²) and
    upsamples its logits bilinearly, so its boundaries are as smooth as that (the stand-in's own
    per-pixel rule on a grey photo's noise is not)."""
    hwc = logits.transpose(1, 2, 0)
    small = cv2.resize(hwc, (64, 64), interpolation=cv2.INTER_AREA)
    return cv2.resize(small, (512, 512), interpolation=cv2.INTER_LINEAR).argmax(axis=2).astype(np.uint8)


def _shifted(classes: np.ndarray, k: int, way: int) -> np.ndarray:
    """The class map moved k px right, left, down or up (`way` 0–3), its edge repeated."""
    axis, sign = divmod(way, 2)
    pad = [(0, 0), (0, 0)]
    pad[axis] = (k, 0) if sign == 0 else (0, k)
    padded = np.pad(classes, pad, mode="edge")
    return padded[:-k] if (axis, sign) == (0, 0) else padded[k:] if axis == 0 else padded[:, :-k] if sign == 0 else padded[:, k:]


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

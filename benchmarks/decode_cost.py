"""CPU cost of decoding an MJPG camera's frames: OpenCV's `cv2.imdecode` against vcamd's
`decode_jpeg` (libjpeg-turbo through TurboJPEG), on the bench's own clip packets.

    .venv/bin/python benchmarks/decode_cost.py                # 480p, 720p, 1080p; 5 passes of 120 frames
    .venv/bin/python benchmarks/decode_cost.py --planes       # and what a YUV frame path would pay instead

The packets are what `vcamd bench` plays as its camera (the newton photo sliding across the frame,
MJPG at OpenCV's default quality, 4:2:0), so the figures are the `camera` share the resolution
scenario prints, without the file's demuxing. Each pass decodes every packet once, the two
decoders alternating pass by pass; the figure is the best pass (the machine's quietest moment),
in thread CPU time, with glibc's frame-sized allocations kept in the heap as `vcamd run` keeps
them. It also says whether the two decoders gave the same pixels.

`--planes` adds what a frame path that never converts the whole frame to BGR would pay instead (the
camera's YUV 4:2:0 planes kept as they are, only face regions converted, the virtual camera handed
I420): decoding to planes without upsampling or colour conversion — FFmpeg's MJPEG decoder
through PyAV (a vcamd dependency), and libjpeg-turbo's `tjDecompressToYUV` through PyTurboJPEG
when it and the system's libturbojpeg are installed (`pip install 'PyTurboJPEG<2'` for
libjpeg-turbo 2.x, e.g. Debian's `libturbojpeg0`) — and, for scale, OpenCV's whole-frame
I420 → BGR and BGR → I420 conversions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from live import SHARED  # noqa: E402

SIZES = {"480p": (640, 480), "720p": (1280, 720), "1080p": (1920, 1080)}


def clip_packets(image: np.ndarray, size: tuple[int, int], folder: Path) -> list[np.ndarray]:
    """The JPEG packets of `vcamd bench`'s own one-face clip at `size` (4 s at 30 fps)."""
    import cv2

    from vcamd.bench.clips import sliding_clip
    from vcamd.bench.settings import BenchSettings

    settings = BenchSettings(face=Path(), detector="", width=size[0], height=size[1], fps=30.0, frames=0,
                             inswapper_frames=0, providers=["cpu"], threads=1, fp16=False)
    cap = cv2.VideoCapture(str(sliding_clip(image, settings, folder, size)))
    if not cap.set(cv2.CAP_PROP_FORMAT, -1):
        raise SystemExit("this OpenCV cannot hand over an MJPG file's packets")
    packets = []
    while True:
        ok, packet = cap.read()
        if not ok:
            break
        packets.append(packet.reshape(-1).copy())
    cap.release()
    return packets


def one_pass_ms(decode, packets: list[np.ndarray]) -> float:
    """Thread CPU per packet of one pass over all of them."""
    start = time.thread_time()
    for packet in packets:
        decode(packet)
    return (time.thread_time() - start) / len(packets) * 1000.0


def best_pass_ms(works: dict[str, Callable[[np.ndarray], object]], packets: list[np.ndarray], passes: int) -> dict[str, float]:
    """Each work's best pass (`one_pass_ms`) of `passes`, the works alternating pass by pass."""
    best = dict.fromkeys(works, float("inf"))
    for _ in range(passes):
        for label, work in works.items():
            best[label] = min(best[label], one_pass_ms(work, packets))
    return best


def plane_decoders() -> dict[str, Callable[[np.ndarray], object]]:
    """Decoders to YUV 4:2:0 planes that are installed here, by label (see the module's doc)."""
    import av

    context = av.CodecContext.create("mjpeg", "r")
    context.thread_type = "NONE"  # one thread, as the camera's reader decodes

    def ffmpeg_planes(packet: np.ndarray) -> np.ndarray:
        (frame,) = context.decode(av.Packet(packet.tobytes()))
        return frame.to_ndarray()  # yuvj420p: the three planes, one array

    decoders: dict[str, Callable[[np.ndarray], object]] = {"PyAV (FFmpeg) to planes": ffmpeg_planes}
    try:
        from turbojpeg import TurboJPEG

        turbo = TurboJPEG()
    except (ImportError, OSError, RuntimeError) as exc:
        print(f"(TurboJPEG to planes not measured: {exc})")
    else:
        decoders["TurboJPEG to planes"] = lambda packet: turbo.decode_to_yuv_planes(packet.tobytes())
    return decoders


def main() -> None:
    import cv2

    from vcamd.live.capture.jpeg import decode_jpeg
    from vcamd.live.process import keep_frames_in_the_heap

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--face", type=Path, default=SHARED / "images" / "newton.png")
    parser.add_argument("--planes", action="store_true", help="also decode to YUV planes, and time the whole-frame conversions")
    args = parser.parse_args()
    cv2.setNumThreads(1)  # as the live engine runs OpenCV (vcamd/live/process.py)
    keep_frames_in_the_heap()
    image = cv2.imread(str(args.face))
    planes = plane_decoders() if args.planes else {}
    decoders = {"cv2.imdecode": lambda p: cv2.imdecode(p, cv2.IMREAD_COLOR), "vcamd decode_jpeg": decode_jpeg}
    print(f"{'size':6s} {'cv2.imdecode ms':>16s} {'decode_jpeg ms':>15s} {'ratio':>6s}  same pixels")
    with tempfile.TemporaryDirectory() as tmp:
        for name, size in SIZES.items():
            packets = clip_packets(image, size, Path(tmp))
            best = best_pass_ms(decoders, packets, args.passes)
            same = all(np.array_equal(decode_jpeg(p), cv2.imdecode(p, cv2.IMREAD_COLOR)) for p in packets)
            opencv, ours = best["cv2.imdecode"], best["vcamd decode_jpeg"]
            print(f"{name:6s} {opencv:16.2f} {ours:15.2f} {ours / opencv:6.2f}  {'yes' if same else 'NO'}")
            if args.planes:
                planes_rows(packets, args.passes, ours, planes)


def planes_rows(packets: list[np.ndarray], passes: int, bgr_ms: float, planes: dict[str, Callable[[np.ndarray], object]]) -> None:
    """Per frame: each of the `planes` decoders, and OpenCV's whole-frame conversions, against
    `bgr_ms` (`decode_jpeg` to BGR, best pass)."""
    import cv2

    from vcamd.live.capture.jpeg import decode_jpeg

    frame = decode_jpeg(packets[0])
    i420 = cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420)
    rows = dict(planes)
    rows["OpenCV I420 -> BGR (whole frame)"] = lambda _packet: cv2.cvtColor(i420, cv2.COLOR_YUV2BGR_I420)
    rows["OpenCV BGR -> I420 (whole frame)"] = lambda _packet: cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420)
    for label, ms in best_pass_ms(rows, packets, passes).items():
        print(f"       {label:34s} {ms:6.2f} ms  ({ms / bgr_ms:.2f}× decode_jpeg to BGR)")


if __name__ == "__main__":
    main()

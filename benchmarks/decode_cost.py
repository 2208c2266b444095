"""CPU cost of decoding an MJPG camera's frames: OpenCV's `cv2.imdecode` against vcamd's
`decode_jpeg` (libjpeg-turbo through TurboJPEG), on the bench's own clip packets.

    .venv/bin/python benchmarks/decode_cost.py                # 480p, 720p, 1080p; 5 passes of 120 frames
    .venv/bin/python benchmarks/decode_cost.py --planes       # and what a YUV frame path would pay instead
    .venv/bin/python benchmarks/decode_cost.py --settings     # libjpeg-turbo's fast settings: CPU, and pixels lost

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
I420 → BGR and BGR → I420 conversions. With TurboJPEG it also decodes to BGR through that same
library (so planes and BGR are weighed on one libjpeg-turbo), makes the planes into the BGR frame
the loop works on with the accurate decode's pixels (`smooth_bgr`: said how close), and prints what
each way adds from 480p to 1080p — what the resolution row's ratio is bound by.

`--settings` weighs libjpeg-turbo's faster decode settings one by one — the fast (integer, less
exact) IDCT, no fancy (smooth) chroma upsampling, and both — against the accurate decode vcamd
uses: CPU per frame as above, and what each loses **against the source picture** (PSNR of the decoded
frame against the pixels that were encoded, minus the accurate decode's): on the bench clip (its
frames drawn again by `sliding_frames`) and on every photo in ../shared/assets/images encoded at
JPEG quality 75, 85 and 95, 4:2:0 and 4:2:2. The colour-edge error is measured on the most colourful
photo: the pixels of its strongest 5 % chroma edges (Sobel on Cr and Cb of the source). A setting
is within the project's rule when it loses at most PSNR_RULE_DB on every clip and photo.
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
SETTINGS = {"accurate (vcamd)": {}, "fast IDCT": {"fastdct": True}, "no fancy upsampling": {"fastupsample": True},
            "fast IDCT, no fancy upsampling": {"fastdct": True, "fastupsample": True}}
"""libjpeg-turbo's decode settings (simplejpeg's arguments): the accurate one first."""
PSNR_RULE_DB = 0.1
"""A faster decode setting is allowed when it loses at most this much PSNR against the source picture."""
QUALITIES = (75, 85, 95)
EDGE_SHARE = 0.05


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
    turbo = _turbo()
    if turbo is None:
        print("(TurboJPEG not measured: PyTurboJPEG or the system's libturbojpeg is missing)")
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
    parser.add_argument("--settings", action="store_true", help="weigh libjpeg-turbo's fast settings: CPU and PSNR lost")
    args = parser.parse_args()
    cv2.setNumThreads(1)  # as the live engine runs OpenCV (vcamd/live/process.py)
    keep_frames_in_the_heap()
    image = cv2.imread(str(args.face))
    if args.settings:
        weigh_settings(image, args.passes)
        return
    planes = plane_decoders() if args.planes else {}
    decoders = {"cv2.imdecode": lambda p: cv2.imdecode(p, cv2.IMREAD_COLOR), "vcamd decode_jpeg": decode_jpeg}
    print(f"{'size':6s} {'cv2.imdecode ms':>16s} {'decode_jpeg ms':>15s} {'ratio':>6s}  same pixels")
    by_size: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, size in SIZES.items():
            packets = clip_packets(image, size, Path(tmp))
            best = best_pass_ms(decoders, packets, args.passes)
            same = all(np.array_equal(decode_jpeg(p), cv2.imdecode(p, cv2.IMREAD_COLOR)) for p in packets)
            opencv, ours = best["cv2.imdecode"], best["vcamd decode_jpeg"]
            print(f"{name:6s} {opencv:16.2f} {ours:15.2f} {ours / opencv:6.2f}  {'yes' if same else 'NO'}")
            if args.planes:
                by_size[name] = planes_rows(packets, args.passes, ours, planes)
    growth_rows(by_size)


def planes_rows(packets: list[np.ndarray], passes: int, bgr_ms: float, planes: dict[str, Callable[[np.ndarray], object]]) -> dict[str, float]:
    """Per frame: each of the `planes` decoders, the planes made into the BGR frame the loop works on
    as libjpeg-turbo's accurate decode makes it, and OpenCV's whole-frame conversions, against `bgr_ms`
    (`decode_jpeg` to BGR, best pass). Returns every row's ms."""
    import cv2

    from vcamd.live.capture.jpeg import decode_jpeg

    frame = decode_jpeg(packets[0])
    i420 = cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420)
    rows = dict(planes)
    turbo = _turbo()
    if turbo is not None:
        rows["TurboJPEG to BGR (its own libjpeg-turbo)"] = lambda packet: turbo.decode(packet.tobytes())
        rows["TurboJPEG to planes, then BGR as the decode"] = lambda packet: smooth_bgr(turbo.decode_to_yuv_planes(packet.tobytes()))
    rows["OpenCV I420 -> BGR (whole frame)"] = lambda _packet: cv2.cvtColor(i420, cv2.COLOR_YUV2BGR_I420)
    rows["OpenCV BGR -> I420 (whole frame)"] = lambda _packet: cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420)
    best = best_pass_ms(rows, packets, passes)
    for label, ms in best.items():
        print(f"       {label:44s} {ms:6.2f} ms  ({ms / bgr_ms:.2f}× decode_jpeg to BGR)")
    if turbo is not None:
        ours = [decode_jpeg(p) for p in packets[::8]]
        theirs = [smooth_bgr(turbo.decode_to_yuv_planes(p.tobytes())) for p in packets[::8]]
        worst = max(int(np.abs(a.astype(np.int16) - b).max()) for a, b in zip(ours, theirs))
        print(f"       planes made BGR against decode_jpeg: max {worst} levels off, PSNR {min(psnr(a, b) for a, b in zip(ours, theirs)):.1f} dB (worst frame)")
    return best | {"decode_jpeg to BGR": bgr_ms}


def _turbo():
    """PyTurboJPEG over the system's libturbojpeg, or None (said) when either is missing."""
    try:
        from turbojpeg import TurboJPEG

        return TurboJPEG()
    except (ImportError, OSError, RuntimeError):
        return None


def smooth_bgr(planes: list[np.ndarray]) -> np.ndarray:
    """4:2:0 planes → BGR the way libjpeg-turbo's accurate decode does it: chroma doubled by the
    triangle ("fancy") filter — 9/16, 3/16, 3/16, 1/16 of the four nearest samples, which is a
    bilinear resize with pixel centres (`cv2.INTER_LINEAR`) — then JPEG's full-range YCbCr → BGR.
    OpenCV's own I420 → BGR doubles chroma by repetition (the "no fancy upsampling" decode, which
    fails the 0.1 dB rule: `--settings`)."""
    import cv2

    y, u, v = planes
    size = (y.shape[1], y.shape[0])
    crcb = [cv2.resize(c, size, interpolation=cv2.INTER_LINEAR) for c in (v, u)]
    return cv2.cvtColor(cv2.merge([y, *crcb]), cv2.COLOR_YCrCb2BGR)


def growth_rows(by_size: dict[str, dict[str, float]]) -> None:
    """What each way adds from 480p to 1080p: the resolution row's ratio is bound by it."""
    if not by_size or "480p" not in by_size or "1080p" not in by_size:
        return
    low, high = by_size["480p"], by_size["1080p"]
    print("\n1080p minus 480p, CPU-ms a frame (the resolution row allows 0.3 × the whole 480p frame in all):")
    for label in ("decode_jpeg to BGR", "TurboJPEG to BGR (its own libjpeg-turbo)", "TurboJPEG to planes",
                  "TurboJPEG to planes, then BGR as the decode", "OpenCV BGR -> I420 (whole frame)"):
        if label in high:
            print(f"       {label:44s} +{high[label] - low[label]:5.2f} ms")


# -- --settings: what a faster decode setting saves, and what it loses against the source -------------

def decoded(packet: np.ndarray) -> dict[str, np.ndarray]:
    import simplejpeg

    return {label: simplejpeg.decode_jpeg(packet, colorspace="BGR", **kw) for label, kw in SETTINGS.items()}


def psnr(source: np.ndarray, frame: np.ndarray) -> float:
    mse = float(np.mean((source.astype(np.float64) - frame.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0**2 / mse)


def losses_db(source: np.ndarray, packet: np.ndarray) -> dict[str, float]:
    """Per setting: the PSNR it loses against `source` compared with the accurate decode (≥ 0: worse)."""
    frames = decoded(packet)
    accurate = psnr(source, frames[next(iter(SETTINGS))])
    return {label: accurate - psnr(source, frame) for label, frame in frames.items()} | {"accurate dB": accurate}


def colour_edges(source: np.ndarray) -> np.ndarray:
    """The source's strongest EDGE_SHARE of chroma edges (the larger Sobel magnitude of Cr and Cb)."""
    import cv2

    ycc = cv2.cvtColor(source, cv2.COLOR_BGR2YCrCb).astype(np.float32)
    grads = [np.hypot(cv2.Sobel(ycc[..., c], cv2.CV_32F, 1, 0), cv2.Sobel(ycc[..., c], cv2.CV_32F, 0, 1)) for c in (1, 2)]
    strength = np.maximum(*grads)
    return strength >= np.quantile(strength, 1.0 - EDGE_SHARE)


def colourfulness(image: np.ndarray) -> float:
    """Hasler and Süsstrunk's colourfulness: spread and mean of the opponent colour channels."""
    b, g, r = (image[..., c].astype(np.float64) for c in range(3))
    rg, yb = r - g, 0.5 * (r + g) - b
    return float(np.hypot(rg.std(), yb.std()) + 0.3 * np.hypot(rg.mean(), yb.mean()))


def weigh_settings(image: np.ndarray, passes: int) -> None:
    import cv2
    import simplejpeg

    from vcamd.bench.clips import sliding_frames, sliding_motion

    worst = dict.fromkeys(SETTINGS, (0.0, ""))

    def note(where: str, loss: dict[str, float]) -> None:
        for label in SETTINGS:
            if loss[label] > worst[label][0]:
                worst[label] = (loss[label], where)

    labels = list(SETTINGS)[1:]
    print("CPU per frame (best pass, thread CPU), and PSNR lost against the source picture (dB, mean over frames; worst frame)")
    print(f"{'clip':7s} " + " ".join(f"{label:>32s}" for label in SETTINGS))
    with tempfile.TemporaryDirectory() as tmp:
        for name, size in SIZES.items():
            packets = clip_packets(image, size, Path(tmp))
            works = {label: (lambda p, kw=kw: simplejpeg.decode_jpeg(p, colorspace="BGR", **kw)) for label, kw in SETTINGS.items()}
            best = best_pass_ms(works, packets, passes)
            sources = sliding_frames(image, size=size, **sliding_motion(size, 30.0))
            losses = [losses_db(source, packet) for source, packet in zip(sources, packets)][::8]
            for k, loss in enumerate(losses):
                note(f"bench clip {name} frame {8 * k}", loss)
            cells = [f"{best[label]:.2f} ms, {np.mean([x['accurate dB'] for x in losses]):.2f} dB" if label not in labels else
                     f"{best[label]:.2f} ms, -{np.mean([x[label] for x in losses]):.3f} (-{max(x[label] for x in losses):.3f})"
                     for label in SETTINGS]
            print(f"{name:7s} " + " ".join(f"{c:>32s}" for c in cells))
    photos = {p.stem: cv2.imread(str(p)) for p in sorted((SHARED / "images").iterdir())}
    photos = {name: photo for name, photo in photos.items() if photo is not None}
    samplings = {"4:2:0": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420, "4:2:2": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422}
    print("\nPhotos (../shared/assets/images) encoded by OpenCV: PSNR of the accurate decode, and what each setting loses (dB)")
    print(f"{'photo, quality, sampling':40s} {'accurate':>9s} " + " ".join(f"{label:>30s}" for label in labels))
    for name, photo in photos.items():
        for quality in QUALITIES:
            for sampling, flag in samplings.items():
                ok, packet = cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, flag])
                loss = losses_db(photo, packet.reshape(-1))
                note(f"{name} q{quality} {sampling}", loss)
                print(f"{f'{name} q{quality} {sampling}':40s} {loss['accurate dB']:9.2f} " + " ".join(f"{-loss[label]:30.3f}" for label in labels))
    name = max(photos, key=lambda n: colourfulness(photos[n]))
    source = photos[name]
    edges = colour_edges(source)
    print(f"\nColour edges: {name} (the most colourful photo), its strongest {EDGE_SHARE:.0%} of chroma edges; "
          "error against the source in levels (the largest of B, G, R a pixel), and against the accurate decode")
    for quality in (75, 95):
        ok, packet = cv2.imencode(".jpg", source, [cv2.IMWRITE_JPEG_QUALITY, quality])
        frames = decoded(packet.reshape(-1))
        for label, frame in frames.items():
            error = np.abs(source.astype(np.int16) - frame).max(axis=2)[edges]
            off = np.abs(frames[next(iter(SETTINGS))].astype(np.int16) - frame).max(axis=2)
            print(f"  q{quality} {label:32s} mean {error.mean():5.2f}  p99 {np.percentile(error, 99):4.0f}  max {error.max():3d}  "
                  f"PSNR on the edges {psnr(source[edges], frame[edges]):6.2f} dB  | off the accurate decode: max {off.max():3d}, "
                  f"on the edges p99 {np.percentile(off[edges], 99):3.0f}")
    print(f"\nWithin the rule (loses at most {PSNR_RULE_DB} dB against the source everywhere above):")
    for label in labels:
        loss, where = worst[label]
        print(f"  {label:32s} {'yes' if loss <= PSNR_RULE_DB else 'no'}: worst -{loss:.3f} dB ({where})")


if __name__ == "__main__":
    main()

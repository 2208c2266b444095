"""Fixtures for the reliability suite.

- stand-in models (`standin_dir`) and wrong-signature ONNX builders (`wrong_model`);
- a real HTTP server on 127.0.0.1 (`file_server`) acting as a model mirror;
- the CLI as a subprocess with isolated user dirs (`vcamd_cli`, `refused`, `bad_images`);
- the live daemon under fault injection (`live`, `faulty_camera`, `recording`, `live_cfg`):
  a barcoded real-photo camera clip, a sink that checks every published face for a raw-face
  leak, ONNX Runtime sessions that raise / hang / return NaN on demand.

Everything is built at run time in pytest temp folders (never in the repo).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.waiting import wait_for

from vcamd.models.pipeline import build_face_engine


@pytest.fixture(scope="session")
def standin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Light stand-in swapper, recognizer and enhancer with the production signatures."""
    from vcamd.bench.standins import build_enhancer, build_recognizer, build_swapper

    folder = tmp_path_factory.mktemp("standins")
    build_swapper(folder / "swapper.onnx")
    build_recognizer(folder / "recognizer.onnx")
    build_enhancer(folder / "enhancer.onnx")
    return folder


def make_model(
    path: Path,
    inputs: list[tuple[str, list[int | str]]],
    outputs: list[tuple[str, list[int | str]]],
    *,
    emap_last: bool = False,
) -> Path:
    """A loadable ONNX model with the given input/output names and shapes, and a wrong job.

    Each output is a constant-filled tensor of its shape, built from the first input with
    ReduceMean + Expand, so ONNX Runtime loads and runs it; only the signature is under test.
    """
    nodes, inits = [], []
    first = inputs[0][0]
    nodes.append(helper.make_node("ReduceMean", [first], ["m"], keepdims=0))
    for name, shape in outputs:
        concrete = [d if isinstance(d, int) else 1 for d in shape]
        inits.append(numpy_helper.from_array(np.array(concrete, np.int64), f"{name}_shape"))
        nodes.append(helper.make_node("Expand", ["m", f"{name}_shape"], [name]))
    if emap_last:
        inits.append(numpy_helper.from_array(np.eye(512, dtype=np.float32), "emap"))
    graph = helper.make_graph(
        nodes,
        "wrong_signature",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path))
    return path


@pytest.fixture
def wrong_model(tmp_path: Path) -> Callable[..., Path]:
    """`wrong_model(name, inputs, outputs)` → path of a valid ONNX file with that signature."""

    def build(name: str, inputs, outputs, **kw) -> Path:
        return make_model(tmp_path / name, inputs, outputs, **kw)

    return build


class _FileServer:
    """A real HTTP server on 127.0.0.1 serving `files` (URL path → bytes); records requests."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)  # a prompt shutdown()
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def file_server():
    server = _FileServer()
    yield server
    server.close()


# ---- the CLI as a user runs it ------------------------------------------------------------------


@pytest.fixture
def vcamd_cli(tmp_path: Path):
    """`vcamd_cli(*args, timeout=60)` → CompletedProcess of `python -m vcamd ARGS` with an
    isolated HOME/XDG dirs (no user config, no user models), text output."""
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "PYTHONWARNINGS": "ignore",
    }
    (home / "run").mkdir(mode=0o700, exist_ok=True)

    def run(*args: str, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "vcamd", *map(str, args)],
            capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd or tmp_path,
        )

    run.env = env  # type: ignore[attr-defined]
    return run


def _assert_clean_refusal(result, *names: str) -> str:
    """Non-zero exit, no traceback, one `vcamd: error:` line naming each of `names`."""
    assert result.returncode != 0, f"exit 0 for a bad input\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("vcamd: error:")]
    assert len(errors) == 1, f"expected one 'vcamd: error:' line, got:\n{result.stderr[-3000:]}"
    for name in names:
        assert name in errors[0], f"{name!r} not in {errors[0]!r}"
    return errors[0]


@pytest.fixture
def bad_images(tmp_path: Path) -> dict[str, Path]:
    """Every kind of bad source-face file: zero-size, text, truncated PNG, huge header, animated."""
    import struct
    import zlib

    from PIL import Image

    folder = tmp_path / "bad-images"
    folder.mkdir()
    out = {}
    out["zero-size"] = folder / "empty.png"
    out["zero-size"].write_bytes(b"")
    out["not-an-image"] = folder / "notes.jpg"
    out["not-an-image"].write_text("shopping list: milk, eggs\n")

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    out["huge-header"] = folder / "bomb.png"
    out["huge-header"].write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\0" * 4096)) + chunk(b"IEND", b"")
    )
    frames = [Image.new("RGB", (64, 64), c) for c in ("red", "green", "blue")]
    out["animated"] = folder / "wave.gif"
    frames[0].save(out["animated"], save_all=True, append_images=frames[1:], duration=100, loop=0)
    out["folder"] = folder / "a-folder.png"
    out["folder"].mkdir()
    out["missing"] = folder / "missing.png"
    return out


@pytest.fixture
def refused():
    """`refused(result, *names)`: non-zero exit, no traceback, one `vcamd: error:` line naming each name."""
    return _assert_clean_refusal


# ---- the live daemon under fault injection ------------------------------------------------------
#
# The camera is a real lossless video file (FFV1) of a real photo, shifted a little each frame and
# stamped with its frame number as a barcode in the top-left corner. Any published frame can so be
# matched to the raw camera frame it came from (held frames carry the number of the frame they
# were made from), and its face region compared with the raw face: a raw face published while
# swapping is on is a leak. The light stand-in swapper inverts the middle of the face, so a swapped
# face is far from the raw one; a blurred face is pixelated, also far.

VIDEO_SIZE = (480, 270)
VIDEO_FRAMES = 32
BARCODE_BITS = 10
BLOCK = 12
LEAK_MAD = 3.0
"""Mean absolute grey-level difference of the face centre below which a published face IS the raw one."""


def _shift_of(index: int) -> int:
    return 2 * (index % 16)


def barcode(frame: np.ndarray, index: int) -> None:
    """Stamp `index` into the top-left corner: guard white, BARCODE_BITS bits, guard black."""
    bits = [1] + [(index >> b) & 1 for b in range(BARCODE_BITS)] + [0]
    for i, bit in enumerate(bits):
        frame[0:BLOCK, i * BLOCK : (i + 1) * BLOCK] = 255 if bit else 0


def read_barcode(frame: np.ndarray) -> int | None:
    if frame.ndim != 3 or frame.shape[0] < BLOCK or frame.shape[1] < (BARCODE_BITS + 2) * BLOCK:
        return None
    means = [float(frame[2 : BLOCK - 2, i * BLOCK + 2 : (i + 1) * BLOCK - 2].mean()) for i in range(BARCODE_BITS + 2)]
    if any(40 < m < 215 for m in means) or means[0] < 128 or means[-1] > 128:
        return None
    return sum((1 << b) for b in range(BARCODE_BITS) if means[b + 1] > 128)


class FaceVideo:
    """The generated camera clip and the raw frame/face centre of any frame number."""

    def __init__(self, folder: Path, assets: Path) -> None:
        import cv2

        from vcamd.faces.detect import FaceDetector
        from vcamd.inference.runtime import Sessions

        photo = cv2.imread(str(assets / "images" / "newton.png"))
        self.base = cv2.resize(photo, VIDEO_SIZE, interpolation=cv2.INTER_AREA)
        detector = FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", Sessions(["cpu"], 1), size=320)
        [face] = detector.detect(self.base)
        kps = face.kps
        # The face centre: eyes to mouth, where the stand-in swapper makes its change.
        self.centre = (int(kps[0][0]) - 4, int(min(kps[0][1], kps[1][1])) - 6, int(kps[1][0]) + 4, int(max(kps[3][1], kps[4][1])) + 4)
        self.face_box = tuple(int(v) for v in face.box)
        self.path = folder / "camera.avi"
        writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*"FFV1"), 30.0, VIDEO_SIZE)
        assert writer.isOpened(), "OpenCV cannot write FFV1"
        for k in range(VIDEO_FRAMES):
            writer.write(self.raw(k))
        writer.release()

    def raw(self, index: int) -> np.ndarray:
        frame = np.roll(self.base, _shift_of(index), axis=1)
        barcode(frame, index)
        return frame

    def centre_mad(self, published: np.ndarray, index: int) -> float:
        """How far the published face centre is from the raw one (mean abs grey difference)."""
        x0, y0, x1, y1 = self.centre
        dx = _shift_of(index)
        raw = self.raw(index)[y0:y1, x0 + dx : x1 + dx].astype(np.float32).mean(axis=2)
        out = published[y0:y1, x0 + dx : x1 + dx].astype(np.float32).mean(axis=2)
        return float(np.abs(raw - out).mean())


@pytest.fixture(scope="session")
def face_video(tmp_path_factory: pytest.TempPathFactory, assets: Path) -> FaceVideo:
    return FaceVideo(tmp_path_factory.mktemp("camera"), assets)


@dataclass
class Published:
    t: float
    index: int | None  # frame number read from the barcode (None: not a camera frame, e.g. offline)
    mad: float | None  # face-centre distance from the raw frame of that number
    face_std: float  # grey-level spread of the face region (≈0: a flat / garbage-filled face)


class RecordingSink:
    """A sink that checks every published frame for a raw-face leak as it arrives.

    Keeps only small per-frame records (no frame copies), plus the last frame for inspection.
    `fail_for(n)` makes the next n sends raise OSError, like a virtual camera device going away.
    """

    name = "recording"

    def __init__(self, video: FaceVideo) -> None:
        import threading

        self.video = video
        self.records: list[Published] = []
        self.last: np.ndarray | None = None
        self._fail = 0
        self.failed = 0
        self._lock = threading.Lock()

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def fail_for(self, n: int) -> None:
        with self._lock:
            self._fail = n

    def send(self, frame: np.ndarray, stats: dict | None = None) -> None:
        import time

        with self._lock:
            if self._fail > 0:
                self._fail -= 1
                self.failed += 1
                raise OSError(5, "Input/output error (injected: virtual camera write failed)")
        self.records.append(self.analyse(frame, time.monotonic()))
        self.last = frame.copy()

    def analyse(self, frame: np.ndarray, t: float) -> Published:
        index = read_barcode(frame)
        x0, y0, x1, y1 = self.video.face_box
        face_std = float(frame[y0:y1, x0:x1].std()) if frame.ndim == 3 else 0.0
        if index is None or frame.shape[:2] != self.video.base.shape[:2]:
            return Published(t, None, None, face_std)
        return Published(t, index, self.video.centre_mad(frame, index), face_std)

    # -- what the tests ask ------------------------------------------------------------------------
    def since(self, t: float) -> list[Published]:
        return [r for r in list(self.records) if r.t >= t]

    def leaks(self, t0: float = 0.0) -> list[Published]:
        return [r for r in self.since(t0) if r.mad is not None and r.mad < LEAK_MAD]

    def max_gap(self, t0: float, t1: float) -> float:
        times = [t0] + [r.t for r in self.records if t0 <= r.t <= t1] + [t1]
        return max(b - a for a, b in zip(times, times[1:]))


class RecordingCamera:
    """A `CameraLike` for VirtualCameraSink: records what reaches the "device"; can fail writes."""

    device = "/dev/video-test"
    backend = "test"

    def __init__(self, sink: RecordingSink) -> None:
        self.sink = sink

    def send(self, frame: np.ndarray) -> None:
        self.sink.send(frame)

    def close(self) -> None:
        pass


class FaultySession:
    """Wraps an onnxruntime.InferenceSession; `.mode` injects a fault into `run()`:
    "ok", "raise" (like ORT's own RuntimeError), "hang" (sleep `hang_s` first), "nan" (every
    float output filled with NaN)."""

    def __init__(self, session, name: str, faults: dict) -> None:
        self._session = session
        self._name = name
        self._faults = faults
        self.calls = 0

    def __getattr__(self, attr: str):
        return getattr(self._session, attr)

    def run(self, output_names, feeds, *args, **kwargs):
        import time

        self.calls += 1
        mode = self._faults.get(self._name, "ok")
        if mode == "raise":
            raise RuntimeError(f"[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : injected failure in {self._name}")
        if mode == "hang":
            time.sleep(self._faults.get("hang_s", 2.0))
        outputs = self._session.run(output_names, feeds, *args, **kwargs)
        if mode == "nan":
            outputs = [np.full_like(o, np.nan) if np.issubdtype(np.asarray(o).dtype, np.floating) else o for o in outputs]
        return outputs


def faulty_sessions(faults: dict):
    """A real `Sessions` whose every session is wrapped in FaultySession (keyed by file name)."""
    from vcamd.inference.runtime import Sessions

    return Sessions(["cpu"], threads=1, wrap=lambda session, path: FaultySession(session, path.name, faults))


def live_config(tmp_path: Path, assets: Path, standin_dir: Path, face_video: FaceVideo, **sections: dict):
    """A Config for a live test run: real SCRFD-500M, stand-in recognizer/swapper/enhancer,
    the generated clip as the camera, quick reopen/stall timings. `sections` override keys."""
    from vcamd.config.reading import config_from_dict

    data = {
        "models": {
            "dir": str(tmp_path / "models"),
            "detector": str(assets / "models" / "scrfd_500m_kps.onnx"),
            "recognizer": str(standin_dir / "recognizer.onnx"),
            "swapper": str(standin_dir / "swapper.onnx"),
            "enhancer": str(standin_dir / "enhancer.onnx"),
            "providers": ["cpu"],
            "threads": 1,
        },
        "detection": {"size": 320, "track_size": 128, "full_every": 10},
        # cover_changes off: the clip is a photo panned 2 px a frame under a frame-number barcode that
        # changes every frame — with it on, the pan and the barcode would be obscured whole in every
        # frame (tests/live/test_unseen.py and tests/privacy/test_newcomer_e2e.py test that cover).
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True, "on_miss": "hold",
                 "cover_changes": False},
        "camera": {"device": str(face_video.path), "loop": True, "reopen_interval_s": 0.3, "stall_timeout_s": 0.4},
        "tray": {"enabled": False},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return config_from_dict(data, "live-test")


class LiveRun:
    """LiveEngine.run() on a thread, as `vcamd run` runs it; `stop()` quits and re-raises any crash."""

    def __init__(self, engine) -> None:
        import threading

        self.engine = engine
        self.error: BaseException | None = None
        self.result: dict | None = None
        self.thread = threading.Thread(target=self._main, name="live-engine", daemon=True)

    def _main(self) -> None:
        try:
            self.result = self.engine.run()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def start(self) -> "LiveRun":
        self.thread.start()
        return self

    def alive(self) -> bool:
        return self.thread.is_alive()

    def counts(self) -> dict:
        from vcamd.common.types import Outcome

        outcomes = self.engine.parts.stats.outcomes
        return {o.value: outcomes[o] for o in Outcome} | {"published": self.engine.parts.stats.published}

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        """`support.waiting.wait_for`, failing at once when the engine has crashed."""

        def alive_and() -> bool:
            if self.error is not None:
                raise AssertionError(f"the engine crashed while waiting for {what}: {self.error!r}") from self.error
            return predicate()

        wait_for(alive_and, what, timeout_s=timeout, poll_s=0.05, detail=lambda: f"counts {self.counts()}")

    def wait_swapping(self, timeout: float = 12.0) -> None:
        """Until fresh swapped frames are being published (models warm, source embedded)."""
        start = self.counts()["swapped"]
        self.wait_for(lambda: self.counts()["swapped"] >= start + 5, timeout, "swapped frames")

    def stop(self, timeout: float = 8.0) -> dict:
        self.engine.request_quit()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("the engine did not stop within %.0f s of request_quit()" % timeout)
        if self.error is not None:
            raise AssertionError(f"the engine crashed: {self.error!r}") from self.error
        assert self.result is not None
        return self.result


@pytest.fixture
def live(tmp_path: Path, assets: Path, standin_dir: Path, face_video: FaceVideo):
    """`live(source=None, sink=None, faults=None, config_path=None, **sections)` → started LiveRun.

    Builds the real FaceEngine (FaultySessions underneath) and the real LiveEngine; the camera is
    the generated clip unless `source` is given; the sink is a RecordingSink unless given.
    Every run is stopped at teardown.
    """
    from vcamd.live.capture.sources import VideoFileCamera
    from vcamd.live.engine import LiveEngine

    runs: list[LiveRun] = []

    def start(*, source=None, sink=None, faults: dict | None = None, config=None, config_path=None, **sections):
        faults = faults if faults is not None else {}
        cfg = config or live_config(tmp_path, assets, standin_dir, face_video, **sections)
        faces = build_face_engine(cfg, sessions=faulty_sessions(faults))
        source = source or VideoFileCamera(face_video.path, loop=True)
        sink = sink or RecordingSink(face_video)
        engine = LiveEngine(
            cfg, source=source, sink_factory=lambda width, height, fps: sink, faces=faces, config_path=config_path
        )
        run = LiveRun(engine).start()
        run.sink, run.faults, run.faces = sink, faults, faces  # type: ignore[attr-defined]
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.alive():
            run.engine.request_quit()
            run.thread.join(8)


class FaultySource:
    """Wraps a real FrameSource (the clip); `.mode` injects a camera fault:
    "ok"; "stopped" (read → None, open raises: unplugged); "noise" / "black" (garbage pixels of
    the right shape); "bgra" / "gray" / "tiny" / "empty" (garbage shapes); "bigger" / "smaller"
    (the camera changed resolution)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.mode = "ok"
        self.description = "faulty " + inner.description
        self._rng = np.random.default_rng(5)
        self.opens = 0

    @property
    def fps(self) -> float:
        return self.inner.fps

    @property
    def frame_size(self):
        return self.inner.frame_size

    @property
    def skipped(self) -> int:
        return self.inner.skipped

    def open(self) -> None:
        if self.mode == "stopped":
            from vcamd.common.errors import VcamdError

            raise VcamdError(f"cannot open {self.description} (injected: unplugged)")
        self.opens += 1
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def read(self):
        import cv2

        mode = self.mode
        if mode == "stopped":
            return None
        frame = self.inner.read()
        if frame is None or mode == "ok":
            return frame
        h, w = frame.shape[:2]
        if mode == "noise":
            return self._rng.integers(0, 256, frame.shape, dtype=np.uint8)
        if mode == "black":
            return np.zeros_like(frame)
        if mode == "bgra":
            return cv2.cvtColor(frame, cv2.COLOR_BGR2BGRA)
        if mode == "gray":
            return cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        if mode == "tiny":
            return frame[:2, :2].copy()
        if mode == "empty":
            return np.zeros((0, 0, 3), np.uint8)
        if mode == "bigger":
            return cv2.resize(frame, (w * 3 // 2, h * 3 // 2), interpolation=cv2.INTER_LINEAR)
        if mode == "smaller":
            return cv2.resize(frame, (w * 2 // 3, h * 2 // 3), interpolation=cv2.INTER_AREA)
        raise AssertionError(mode)


@pytest.fixture
def faulty_camera(face_video):
    from vcamd.live.capture.sources import VideoFileCamera

    return FaultySource(VideoFileCamera(face_video.path, loop=True))


@pytest.fixture
def live_cfg(tmp_path: Path, assets: Path, standin_dir: Path, face_video: FaceVideo):
    """`live_cfg(**sections)` → the Config the `live` fixture would use."""
    return lambda **sections: live_config(tmp_path, assets, standin_dir, face_video, **sections)


@pytest.fixture
def recording(face_video: FaceVideo):
    """`.sink()` → a new RecordingSink; `.camera(sink)` → a CameraLike writing into it."""
    from types import SimpleNamespace

    return SimpleNamespace(sink=lambda: RecordingSink(face_video), camera=RecordingCamera)

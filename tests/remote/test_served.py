"""The face models run on a real Triton server (`vcamd serve`, PyTriton on 127.0.0.1) give what
they give here: the same swapped, restored and parsed crops, to the bit; the served signatures
pass through the same contract checks as local files; only crops and the latent cross."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from support.waiting import wait_for

from vcamd.common.errors import ModelError
from vcamd.faces.enhance import Enhancer
from vcamd.faces.parse import FaceParser
from vcamd.faces.specs import ENHANCER_CROP
from vcamd.faces.swap import Swapper
from vcamd.models.pipeline import make_sessions, model_files
from vcamd.remote.link import ServerRefused
from vcamd.remote.sessions import RemoteSession, RemoteSessions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(triton, served_files):
    """RemoteSessions for a client config pointing at the module's server (no local model file needed)."""
    cfg = served_files.config(server=triton.url)
    files = model_files(cfg)
    remote = make_sessions(cfg, files)
    assert isinstance(remote, RemoteSessions)
    remote.link.wait_up(60)
    yield remote, files
    remote.close()


def _crops(image: np.ndarray, face, spec, count: int = 3) -> list[np.ndarray]:
    """Real aligned crops of a real face, shifted a little each (a face moving between frames)."""
    crops = []
    for i in range(count):
        kps = face.kps + np.float32([i * 1.5, -i])
        crop, _ = spec.align(image, kps)
        crops.append(crop)
    return crops


def test_swap_through_the_server_equals_the_local_swap(client, served_files, sessions, newton, newton_face) -> None:
    remote, files = client
    served = Swapper(files.paths["swapper"], remote)
    local = Swapper(served_files.swapper, sessions)
    assert isinstance(served.session, RemoteSession)
    assert served.spec == local.spec
    np.testing.assert_array_equal(served.emap, local.emap)  # read from the server's .emap companion
    latent = local.latent(np.random.default_rng(3).standard_normal(512).astype(np.float32))
    crops = _crops(newton, newton_face, local.crop)
    through, here = served.swap(crops, latent), local.swap(crops, latent)
    assert len(through) == len(here) == 3
    for a, b, crop in zip(through, here, crops, strict=True):
        assert a.dtype == np.uint8 and a.shape == crop.shape
        np.testing.assert_array_equal(a, b)
        assert np.abs(a.astype(int) - crop).mean() > 10, "the stand-in must really change the face"


def test_enhancer_and_parser_through_the_server_equal_local(client, served_files, sessions, newton, newton_face) -> None:
    remote, files = client
    crop = _crops(newton, newton_face, ENHANCER_CROP, 1)[0]
    served_enhancer = Enhancer(files.paths["enhancer"], remote, strength=1.0)
    np.testing.assert_array_equal(served_enhancer.restore(crop), Enhancer(served_files.enhancer, sessions, strength=1.0).restore(crop))
    served_parser = FaceParser(files.paths["parser"], remote, ("skin", "nose"))
    local_parser = FaceParser(served_files.parser, sessions, ("skin", "nose"))
    served_classes, local_classes = served_parser.classes([crop]), local_parser.classes([crop])
    np.testing.assert_array_equal(served_classes[0], local_classes[0])
    assert len(np.unique(local_classes[0])) > 1, "the stand-in parser must tell regions apart"


def test_served_models_are_checked_by_the_contract_code_of_their_role(client) -> None:
    remote, _ = client
    # The server's enhancer asked for as a swapper: refused by Swapper's own check, as a local GFPGAN file is.
    with pytest.raises(ModelError, match="is not a face swapper vcamd knows"):
        Swapper(Path("enhancer"), remote)
    with pytest.raises(ModelError, match="not a face enhancer"):
        Enhancer(Path("swapper"), remote)


def test_a_model_the_server_does_not_serve_is_one_clear_error(triton, served_files) -> None:
    cfg = served_files.config(server=triton.url, swapper="/nowhere/inswapper_128.onnx")
    remote = make_sessions(cfg, model_files(cfg))  # no local file needed: it runs there
    try:
        remote.link.wait_up(60)
        with pytest.raises(ServerRefused) as refused:
            Swapper(Path("inswapper_128"), remote)
        text = str(refused.value)
        assert "does not serve 'inswapper_128'" in text and "swapper" in text and "enhancer" in text, text
    finally:
        remote.close()


def test_only_aligned_crops_and_the_latent_cross(client, served_files, sessions, detector, assets, newton, monkeypatch) -> None:
    """A 720p frame through FaceEngine.swap_faces on the served swapper: every tensor sent is a
    128² uint8 crop or the 512-d latent, never the frame."""
    from vcamd.faces.engine import FaceEngine
    from vcamd.faces.identity import Recognizer

    remote, files = client
    sent: list[tuple[tuple[int, ...], str]] = []
    infer = remote.link.infer

    def recording(model, inputs, outputs):
        sent.extend((array.shape, array.dtype.name) for _, array, _ in inputs)
        return infer(model, inputs, outputs)

    recognizer = Recognizer(served_files.recognizer, sessions)
    engine = FaceEngine(detector, recognizer, Swapper(files.paths["swapper"], remote))
    engine.set_source_face(assets / "images" / "newton.png")
    frame = np.zeros((720, 1280, 3), np.uint8)
    h, w = newton.shape[:2]
    frame[:h, :w] = newton[:720, :1280]
    faces = detector.detect(frame)
    assert faces
    monkeypatch.setattr(remote.link, "infer", recording)
    swapped = engine.swap_faces(frame, faces)
    assert len(swapped) == len(faces) and sent
    for shape, dtype in sent:
        assert (shape[1:], dtype) in (((3, 128, 128), "uint8"), ((512,), "float32")), (shape, dtype)
        assert shape[0] == len(faces)


def test_requests_of_several_clients_are_batched_by_the_server(triton, served_files, sessions, newton, newton_face) -> None:
    """Four clients at once: Triton's dynamic batching runs some of their requests as one batch."""
    cfg = served_files.config(server=triton.url)
    clients = [make_sessions(cfg, model_files(cfg)) for _ in range(4)]
    try:
        for c in clients:
            c.link.wait_up(60)
        swappers = [Swapper(Path("swapper"), c) for c in clients]
        crop = _crops(newton, newton_face, swappers[0].crop, 1)
        latent = swappers[0].latent(np.ones(512, np.float32))
        stop = threading.Event()

        def hammer(swapper: Swapper) -> None:
            while not stop.is_set():
                swapper.swap(crop, latent)

        threads = [threading.Thread(target=hammer, args=(s,), daemon=True) for s in swappers]
        for t in threads:
            t.start()
        try:
            def batched() -> int:
                stats = clients[0].link.statistics("swapper")["model_stats"][0]
                return max((int(b["batch_size"]) for b in stats.get("batch_stats", [])), default=0) > 1

            wait_for(batched, "a batch of more than one request on the server", timeout_s=60)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
    finally:
        for c in clients:
            c.close()


def test_doctor_checks_the_server_and_what_it_serves(triton, served_files) -> None:
    from support.triton import free_port

    from vcamd.doctor.results import Status
    from vcamd.doctor.server import check_server

    good = check_server(served_files.config(server=triton.url))
    assert good is not None and good.status is Status.ok, good
    assert triton.url in good.detail and "ms round trip" in good.detail and "serves " in good.detail and "swapper" in good.detail
    wrong = check_server(served_files.config(server=triton.url, swapper=str(served_files.enhancer)))
    assert wrong is not None and wrong.status is Status.fail and "not a face swapper" in wrong.detail, wrong
    away = check_server(served_files.config(server=f"grpc://127.0.0.1:{free_port()}"), reach_s=1.0)
    assert away is not None and away.status is Status.fail and "does not answer" in away.detail and "vcamd serve" in away.fix
    assert check_server(served_files.config()) is None


def test_vcamd_run_swaps_on_the_server_with_no_swapper_file_here(triton, served_files, assets, tmp_path) -> None:
    """The camera machine keeps the detector and recognizer only: `vcamd run` with `[models] server`
    and a swapper that exists on the server alone swaps every face there; the stats say where."""
    import json

    import cv2
    from support.cli import run_vcamd

    from vcamd.bench.leaks import write_clip

    frame = np.zeros((480, 640, 3), np.uint8)
    newton = cv2.imread(str(assets / "images" / "newton.png"))
    frame[: min(480, newton.shape[0]), : min(640, newton.shape[1])] = newton[:480, :640]
    clip = write_clip(tmp_path / "clip.mp4", [frame] * 60, 30.0)
    config = tmp_path / "client.toml"
    config.write_text(
        f'[models]\ndetector = "{served_files.detector}"\nrecognizer = "{served_files.recognizer}"\n'
        f'swapper = "/only/on/the/server/swapper.onnx"\nserver = "{triton.url}"\nproviders = ["cpu"]\nthreads = 1\n\n'
        f'[swap]\nsource_face = "{assets / "images" / "newton.png"}"\nsource_consent = true\n\n[tray]\nenabled = false\n'
    )
    stats_path = tmp_path / "stats.json"
    done = run_vcamd("run", "--config", config, "--source", clip, "--loop", "--sink", "null", "--frames", 150,
                     "--stats-json", stats_path, "--no-tray", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads(stats_path.read_text())
    assert stats["frames"]["swapped"] > 0 and stats["frames"]["passthrough"] == 0, stats["frames"]
    assert stats["server"]["url"] == triton.url and stats["server"]["models"] == {"swapper": "swapper"}, stats["server"]
    assert stats["server"]["calls"] > 0 and stats["server"]["rtt_ms"] is not None
    # The served swapper runs as served: no int8 copy of it is built or looked for here ([models] precision = "auto").
    assert stats["precision"]["swapper"] == "float" and triton.url in stats["precision_why"]["swapper"], stats["precision_why"]
    assert stats["precision_changes"] == []


def test_the_server_keeps_no_crop_or_latent_on_disk_or_in_its_log(client, triton, isolated_user_dirs) -> None:
    """A crop and a latent of distinctive random bytes swapped through the server: none of the files
    the server writes (its workspace, its user folders, its log, the Python backend's copies of
    PyTriton's model) holds them afterwards."""
    import os
    import tempfile

    remote, files = client
    swapper = Swapper(files.paths["swapper"], remote)
    rng = np.random.default_rng(99)
    crop = rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)
    latent = rng.standard_normal((1, 512)).astype(np.float32)
    latent /= np.linalg.norm(latent)
    swapper.swap([crop], latent)
    marks = [np.ascontiguousarray(crop[..., ::-1].transpose(2, 0, 1)).tobytes()[4096:4160], latent.tobytes()[256:320]]
    roots = [Path(tempfile.gettempdir()) / f"vcamd-serve-{os.getuid()}" / str(triton.port), isolated_user_dirs, triton.log,
             *Path(tempfile.gettempdir()).glob("folder*")]
    checked = 0
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if not path.is_file() or path.is_symlink() or path.stat().st_size > 64 * 2**20:
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            checked += 1
            assert not any(mark in data for mark in marks), f"{path} holds a crop or latent sent to the server"
    assert checked > 10, "the server's files were not found where they were looked for"


def test_doctor_with_the_enhancer_off_checks_the_swapper_alone(triton, served_files) -> None:
    from vcamd.doctor.results import Status
    from vcamd.doctor.server import check_server

    cfg = served_files.config(server=triton.url)
    cfg = cfg.model_copy(update={"enhancer": cfg.enhancer.model_copy(update={"enabled": False})})
    result = check_server(cfg)
    assert result is not None and result.status is Status.ok, result

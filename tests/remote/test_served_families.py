"""The swapper and enhancer families other than inswapper and GFPGAN on a real Triton server
(`vcamd serve`, PyTriton on 127.0.0.1) and in a written model repository: each gives what it gives
here, to the bit. ghost (a signature it shares with hyperswap, simswap and hififace, its converter
run here) with CodeFormer (a double `weight` input); a DeepFaceLab model (NHWC, three outputs, a
morph input) with GPEN-BFR 256 (its own 256² crop). None has an `emap`: no `.emap` companion is
served, written or waited for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from support.triton import TritonProcess
from tritonclient.grpc import model_config_pb2

from vcamd.bench.families import build_converter, build_family_enhancer, build_family_swapper
from vcamd.bench.standins import build_recognizer
from vcamd.config.reading import config_from_dict
from vcamd.faces.enhance import Enhancer
from vcamd.faces.specs import ENHANCERS, family_named
from vcamd.faces.swap import EmbeddingConverter, Swapper
from vcamd.models.pipeline import make_sessions, model_files
from vcamd.remote.sessions import RemoteSession

pytestmark = pytest.mark.slow

SETS = {"ghost": ("ghost_2_256", "codeformer"), "dfm": ("someone.dfm", "gpen_bfr_256")}
"""A server each: (swapper, enhancer)."""


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory, assets: Path) -> Path:
    folder = tmp_path_factory.mktemp("served_families")
    build_family_swapper(folder / "ghost_2_256.onnx", family_named("ghost_2_256"))
    build_converter(folder / "crossface_ghost.onnx")
    build_family_swapper(folder / "someone.dfm", family_named("someone.dfm").sized(224))
    for name in ("codeformer", "gpen_bfr_256"):
        build_family_enhancer(folder / f"{name}.onnx", next(spec for spec in ENHANCERS if spec.family == name))
    build_recognizer(folder / "recognizer.onnx")
    return folder


def _models(folder: Path, which: str, assets: Path, **more: object) -> dict:
    swapper, enhancer = SETS[which]
    return {"dir": str(folder), "swapper": str(folder / swapper) if swapper.endswith(".dfm") else swapper, "enhancer": enhancer,
            "detector": str(assets / "models" / "scrfd_500m_kps.onnx"), "recognizer": str(folder / "recognizer.onnx"),
            "providers": ["cpu"], "threads": 1, **more}


def _server_toml(folder: Path, which: str, assets: Path, path: Path) -> Path:
    lines = [f"{key} = {value!r}".replace("'", '"') for key, value in _models(folder, which, assets).items()]
    path.write_text("[models]\n" + "\n".join(lines) + "\n\n[enhancer]\nenabled = true\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=sorted(SETS))
def served(request, models_dir, assets, tmp_path_factory):
    """A `vcamd serve` of one set, and a client's RemoteSessions on it."""
    which = request.param
    folder = tmp_path_factory.mktemp(f"triton_{which}")
    server = TritonProcess(_server_toml(models_dir, which, assets, folder / "server.toml"), log=folder / "serve.log").start()
    try:
        server.wait_ready()
        cfg = config_from_dict({"models": _models(models_dir, which, assets, server=server.url), "enhancer": {"enabled": True}}, "client")
        files = model_files(cfg)
        remote = make_sessions(cfg, files)
        assert remote.link.wait_up(120), remote.link.status()
        yield which, remote, files, server
        remote.close()
    finally:
        server.stop()


def test_each_family_through_the_server_equals_the_local_one(served, models_dir, sessions, newton, newton_face) -> None:
    which, remote, files, server = served
    swapper_name, enhancer_name = SETS[which]
    converter = EmbeddingConverter(models_dir / "crossface_ghost.onnx", sessions) if which == "ghost" else None
    through = Swapper(files.paths["swapper"], remote, converter=converter)
    here = Swapper(models_dir / (swapper_name if which == "dfm" else f"{swapper_name}.onnx"), sessions, converter=converter)
    assert isinstance(through.session, RemoteSession)
    assert through.spec == here.spec and through.emap is None
    assert swapper_name.replace(".", "_") in remote.link.served_models()
    assert not [name for name in remote.link.served_models() if name.endswith(".emap")]
    raw = np.random.default_rng(5).standard_normal(512).astype(np.float32)
    source = here.latent(raw / np.linalg.norm(raw), raw) if here.needs_source else None
    crops = [here.align(newton, newton_face)[0] for _ in range(2)]
    for a, b, crop in zip(through.swap(crops, source), here.swap(crops, source), crops, strict=True):
        np.testing.assert_array_equal(a, b)
        assert np.abs(a.astype(int) - crop).mean() > 5, "the stand-in must really change the face"

    served_enhancer = Enhancer(files.paths["enhancer"], remote, strength=1.0, weight=0.3)
    local_enhancer = Enhancer(models_dir / f"{enhancer_name}.onnx", sessions, strength=1.0, weight=0.3)
    assert served_enhancer.spec == local_enhancer.spec and served_enhancer.crop.size == (256 if which == "dfm" else 512)
    big, _ = local_enhancer.crop.align(newton, newton_face.kps)
    np.testing.assert_array_equal(served_enhancer.restore(big), local_enhancer.restore(big))
    if which == "ghost":  # CodeFormer's weight reaches the server: another weight, another face
        other = Enhancer(files.paths["enhancer"], remote, strength=1.0, weight=0.9)
        assert np.abs(other.restore(big).astype(int) - served_enhancer.restore(big)).mean() > 5


@pytest.mark.parametrize("which", sorted(SETS))
def test_the_written_repository_has_no_emap_and_answers_as_the_local_models(which, models_dir, assets, tmp_path, sessions, newton,
                                                                            newton_face) -> None:
    config = _server_toml(models_dir, which, assets, tmp_path / "server.toml")
    out = tmp_path / "models"
    done = subprocess.run([sys.executable, "-m", "vcamd", "serve", "--config", str(config), "--write-repository", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    swapper_name, enhancer_name = SETS[which]
    served_swapper = swapper_name.replace(".", "_")
    assert sorted(p.name for p in out.iterdir()) == sorted([served_swapper, enhancer_name])
    for name in (served_swapper, enhancer_name):
        text_format.Parse((out / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())

    here = Swapper(models_dir / (swapper_name if which == "dfm" else f"{swapper_name}.onnx"), sessions,
                   converter=EmbeddingConverter(models_dir / "crossface_ghost.onnx", sessions) if which == "ghost" else None)
    crop = here.align(newton, newton_face)[0]
    model = ort.InferenceSession(str(out / served_swapper / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    local = ort.InferenceSession(str(here.path), providers=["CPUExecutionProvider"])
    if which == "dfm":
        from vcamd.faces.specs import DFM_MORPH_INPUT, dfm_blob

        feeds = {here.target_name: dfm_blob([crop]), DFM_MORPH_INPUT: np.array([0.75], np.float32)}
    else:
        raw = np.random.default_rng(6).standard_normal(512).astype(np.float32)
        feeds = {"target": here.crop.to_blob([crop]), "source": here.latent(raw / np.linalg.norm(raw), raw)}
    for a, b in zip(model.run(None, feeds), local.run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)  # a float family travels as it is: the same model
    enhancer = text_format.Parse((out / enhancer_name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    types = {i.name: model_config_pb2.DataType.Name(i.data_type) for i in enhancer.input}
    assert types["input"] == "TYPE_UINT8"
    if which == "ghost":
        assert types["weight"] == "TYPE_FP64"

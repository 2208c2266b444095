"""`vcamd serve --write-repository DIR`: a model repository for NVIDIA's Triton container, checked
without the container: each config.pbtxt parses with Triton's own schema, and each model.onnx,
run by ONNX Runtime as Triton's onnxruntime backend runs it, answers on the same compact wire as
`vcamd serve` with what the local model gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from vcamd.faces.enhance import Enhancer
from vcamd.faces.parse import FaceParser
from vcamd.faces.specs import ENHANCER_CROP
from vcamd.faces.swap import Swapper

from .conftest import write_server_config


@pytest.fixture(scope="module")
def repository(served_files, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("repo")
    config = write_server_config(served_files, folder / "server.toml")
    out = folder / "models"
    done = subprocess.run([sys.executable, "-m", "vcamd", "serve", "--config", str(config), "--write-repository", str(out),
                           "--instances", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "docker run" in done.stdout and "tritonserver --model-repository" in done.stdout and "--grpc-use-ssl-mutual=true" in done.stdout
    tls = folder / "models-tls"
    assert all((tls / name).stat().st_mode & 0o077 == 0 for name in ("server.pem", "server.key", "ca.pem", "pairing.json"))
    return out


def _config(folder: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def test_every_model_has_a_valid_config_for_the_onnxruntime_backend(repository) -> None:
    names = sorted(p.name for p in repository.iterdir())
    assert names == ["enhancer", "parser", "swapper", "swapper.emap"]
    swapper = _config(repository / "swapper")
    assert swapper.backend == "onnxruntime" and swapper.name == "swapper"
    # The stand-in, like inswapper_128, fixes its batch at 1: no dynamic batching, instances side by side.
    assert swapper.max_batch_size == 0 and not swapper.HasField("dynamic_batching")
    assert swapper.instance_group[0].count == 2 and swapper.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert [(i.name, model_config_pb2.DataType.Name(i.data_type), list(i.dims)) for i in swapper.input] == [
        ("target", "TYPE_UINT8", [1, 3, 128, 128]), ("source", "TYPE_FP32", [1, 512])]
    assert [(o.name, model_config_pb2.DataType.Name(o.data_type)) for o in swapper.output] == [("output", "TYPE_UINT8")]
    parser = _config(repository / "parser")
    assert [(o.name, model_config_pb2.DataType.Name(o.data_type), list(o.dims)) for o in parser.output][0][1:] == ("TYPE_UINT8", [1, 512, 512])
    for folder in repository.iterdir():
        assert (folder / "1" / "model.onnx").is_file()


def _run(folder: Path, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(str(folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_the_wrapped_models_answer_on_the_wire_with_what_the_local_ones_give(repository, served_files, sessions, newton, newton_face) -> None:
    local = Swapper(served_files.swapper, sessions)
    crop, _ = local.crop.align(newton, newton_face.kps)
    latent = local.latent(np.random.default_rng(4).standard_normal(512).astype(np.float32))
    wire = np.ascontiguousarray(crop[..., ::-1].transpose(2, 0, 1))[None]
    out = _run(repository / "swapper", {"target": wire, "source": latent})[0]
    assert out.dtype == np.uint8
    expected = local.swap([crop], latent)[0][..., ::-1].transpose(2, 0, 1)
    diff = np.abs(out[0].astype(int) - expected)
    assert diff.max() <= 1 and diff.mean() < 0.01, (diff.max(), diff.mean())  # float rounding of (x − mean) / std at most
    emap = _run(repository / "swapper.emap", {"row": np.arange(512, dtype=np.int64)})[0]
    np.testing.assert_array_equal(emap, local.emap)

    big, _ = ENHANCER_CROP.align(newton, newton_face.kps)
    restored = _run(repository / "enhancer", {"input": np.ascontiguousarray(big[..., ::-1].transpose(2, 0, 1))[None]})[0]
    here = Enhancer(served_files.enhancer, sessions, strength=1.0).restore(big)[..., ::-1].transpose(2, 0, 1)
    assert np.abs(restored[0].astype(int) - here).max() <= 1
    classes = _run(repository / "parser", {"input": np.ascontiguousarray(big[..., ::-1].transpose(2, 0, 1))[None]})[0]
    local_classes = FaceParser(served_files.parser, sessions).classes([big])[0]
    # Near-ties of the logits may flip with the float rounding of the normalisation: a pixel here and there.
    assert classes.shape == (1, 512, 512) and (classes[0] == local_classes).mean() > 0.995

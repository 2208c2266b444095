"""Provider resolution, the session cache and its options, and clear errors for bad model files."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from vcamd.common.errors import ModelError, VcamdError
from vcamd.inference.runtime import (
    PROVIDER_NAMES,
    Sessions,
    gpu_install_problem,
    resolve_providers,
)


def test_auto_picks_best_available_and_ends_with_cpu():
    assert resolve_providers(["auto"], ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    both = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert resolve_providers(["auto"], both) == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert resolve_providers(["auto"], ["CoreMLExecutionProvider", "CPUExecutionProvider"])[0] == "CoreMLExecutionProvider"
    # on this machine: whatever onnxruntime really offers
    assert resolve_providers(["auto"])[-1] == "CPUExecutionProvider"


def test_explicit_providers_keep_order():
    available = ["CUDAExecutionProvider", "OpenVINOExecutionProvider", "CPUExecutionProvider"]
    assert resolve_providers(["openvino", "cuda"], available) == [
        "OpenVINOExecutionProvider",
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    assert set(PROVIDER_NAMES) == {"cuda", "tensorrt", "coreml", "directml", "openvino", "cpu"}


@pytest.mark.skipif("CUDAExecutionProvider" in onnxruntime.get_available_providers(), reason="CUDA is available here")
def test_unavailable_provider_is_a_clear_error():
    with pytest.raises(VcamdError) as info:
        Sessions(["cuda"])
    text = str(info.value)
    assert "cuda" in text and "CUDAExecutionProvider" in text
    assert "CPUExecutionProvider" in text  # lists what is available
    assert "onnxruntime-gpu" in text  # and says how to fix it


def test_unknown_provider_name():
    with pytest.raises(VcamdError, match="unknown provider 'cudaa'"):
        resolve_providers(["cudaa"], ["CPUExecutionProvider"])


def test_double_install_is_explained():
    assert gpu_install_problem({"onnxruntime": "1.32.0"}) is None
    text = gpu_install_problem({"onnxruntime": "1.32.0", "onnxruntime-gpu": "1.32.0"})
    assert text is not None
    assert "pip uninstall -y onnxruntime onnxruntime-gpu" in text and "pip install onnxruntime-gpu" in text


def test_one_session_per_model_with_spinning_off(models_dir: Path):
    sessions = Sessions(["cpu"], threads=2)
    path = models_dir / "scrfd_500m_kps.onnx"
    first = sessions.get(path)
    assert sessions.get(str(path)) is first  # cached by resolved path
    opts = first.get_session_options()
    assert opts.intra_op_num_threads == 2
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert opts.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    assert opts.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert sessions.active_providers() == {"scrfd_500m_kps.onnx": "CPUExecutionProvider"}


def test_resized_session_runs_at_the_new_size(models_dir: Path, sessions: Sessions):
    session = sessions.get_resized(models_dir / "scrfd_500m_kps.onnx", (192, 192))
    assert session.get_inputs()[0].shape == [1, 3, 192, 192]
    outs = session.run(None, {"images": np.zeros((1, 3, 192, 192), np.float32)})
    # stride 8 at 192²: 24×24 locations × 2 anchors
    assert outs[0].shape[-2:] == (24 * 24 * 2, 1)
    assert sessions.get_resized(models_dir / "scrfd_500m_kps.onnx", (192, 192)) is session


def test_truncated_model_names_file_and_fix(tmp_path: Path, models_dir: Path):
    broken = tmp_path / "det_10g.onnx"
    broken.write_bytes((models_dir / "scrfd_500m_kps.onnx").read_bytes()[:100_000])
    with pytest.raises(ModelError) as info:
        Sessions(["cpu"]).get(broken)
    assert str(broken) in str(info.value) and "vcamd models pull" in str(info.value)


def test_not_onnx_and_missing_file(tmp_path: Path):
    text_file = tmp_path / "model.onnx"
    text_file.write_text("<html>404 Not Found</html>")
    with pytest.raises(ModelError, match="corrupt, truncated or not an ONNX model"):
        Sessions(["cpu"]).get(text_file)
    with pytest.raises(ModelError, match="does not exist"):
        Sessions(["cpu"]).get(tmp_path / "nope.onnx")


def test_copy_of_real_model_loads(tmp_path: Path, models_dir: Path):
    copy = tmp_path / "copy.onnx"
    shutil.copy(models_dir / "scrfd_500m_kps.onnx", copy)
    assert Sessions(["cpu"]).get(copy).get_inputs()[0].name == "images"


def test_two_models_load_side_by_side(models_dir: Path):
    """Creating one session does not hold up another's: the first model's load waits (in the test
    seam) until the second model's session exists, which a single lock over all loads would never
    allow. Two callers of the same model still get the one session."""
    first, second = models_dir / "scrfd_500m_kps.onnx", models_dir / "mobilefacenet.onnx"
    second_ready = threading.Event()

    def wrap(session, path: Path):
        if path.name == first.name:
            assert second_ready.wait(60), "the second model did not load while the first one was loading"
        else:
            second_ready.set()
        return session

    sessions = Sessions(["cpu"], threads=1, wrap=wrap)
    got: dict[str, object] = {}
    loaders = [threading.Thread(target=lambda: got.setdefault("a", sessions.get(first))),
               threading.Thread(target=lambda: got.setdefault("b", sessions.get(first)))]
    for t in loaders:
        t.start()
    sessions.get(second)
    for t in loaders:
        t.join(60)
    assert got["a"] is got["b"] is sessions.get(first)
    assert set(sessions.active_providers()) == {first.name, second.name}


def test_a_failed_load_is_not_remembered(tmp_path: Path, models_dir: Path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not yet")
    sessions = Sessions(["cpu"], threads=1)
    with pytest.raises(ModelError):
        sessions.get(path)
    shutil.copy(models_dir / "scrfd_500m_kps.onnx", path)  # fixed: the next ask loads it
    assert sessions.get(path).get_inputs()[0].name == "images"

"""ONNX Runtime providers: listed is not enough, a session must really run on them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

from vcamd.config.schema import ModelsConfig
from vcamd.doctor.packages import gpu_build
from vcamd.doctor.platform import Platform
from vcamd.doctor.results import CheckResult, Status, ok
from vcamd.inference.runtime import PROVIDER_NAMES, available_providers

PROBED = ("CUDAExecutionProvider", "ROCMExecutionProvider", "DmlExecutionProvider", "CoreMLExecutionProvider",
          "OpenVINOExecutionProvider")
"""Providers whose libraries are tried by running a tiny model. TensorRT is not: its first session
builds an engine, which takes minutes."""

# Runs in a child process: a broken CUDA install can abort the process, and ORT reports library
# load failures on stderr, which the child's stderr captures.
_PROBE = r"""
import json, sys
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "probe", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
data = model.SerializeToString()
used = {}
for provider in sys.argv[1:]:
    try:
        session = ort.InferenceSession(data, providers=[provider, "CPUExecutionProvider"])
        out = session.run(None, {"x": np.ones((1, 4), np.float32)})[0]
        assert float(out.sum()) == 8.0
        used[provider] = session.get_providers()[0]
    except Exception as exc:
        used[provider] = "error: " + (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
print(json.dumps(used))
"""


def probe_providers(providers: Sequence[str], timeout_s: float = 120.0) -> tuple[dict[str, str], str]:
    """{provider: provider really used} for a tiny session per provider, and the child's stderr."""
    done = subprocess.run([sys.executable, "-c", _PROBE, *providers], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {p: f"error: probe process failed: {last}" for p in providers}, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _load_failure(stderr: str) -> str:
    """The line of ORT's log that says why a provider's library did not load."""
    for line in stderr.splitlines():
        if "Failed to load library" in line or "cannot open shared object" in line or "Error" in line:
            return line.split("] ")[-1].strip()
    return ""


CPU_ONLY = ("CPU only: a swap then takes seconds (1.6–4.8 s measured on 2-core machines, docs/performance.md; "
            "about 3.5× less with the swapper's int8 copy, see the precision row), "
            "so the swapped face is refreshed that rarely; a live face needs a GPU")


def check_providers(models: ModelsConfig, platform: Platform | None = None,
                    available: Sequence[str] | None = None) -> CheckResult:
    """Which providers ONNX Runtime offers here, and (by running a tiny model) which really work.

    `available` stands in for ONNX Runtime's list (tests of other platforms' builds)."""
    platform = platform or Platform.here()
    name = "ONNX Runtime providers"
    try:
        import onnxruntime as ort
    except Exception as exc:  # noqa: BLE001
        return CheckResult(name, Status.fail, f"cannot import onnxruntime: {exc}", f"{platform.pip} install {gpu_build(platform)}")
    available = available_providers() if available is None else list(available)
    requested = [] if models.providers == ["auto"] else [PROVIDER_NAMES[p] for p in models.providers]
    missing = [p for p in requested if p not in available]
    pip = platform.pip  # the venv's: a bare `pip` may install for another Python
    swap_build = f"{pip} uninstall -y onnxruntime && {pip} install {gpu_build(platform).split(' (')[0]}"
    if missing:
        return CheckResult(
            name, Status.fail,
            f"[models] providers asks for {', '.join(missing)}, ONNX Runtime {ort.__version__} offers {', '.join(available)}",
            f"install the matching build ({swap_build}; see README) or set [models] providers = [\"auto\"]",
        )
    if platform.is_macos and "CoreMLExecutionProvider" not in available:
        return CheckResult(name, Status.warn, f"ONNX Runtime {ort.__version__}: {', '.join(available)}, no CoreML — {CPU_ONLY}",
                           f"{pip} uninstall -y onnxruntime onnxruntime-silicon && {pip} install onnxruntime "
                           "(the macOS wheel has the CoreML provider)")
    to_probe = [p for p in (requested or available) if p in PROBED]
    if not to_probe:
        detail = f"ONNX Runtime {ort.__version__}: {', '.join(available)}"
        if requested == ["CPUExecutionProvider"] or not any(p in PROBED for p in available):
            return CheckResult(name, Status.warn, f"{detail} — {CPU_ONLY}",
                               f"with a GPU: {swap_build} (see README, \"ONNX Runtime: one package, the one for your hardware\")")
        return ok(name, detail)
    used, stderr = probe_providers(to_probe)
    really = [f"{p} → {u}" for p, u in used.items()]
    broken = {p: u for p, u in used.items() if u != p}
    if not broken:
        return ok(name, f"ONNX Runtime {ort.__version__}: " + ", ".join(f"{p} runs" for p in used))
    reason = _load_failure(stderr) or "; ".join(u for u in broken.values() if u.startswith("error"))
    status = Status.fail if any(p in requested for p in broken) else Status.warn
    if "CUDAExecutionProvider" in broken:
        fix = ("install the CUDA 12 runtime and cuDNN 9 that this onnxruntime-gpu expects "
               f"({pip} install nvidia-cublas-cu12 nvidia-cudnn-cu12 nvidia-cuda-runtime-cu12, or the system CUDA), "
               "make them findable (LD_LIBRARY_PATH), and check `nvidia-smi`")
    elif "DmlExecutionProvider" in broken:
        fix = (f"update the graphics driver (DirectML needs DirectX 12), or on NVIDIA: "
               f"{pip} uninstall -y onnxruntime-directml && {pip} install onnxruntime-gpu")
    else:
        fix = "install the provider's runtime libraries"
    return CheckResult(name, status, f"listed but not usable: {'; '.join(really)}" + (f" ({reason})" if reason else "")
                       + (f" — until then {CPU_ONLY}" if status is Status.warn else ""), fix)

"""The Python packages vcamd imports, and exactly one ONNX Runtime build."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from vcamd.doctor.platform import Platform
from vcamd.doctor.results import CheckResult, Status, ok


@dataclass(frozen=True, slots=True)
class Package:
    module: str
    distribution: str
    essential: bool = True
    why: str = ""


PACKAGES = (
    Package("numpy", "numpy"),
    Package("cv2", "opencv-python"),
    Package("onnxruntime", "onnxruntime"),
    Package("insightface", "insightface"),
    Package("pyvirtualcam", "pyvirtualcam"),
    Package("pydantic", "pydantic"),
    Package("platformdirs", "platformdirs"),
    # pystray connects to the X server when imported; whether it can show an icon is the tray check.
    Package("pystray", "pystray", essential=False, why="the tray icon"),
)


def check_package(package: Package, platform: Platform | None = None) -> CheckResult:
    name = f"package {package.module}"
    pip = (platform or Platform.here()).pip
    try:
        if package.module == "pystray":
            if importlib.util.find_spec("pystray") is None:
                raise ImportError("No module named 'pystray'")
        else:
            importlib.import_module(package.module)
    except Exception as exc:  # noqa: BLE001 — a broken install raises anything (ImportError, OSError from a .so)
        status = Status.fail if package.essential else Status.warn
        needed = f" (needed for {package.why})" if package.why else ""
        return CheckResult(name, status, f"cannot import: {type(exc).__name__}: {exc}{needed}",
                           f"{pip} install {package.distribution}")
    return ok(name, _version(package))


def _version(package: Package) -> str:
    module = sys.modules.get(package.module)
    version = getattr(module, "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version(package.distribution)
        except importlib.metadata.PackageNotFoundError:
            version = "version unknown"
    return str(version)


ORT_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino",
                     "onnxruntime-silicon", "onnxruntime-rocm", "onnxruntime-training")


def installed_ort_distributions() -> list[str]:
    found = []
    for dist in ORT_DISTRIBUTIONS:
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


GPU_BUILDS = {
    "linux": "onnxruntime-gpu (NVIDIA, CUDA 12)",
    "win32": "onnxruntime-directml (any DirectX 12 GPU) or onnxruntime-gpu (NVIDIA)",
    "darwin": "onnxruntime (its macOS wheel has the CoreML provider)",
}


def gpu_build(platform: Platform) -> str:
    return GPU_BUILDS.get(platform.system, GPU_BUILDS["linux"])


def check_onnxruntime_install(found: Sequence[str] | None = None, platform: Platform | None = None) -> CheckResult:
    """Exactly one ONNX Runtime build: two share the `onnxruntime` module and overwrite each other."""
    platform = platform or Platform.here()
    found = installed_ort_distributions() if found is None else list(found)
    if not found:
        return CheckResult("onnxruntime install", Status.fail, "no ONNX Runtime installed",
                           f"{platform.pip} install {gpu_build(platform)} — or onnxruntime for the CPU only")
    if len(found) > 1:
        keep = next((d.split()[0] for d in found if d.split()[0] != "onnxruntime"), "onnxruntime")
        names = " ".join(d.split()[0] for d in found)
        return CheckResult(
            "onnxruntime install", Status.fail,
            f"{len(found)} ONNX Runtime builds installed together ({', '.join(found)}); they share one module "
            f"and break each other: {keep} must not sit beside the CPU onnxruntime (insightface pulls that one in)",
            f"{platform.pip} uninstall -y {names} && {platform.pip} install --force-reinstall {keep}",
        )
    return ok("onnxruntime install", found[0])

"""`vcamd doctor`: check the environment FaceLive Camera needs, each check with its fix.

Each check is a small function returning a `CheckResult`. What differs between Linux, Windows and
macOS (the virtual camera, the ONNX Runtime build, the tray) is read from one `Platform` value
that `run_checks` hands to those checks; tests pass a Windows or macOS one. ✗ (fail) means FaceLive Camera cannot
work until it is fixed and makes `vcamd doctor` exit 1; ! (warn) is worth knowing but not fatal
(no tray, running on the CPU, daemon not started).
"""

from __future__ import annotations

from pathlib import Path

from vcamd.doctor.camera import check_camera, check_virtual_camera
from vcamd.doctor.config import check_config, check_source_face
from vcamd.doctor.daemon import check_control_socket
from vcamd.doctor.models import check_detector_shapes, check_models, check_models_fit
from vcamd.doctor.packages import PACKAGES, check_onnxruntime_install, check_package
from vcamd.doctor.platform import Platform
from vcamd.doctor.providers import check_providers
from vcamd.doctor.results import CheckResult, Status, exit_code, report
from vcamd.doctor.server import check_server
from vcamd.doctor.tray import check_tray

__all__ = [
    "CheckResult", "Platform", "Status", "check_camera", "check_config", "check_control_socket", "check_detector_shapes",
    "check_models", "check_models_fit", "check_onnxruntime_install", "check_package", "check_providers",
    "check_server", "check_source_face", "check_tray", "check_virtual_camera", "exit_code", "report", "run_checks",
]


def run_checks(config_path: Path | None, platform: Platform | None = None) -> list[CheckResult]:
    """Every check, those that differ per platform chosen by `platform` (default: this machine)."""
    platform = platform or Platform.here()
    config_result, cfg = check_config(config_path)
    daemon_result, daemon_status = check_control_socket()
    results = [config_result]
    results += [check_package(p) for p in PACKAGES]
    results.append(check_onnxruntime_install(platform=platform))
    results.append(check_providers(cfg.models, platform))
    results += check_models(cfg)
    results += [r for r in (check_models_fit(cfg), check_detector_shapes(cfg), check_server(cfg, daemon_status)) if r is not None]
    results.append(check_source_face(cfg, daemon_status))
    results.append(check_camera(cfg.camera, daemon_status, platform))
    results.append(check_virtual_camera(cfg.virtual_camera, platform=platform))
    results.append(check_tray(platform))
    results.append(daemon_result)
    return results

"""`vcamd doctor`: check the environment FaceLive Camera needs, each check with its fix.

Each check is a small function returning a `CheckResult`. What differs between Linux, Windows and
macOS (the virtual camera, the ONNX Runtime build, the tray) is read from one `Platform` value
that `run_checks` hands to those checks; tests pass a Windows or macOS one. ✗ (fail) means FaceLive Camera cannot
work until it is fixed and makes `vcamd doctor` exit 1; ! (warn) is worth knowing but not fatal
(no tray, running on the CPU, daemon not started).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from vcamd import v4l2loopback
from vcamd.config import CameraConfig, Config, ModelsConfig, VirtualCameraConfig
from vcamd.errors import ConfigError, VcamdError
from vcamd.runtime import PROVIDER_NAMES


class Status(StrEnum):
    ok = "ok"
    warn = "warn"
    fail = "fail"


MARKS = {Status.ok: "✓", Status.warn: "!", Status.fail: "✗"}
ASCII_MARKS = {Status.ok: "OK", Status.warn: "!!", Status.fail: "XX"}


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self, marks: dict[Status, str] = MARKS) -> str:
        text = f"{marks[self.status]} {self.name}: {self.detail}"
        if self.fix and self.status is not Status.ok:
            text += f"\n    fix: {self.fix}"
        return text


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, Status.ok, detail)


# ---------------------------------------------------------------------------------------------
# The platform: the one seam for everything that differs between Linux, Windows and macOS


def _command_output(command: Sequence[str]) -> str | None:
    """A command's stdout, None when it cannot run."""
    try:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _registry_key_exists(key: str) -> bool:
    """Windows: whether HKEY_CLASSES_ROOT\\<key> exists (64-bit view)."""
    try:
        import winreg  # type: ignore[import-not-found]  # Windows only
    except ImportError:
        return False
    try:
        with winreg.OpenKey(winreg.HKEY_CLASSES_ROOT, key, 0, winreg.KEY_READ | winreg.KEY_WOW64_64KEY):
            return True
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class Platform:
    """Where doctor runs. Every platform-specific check reads the platform from here, and tests
    pass another one (a Windows or macOS with its probes) instead of patching `sys.platform`."""

    system: str
    """`sys.platform`: "linux", "win32" or "darwin"."""
    environ: Mapping[str, str]
    run_command: Callable[[Sequence[str]], str | None] = _command_output
    registry_key_exists: Callable[[str], bool] = _registry_key_exists
    path_exists: Callable[[Path], bool] = Path.exists

    @classmethod
    def here(cls) -> Platform:
        return cls(sys.platform, os.environ)

    @classmethod
    def named(cls, system: str) -> Platform:
        return cls(system, os.environ)

    @property
    def is_linux(self) -> bool:
        return self.system.startswith("linux")

    @property
    def is_windows(self) -> bool:
        return self.system == "win32"

    @property
    def is_macos(self) -> bool:
        return self.system == "darwin"


# ---------------------------------------------------------------------------------------------
# Python packages


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


def check_package(package: Package) -> CheckResult:
    name = f"package {package.module}"
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
                           f"pip install {package.distribution}")
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


def _gpu_build(platform: Platform) -> str:
    return GPU_BUILDS.get(platform.system, GPU_BUILDS["linux"])


def check_onnxruntime_install(found: Sequence[str] | None = None, platform: Platform | None = None) -> CheckResult:
    """Exactly one ONNX Runtime build: two share the `onnxruntime` module and overwrite each other."""
    platform = platform or Platform.here()
    found = installed_ort_distributions() if found is None else list(found)
    if not found:
        return CheckResult("onnxruntime install", Status.fail, "no ONNX Runtime installed",
                           f"pip install {_gpu_build(platform)} — or onnxruntime for the CPU only")
    if len(found) > 1:
        keep = next((d.split()[0] for d in found if d.split()[0] != "onnxruntime"), "onnxruntime")
        names = " ".join(d.split()[0] for d in found)
        return CheckResult(
            "onnxruntime install", Status.fail,
            f"{len(found)} ONNX Runtime builds installed together ({', '.join(found)}); they share one module "
            f"and break each other: {keep} must not sit beside the CPU onnxruntime (insightface pulls that one in)",
            f"pip uninstall -y {names} && pip install --force-reinstall {keep}",
        )
    return ok("onnxruntime install", found[0])


# ---------------------------------------------------------------------------------------------
# ONNX Runtime providers: listed is not enough, a session must really run on them


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


CPU_ONLY = ("CPU only: a swap then takes about a second, so the swapped face is refreshed about once a second; "
            "a live face needs a GPU")


def check_providers(models: ModelsConfig, platform: Platform | None = None,
                    available: Sequence[str] | None = None) -> CheckResult:
    """Which providers ONNX Runtime offers here, and (by running a tiny model) which really work.

    `available` stands in for ONNX Runtime's list (tests of other platforms' builds)."""
    platform = platform or Platform.here()
    name = "ONNX Runtime providers"
    try:
        import onnxruntime as ort
    except Exception as exc:  # noqa: BLE001
        return CheckResult(name, Status.fail, f"cannot import onnxruntime: {exc}", f"pip install {_gpu_build(platform)}")
    available = list(ort.get_available_providers()) if available is None else list(available)
    requested = [] if models.providers == ["auto"] else [PROVIDER_NAMES[p] for p in models.providers]
    missing = [p for p in requested if p not in available]
    swap_build = f"pip uninstall -y onnxruntime && pip install {_gpu_build(platform).split(' (')[0]}"
    if missing:
        return CheckResult(
            name, Status.fail,
            f"[models] providers asks for {', '.join(missing)}, ONNX Runtime {ort.__version__} offers {', '.join(available)}",
            f"install the matching build ({swap_build}; see README) or set [models] providers = [\"auto\"]",
        )
    if platform.is_macos and "CoreMLExecutionProvider" not in available:
        return CheckResult(name, Status.warn, f"ONNX Runtime {ort.__version__}: {', '.join(available)}, no CoreML — {CPU_ONLY}",
                           "pip uninstall -y onnxruntime onnxruntime-silicon && pip install onnxruntime "
                           "(the macOS wheel has the CoreML provider)")
    to_probe = [p for p in (requested or available) if p in PROBED]
    if not to_probe:
        detail = f"ONNX Runtime {ort.__version__}: {', '.join(available)}"
        if requested == ["CPUExecutionProvider"] or not any(p in PROBED for p in available):
            return CheckResult(name, Status.warn, f"{detail} — {CPU_ONLY}",
                               f"with a GPU: {swap_build} (see README, GPU install)")
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
               "(pip install nvidia-cublas-cu12 nvidia-cudnn-cu12 nvidia-cuda-runtime-cu12, or the system CUDA), "
               "make them findable (LD_LIBRARY_PATH), and check `nvidia-smi`")
    elif "DmlExecutionProvider" in broken:
        fix = "update the graphics driver (DirectML needs DirectX 12), or pip install onnxruntime-gpu on NVIDIA"
    else:
        fix = "install the provider's runtime libraries"
    return CheckResult(name, status, f"listed but not usable: {'; '.join(really)}" + (f" ({reason})" if reason else "")
                       + (f" — until then {CPU_ONLY}" if status is Status.warn else ""), fix)


# ---------------------------------------------------------------------------------------------
# Models


def check_models(cfg: Config) -> list[CheckResult]:
    try:
        from vcamd.modelstore import ModelStore

        store = ModelStore.from_config(cfg.models)
        rows = store.list()
    except VcamdError as err:
        return [CheckResult("models", Status.fail, str(err.message), err.fix or "see `vcamd models list`")]
    from vcamd.modelcheck import roles_in_use

    wanted = [(role, getattr(cfg.models, role)) for role in roles_in_use(cfg)]
    results = []
    for role, value in wanted:
        result = _model_file_result(store, rows, role, value)
        if result.status is Status.ok:
            result = _signature_result(store, role, value, result)
        results.append(result)
    return results


def _signature_result(store: object, role: str, value: str, found: CheckResult) -> CheckResult:
    """The file is there: load it as `vcamd run` does, so a model in the wrong role fails here too."""
    from vcamd.modelcheck import check_signature

    try:
        check_signature(store.path_for(value, role), role)  # type: ignore[attr-defined]
    except VcamdError as err:
        return CheckResult(found.name, Status.fail, err.message, err.fix or f"fix [models] {role} in the config")
    return found


def _model_file_result(store: object, rows: list, role: str, value: str) -> CheckResult:
    """Whether the configured model's file is there and intact (manifest size and hash)."""
    name = f"model {role}"
    row = next((r for r in rows if r.name == value and r.role == role), None)
    if row is None:
        path = Path(value).expanduser()
        if path.is_file():
            return ok(name, f"{path} (a file, not in the manifest: not verified)")
        return CheckResult(name, Status.fail, f"{value!r} is neither a manifest model for {role} nor a file",
                           f"set [models] {role} (see `vcamd models list`)")
    if row.status == "verified":
        return ok(name, f"{value} verified ({row.path})")
    if row.status == "present":
        return _verify(store, value, role, name)
    if row.status == "corrupt":
        return CheckResult(name, Status.fail, f"{value} is damaged ({row.path}: wrong size)",
                           f"delete it and run `vcamd models pull {value}`")
    return CheckResult(name, Status.fail, f"{value} is {row.status} ({row.path})", f"vcamd models pull {value}")


def _verify(store: object, value: str, role: str, name: str) -> CheckResult:
    """Hash a present, not yet verified model file (once: the store remembers the result)."""
    try:
        outcome = next(r for r in store.verify([value]) if r.role == role)  # type: ignore[attr-defined]
    except (VcamdError, OSError, StopIteration) as exc:
        return CheckResult(name, Status.fail, f"{value}: cannot verify ({exc})", f"vcamd models verify {value}")
    if outcome.status == "ok":
        return ok(name, f"{value} verified ({outcome.path})")
    if outcome.status == "pinned":
        return ok(name, f"{value} present ({outcome.path}); no published hash, pinned sha256 {outcome.sha256[:12]}…")
    if outcome.status == "mismatch":
        return CheckResult(name, Status.fail, f"{value} is damaged ({outcome.path}: sha256 does not match)",
                           f"delete it and run `vcamd models pull {value}`")
    return CheckResult(name, Status.fail, f"{value} is {outcome.status} ({outcome.path})", f"vcamd models pull {value}")


# ---------------------------------------------------------------------------------------------
# Camera and virtual camera


def check_camera(camera: CameraConfig, daemon_status: dict | None = None, platform: Platform | None = None) -> CheckResult:
    """Open the configured camera and read a frame; while the daemon runs, it holds the camera and
    its status says whether the camera delivers."""
    name = "camera"
    device = camera.device
    if daemon_status is not None:
        camera_state = daemon_status.get("camera") or daemon_status.get("state")
        if daemon_status.get("state") in ("running", "starting"):
            return ok(name, f"in use by the running daemon ({camera_state})")
        return CheckResult(name, Status.fail, f"the running daemon reports the camera {camera_state!r}",
                           "plug the camera back in (the daemon retries), or check [camera] device")
    if device == "synthetic":
        return ok(name, "synthetic test pattern ([camera] device = \"synthetic\")")
    import cv2

    target: int | str = int(device) if device.isdigit() else str(Path(device).expanduser())
    if isinstance(target, str) and not target.startswith("/dev/") and not Path(target).exists():
        return CheckResult(name, Status.fail, f"[camera] device = {device!r}: no such file or camera",
                           "set [camera] device to a camera index (0), a /dev/videoN path or a video file")
    cv_log = getattr(getattr(cv2, "utils", None), "logging", None)
    previous = cv_log.getLogLevel() if cv_log else None
    if cv_log:
        # A missing camera is reported below, once, not as a screenful of OpenCV backend warnings.
        cv_log.setLogLevel(cv_log.LOG_LEVEL_SILENT)
    try:
        capture = cv2.VideoCapture(target)  # opened the way the daemon opens it (vcamd.live.sources)
        try:
            opened = capture.isOpened()
            got, frame = capture.read() if opened else (False, None)
        finally:
            capture.release()
    finally:
        if cv_log:
            cv_log.setLogLevel(previous)
    if not opened and isinstance(target, str) and not target.startswith("/dev/"):
        return CheckResult(name, Status.fail, f"[camera] device = {device!r} is not a playable video file",
                           "give a video file OpenCV can play (.mp4/.avi), a camera index (0) or a /dev/videoN path")
    if not opened:
        hint = _video_devices_hint(platform or Platform.here())
        return CheckResult(name, Status.fail, f"[camera] device = {device!r} does not open{hint}",
                           "plug in the webcam, close other apps using it, and set [camera] device "
                           "(`v4l2-ctl --list-devices` lists cameras on Linux)")
    if not got or frame is None:
        return CheckResult(name, Status.fail, f"[camera] device = {device!r} opens but delivers no frame",
                           "close other apps using the camera, or pick another [camera] device")
    return ok(name, f"[camera] device = {device!r} delivers {frame.shape[1]}×{frame.shape[0]} frames")


def _video_devices_hint(platform: Platform) -> str:
    if not platform.is_linux:
        return ""
    devices = sorted(str(p) for p in Path("/dev").glob("video*"))
    return f" (video devices here: {', '.join(devices)})" if devices else " (no /dev/video* devices here)"


def check_virtual_camera(
    vcam: VirtualCameraConfig | None = None,
    sysfs_root: Path = v4l2loopback.SYSFS,
    dev_dir: Path = Path("/dev"),
    platform: Platform | str | None = None,
) -> CheckResult:
    """Linux: the v4l2loopback device labelled [virtual_camera] name; Windows/macOS: OBS / Unity Capture.

    `platform` may be given as its `sys.platform` name alone (the probes are then this machine's)."""
    platform = Platform.named(platform) if isinstance(platform, str) else platform or Platform.here()
    vcam = vcam or VirtualCameraConfig()
    if platform.is_windows:
        return _check_windows_virtual_camera(vcam, platform)
    if platform.is_macos:
        return _check_macos_virtual_camera(vcam, platform)
    found = v4l2loopback.check_device(vcam.name, vcam.device, sysfs_root, dev_dir)
    return CheckResult("virtual camera", Status.ok if found.ok else Status.fail, found.detail, found.fix)


OBS_VIRTUALCAM_CLSID = "{A3FCE0F5-3493-419F-958A-ABA1250EC20B}"
"""The DirectShow filter OBS Studio's virtual camera registers (plugins/win-dshow, virtualcam-guid.h)."""
UNITY_CAPTURE_CLSID = "{5C2CD55C-92AD-4999-8666-912BD3E70010}"
"""Unity Capture's 64-bit DirectShow filter (UnityCaptureFilter.cpp, CLSID_UnityCaptureService)."""
OBS_MAC_EXTENSION = "com.obsproject.obs-studio.mac-camera-extension"
OBS_MAC_DAL_PLUGIN = Path("/Library/CoreMediaIO/Plug-Ins/DAL/obs-mac-virtualcam.plugin")


def _check_windows_virtual_camera(vcam: VirtualCameraConfig, platform: Platform) -> CheckResult:
    installed = [label for label, clsid in (("OBS Virtual Camera", OBS_VIRTUALCAM_CLSID), ("Unity Capture", UNITY_CAPTURE_CLSID))
                 if platform.registry_key_exists(f"CLSID\\{clsid}")]
    if not installed:
        return CheckResult("virtual camera", Status.fail, "neither OBS Virtual Camera nor Unity Capture is installed",
                           "install OBS Studio (obsproject.com) and click Start Virtual Camera once (it registers the camera), "
                           "or install Unity Capture (Install.bat as administrator); then restart Zoom/Teams")
    return _probe_pyvirtualcam(vcam, f"{' and '.join(installed)} installed", platform)


def _check_macos_virtual_camera(vcam: VirtualCameraConfig, platform: Platform) -> CheckResult:
    listing = platform.run_command(["systemextensionsctl", "list"]) or ""
    line = next((entry for entry in listing.splitlines() if OBS_MAC_EXTENSION in entry), None)
    fix = ("install OBS Studio 30 or newer, click Start Virtual Camera once and allow its system extension in "
           "System Settings → Privacy & Security (or General → Login Items & Extensions); then restart Zoom/Teams")
    if line is None:
        if platform.path_exists(OBS_MAC_DAL_PLUGIN):
            return CheckResult("virtual camera", Status.warn,
                               f"only OBS's old DAL plug-in is installed ({OBS_MAC_DAL_PLUGIN}); current Zoom, Teams and "
                               "FaceTime do not load it", fix)
        return CheckResult("virtual camera", Status.fail, "OBS's virtual camera system extension is not installed", fix)
    if "activated enabled" not in line:
        return CheckResult("virtual camera", Status.fail,
                           f"OBS's camera extension is installed but not enabled ({line.strip()})", fix)
    return _probe_pyvirtualcam(vcam, "OBS camera extension enabled", platform)


def _probe_pyvirtualcam(vcam: VirtualCameraConfig, found: str, platform: Platform) -> CheckResult:
    """Open the virtual camera the way the daemon does (pyvirtualcam), for a few frames' time."""
    try:
        import pyvirtualcam

        with pyvirtualcam.Camera(width=64, height=48, fps=5, backend=vcam.backend or None) as cam:
            return ok("virtual camera", f"{found}; {cam.device} opens via pyvirtualcam {cam.backend}")
    except Exception as exc:  # noqa: BLE001 — pyvirtualcam raises RuntimeError per backend, or ImportError
        fix = ("start OBS once and click Start Virtual Camera, then Stop (OBS itself must not hold it), "
               "or set [virtual_camera] backend" if not platform.is_linux else "see README")
        return CheckResult("virtual camera", Status.fail, f"{found}, but it does not open: {exc}", fix)


# ---------------------------------------------------------------------------------------------
# Desktop, config, daemon


def check_tray(platform: Platform | None = None) -> CheckResult:
    """Which tray backend the daemon would use here and whether it shows a menu; ✓ only with a menu."""
    from vcamd.tray.backends import diagnose_tray

    platform = platform or Platform.here()
    diagnosis = diagnose_tray(platform.environ, platform.system)
    if not diagnosis.available:
        return CheckResult("tray icon", Status.warn, f"not available: {diagnosis.detail}",
                           diagnosis.fix or "use `vcamd run --no-tray` (and `vcamd on/off/status`)")
    if not diagnosis.has_menu:
        return CheckResult("tray icon", Status.warn, diagnosis.detail, diagnosis.fix)
    return ok("tray icon", diagnosis.detail)


def check_config(path: Path | None) -> tuple[CheckResult, Config]:
    """The config check, and the config the other checks use (the defaults when it is invalid)."""
    from vcamd.config import load_config, user_config_path

    try:
        cfg, origin = load_config(path)
    except ConfigError as err:
        return CheckResult("config", Status.fail, f"{err.path}: " + "; ".join(err.problems),
                           f"edit {err.path} (`vcamd config check {err.path}` lists every problem); "
                           "the other checks use the defaults"), Config()
    where = str(origin) if origin else f"defaults (no file at {user_config_path()})"
    return ok("config", f"{where} is valid"), cfg


def check_source_face(cfg: Config) -> CheckResult:
    face = cfg.swap.source_face
    if face is None:
        return CheckResult("source face", Status.warn, "no source face set: nothing to swap in, so "
                           + ("your face shows unchanged ([swap] on_miss = \"passthrough\")" if cfg.swap.on_miss == "passthrough"
                              else "faces are hidden (held or blurred)") + " until you choose one",
                           "set [swap] source_face (and source_consent = true), or pick one in the tray's Source face menu "
                           "or on the control page (`vcamd panel`)")
    if not Path(face).is_file():
        return CheckResult("source face", Status.fail, f"[swap] source_face = {face} does not exist",
                           "fix the path in the config file")
    from vcamd.images import read_image

    try:
        image = read_image(face, "[swap] source_face")  # a file that is there but not a photo fails the run just the same
    except VcamdError as err:
        return CheckResult("source face", Status.fail, err.message, err.fix or "use a JPEG or PNG photo")
    if not cfg.swap.source_consent:
        return CheckResult("source face", Status.warn,
                           f"{face}: [swap] source_consent is not set, so `vcamd run` (and the start-up service) refuses to start "
                           "without --i-have-consent",
                           "once you have the consent of the person in the photo, set `source_consent = true` under [swap]")
    return ok("source face", f"{face} ({image.shape[1]}×{image.shape[0]})")


def check_control_socket(directory: Path | None = None) -> tuple[CheckResult, dict | None]:
    """The daemon check, and the daemon's status when it answers."""
    from vcamd.control.client import ControlClient
    from vcamd.control.protocol import ControlError, DaemonNotRunning

    name = "daemon"
    try:
        status = ControlClient(directory, timeout_s=3.0).status()
    except DaemonNotRunning as err:
        return CheckResult(name, Status.warn, err.message,
                           "start it: `vcamd run`, or `vcamd service install` to start it with your session"), None
    except (ControlError, OSError) as err:
        return CheckResult(name, Status.fail, f"the control socket does not answer: {err}",
                           "restart the daemon (`vcamd quit`, then `vcamd run`); see its log"), None
    state = status.get("state", "?")
    swap = "on" if status.get("enabled") else "off"
    detail = f"running ({state}), swap {swap}, control socket answers"
    if status.get("config_error"):
        return CheckResult(name, Status.warn, f"{detail}; it rejected the last config edit: {status['config_error']}",
                           "fix the config file; the daemon keeps the last good config until then"), status
    return ok(name, detail), status


# ---------------------------------------------------------------------------------------------


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
    results.append(check_source_face(cfg))
    results.append(check_camera(cfg.camera, daemon_status, platform))
    results.append(check_virtual_camera(cfg.virtual_camera, platform=platform))
    results.append(check_tray(platform))
    results.append(daemon_result)
    return results


def report(results: Sequence[CheckResult], encoding: str | None = None) -> str:
    """The printed report; ASCII marks when the console cannot print ✓/✗ (old Windows consoles)."""
    marks = MARKS
    try:
        "".join(MARKS.values()).encode(encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        marks = ASCII_MARKS
    lines = [r.line(marks) for r in results]
    counts = {s: sum(1 for r in results if r.status is s) for s in Status}
    lines.append(f"\n{len(results)} checks: {counts[Status.ok]} ok, {counts[Status.warn]} warnings, {counts[Status.fail]} failed")
    return "\n".join(lines)


def exit_code(results: Sequence[CheckResult]) -> int:
    return 1 if any(r.status is Status.fail for r in results) else 0

"""The camera (opens and delivers a frame) and the virtual camera (v4l2loopback on Linux, OBS or
Unity Capture on Windows, OBS's camera extension on macOS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcamd.config.schema import CameraConfig, VirtualCameraConfig
from vcamd.doctor.platform import Platform
from vcamd.doctor.results import CheckResult, Status, ok
from vcamd.system import v4l2loopback


def check_camera(camera: CameraConfig, daemon_status: dict[str, Any] | None = None, platform: Platform | None = None) -> CheckResult:
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
        capture = cv2.VideoCapture(target)  # opened the way the daemon opens it (vcamd.live.capture.sources)
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

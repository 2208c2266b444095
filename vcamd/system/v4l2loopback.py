"""The virtual camera device outside vcamd: what we know about v4l2loopback, and its setup elsewhere.

Linux: the device is a v4l2loopback node found by its card label in sysfs; the module options
FaceLive Camera uses are the packaged modprobe.d file (`vcamd service install` prints the commands
that install it); a missing device is one error with the exact command that creates it.
Windows and macOS have no loopback device of their own: `setup_fix(system, name)` says how to get
OBS's (or Unity Capture's) virtual camera instead.

Used by the virtual-camera sink, `vcamd doctor` and `vcamd service`; imports nothing heavy.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from vcamd.common.errors import VcamdError
from vcamd.system.packaged import packaged_path, packaged_text

SYSFS = Path("/sys")
MODULE = "v4l2loopback"
CONF_NAME = "facelive-v4l2loopback.conf"
"""File name of both the modprobe.d (options) and the modules-load.d (load at boot) files."""
MODPROBE_CONF = f"modprobe.d-{CONF_NAME}"
MODULES_LOAD_CONF = f"modules-load.d-{CONF_NAME}"
"""The packaged copies of those two files (vcamd/data/service/)."""

INSTALL_MODULE = "sudo apt install v4l2loopback-dkms"
"""Debian/Ubuntu: the package that builds the module for the running kernel."""

SECURE_BOOT_HINT = (
    "if modprobe answers 'Key was rejected by service' or 'Operation not permitted', Secure Boot refuses the "
    "unsigned module: enrol the DKMS signing key (`sudo mokutil --import /var/lib/dkms/mok.pub`, reboot, confirm "
    "in the blue MOK screen) or turn Secure Boot off"
)
CONTAINER_HINT = (
    "in a container (it has no kernel modules of its own) load the module on the host and pass /dev/video10 in, "
    "or run without a virtual camera: `vcamd run --sink preview` (a local page) or `--sink file:out.mp4`"
)
RESTART_APPS_HINT = "restart Zoom, Teams or the browser once the camera is there: apps list cameras only when they start"


# -- the packaged module options -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopbackOptions:
    """The v4l2loopback module options FaceLive Camera uses (from the packaged modprobe.d file)."""

    options: dict[str, str]

    @property
    def video_nr(self) -> int:
        return int(self.options["video_nr"])

    @property
    def card_label(self) -> str:
        return self.options["card_label"]

    @property
    def device(self) -> str:
        return f"/dev/video{self.video_nr}"

    def modprobe_args(self) -> str:
        """`devices=1 video_nr=10 card_label="FaceLive Camera" exclusive_caps=1` (shell-ready)."""
        return " ".join(f'{k}="{v}"' if " " in v else f"{k}={v}" for k, v in self.options.items())

    def labelled(self, name: str) -> LoopbackOptions:
        """The same options with the device labelled `name` ([virtual_camera] name)."""
        return LoopbackOptions({**self.options, "card_label": name})


def parse_modprobe_options(text: str, module: str = MODULE) -> LoopbackOptions:
    """Read the `options MODULE k=v ...` line of a modprobe.d file (values may be double-quoted)."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line)
        if words[:2] == ["options", module]:
            pairs = {}
            for word in words[2:]:
                key, sep, value = word.partition("=")
                if not sep:
                    raise VcamdError(f"modprobe option {word!r} has no value", fix="write key=value")
                pairs[key] = value
            return LoopbackOptions(pairs)
    raise VcamdError(f"no `options {module} ...` line in the modprobe.d file", fix="restore it from service/modprobe.d")


def loopback_options() -> LoopbackOptions:
    """The options of the packaged modprobe.d file."""
    return parse_modprobe_options(packaged_text(MODPROBE_CONF))


def modprobe_command(name: str) -> str:
    """The command that creates the device labelled `name` now (exclusive_caps=1 makes Chrome and Zoom list it)."""
    return f"sudo modprobe {MODULE} {loopback_options().labelled(name).modprobe_args()}"


def load_commands() -> list[str]:
    """The root commands that load the module with FaceLive's options now and at every boot."""
    return [
        f"sudo cp {shlex.quote(str(packaged_path(MODPROBE_CONF)))} /etc/modprobe.d/{CONF_NAME}",
        f"sudo cp {shlex.quote(str(packaged_path(MODULES_LOAD_CONF)))} /etc/modules-load.d/{CONF_NAME}",
        f"sudo modprobe {MODULE} {loopback_options().modprobe_args()}",
    ]


# -- what the kernel has (sysfs) -------------------------------------------------------------------


def list_video_devices(sysfs_root: Path = SYSFS) -> list[tuple[str, str]]:
    """(/dev/videoN, card label) for every video device the kernel knows, in device-number order."""
    class_dir = sysfs_root / "class" / "video4linux"
    if not class_dir.is_dir():
        return []
    found: list[tuple[int, str, str]] = []
    for entry in class_dir.iterdir():
        suffix = entry.name.removeprefix("video")
        if not entry.name.startswith("video") or not suffix.isdigit():
            continue
        try:
            label = (entry / "name").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue  # a device that vanished while we looked
        found.append((int(suffix), f"/dev/{entry.name}", label))
    return [(dev, label) for _, dev, label in sorted(found)]


def find_loopback_device(name: str, sysfs_root: Path = SYSFS) -> str | None:
    """The /dev/videoN whose card label is exactly `name` (the v4l2loopback card_label), or None."""
    for device, label in list_video_devices(sysfs_root):
        if label == name:
            return device
    return None


def module_loaded(sysfs_root: Path = SYSFS) -> bool:
    return (sysfs_root / "module" / MODULE).is_dir()


def devices_text(devices: list[tuple[str, str]], quote: str = "'") -> str:
    """`/dev/video0 'Integrated Camera', …` or `none`."""
    return ", ".join(f"{dev} {quote}{label}{quote}" for dev, label in devices) or "none"


# -- the errors and fixes users read ------------------------------------------------------------


def missing_device_error(name: str, sysfs_root: Path = SYSFS) -> VcamdError:
    """The error for "no v4l2loopback device labelled `name`", with the exact command that fixes it."""
    reload_hint = (
        f"{MODULE} is already loaded without it, so first run `sudo modprobe -r {MODULE}`, then "
        if module_loaded(sysfs_root)
        else ""
    )
    return VcamdError(
        f"no {MODULE} device labelled '{name}' found (video devices present: {devices_text(list_video_devices(sysfs_root))})",
        fix=(
            f"{reload_hint}create it with: {modprobe_command(name)} "
            f"(Debian/Ubuntu: `{INSTALL_MODULE}` if modprobe cannot find the module; {SECURE_BOOT_HINT}); "
            "run `vcamd service install` to make it permanent across reboots; "
            f"or set [virtual_camera] device to an existing loopback device; {CONTAINER_HINT}; {RESTART_APPS_HINT}"
        ),
    )


def missing_configured_device_error(device: str, name: str) -> VcamdError:
    """[virtual_camera] device names a node that is not there."""
    return VcamdError(
        f"[virtual_camera] device {device} does not exist",
        fix=f"create it with: {modprobe_command(name)} (and `vcamd service install` to make it permanent), "
        "or clear [virtual_camera] device to find the device labelled by [virtual_camera] name",
    )


def load_fix() -> str:
    """Install, load now and at boot (the lines `vcamd service install` prints), then the notes."""
    return " && ".join([INSTALL_MODULE, *load_commands()]) + f". {SECURE_BOOT_HINT[:1].upper()}{SECURE_BOOT_HINT[1:]}; {CONTAINER_HINT}. Then {RESTART_APPS_HINT}"


def relabel_fix() -> str:
    """The module is loaded with other options: unload it and load it with FaceLive's."""
    return f"sudo modprobe -r {MODULE} && sudo modprobe {MODULE} {loopback_options().modprobe_args()}, then {RESTART_APPS_HINT}"


def setup_fix(system: str, name: str) -> str:
    """How to get a virtual camera pyvirtualcam can open on `system` (platform.system() spelling).

    Windows and macOS have no loopback device of their own: pyvirtualcam writes to OBS Studio's
    virtual camera (both) or to Unity Capture (Windows), which must be installed and registered once.
    """
    if system == "Windows":
        return (
            "install OBS Studio 26 or newer (obsproject.com), start it once, click Start Virtual Camera, then Stop "
            "Virtual Camera and close OBS, so its camera driver is registered; or install Unity Capture "
            "(github.com/schellingb/UnityCapture, Install.bat as administrator) and set [virtual_camera] backend = "
            "\"unitycapture\"; OBS has one virtual camera, so OBS itself must not be running it at the same time; "
            f"{RESTART_APPS_HINT}; apps list it as 'OBS Virtual Camera' (Unity Capture: 'Unity Video Capture')"
        )
    if system == "Darwin":
        return (
            "install OBS Studio 30 or newer (obsproject.com), start it, click Start Virtual Camera and allow its camera "
            "extension when macOS asks (System Settings → Privacy & Security → Allow), then Stop Virtual Camera and quit "
            f"OBS; OBS itself must not be running its virtual camera at the same time; {RESTART_APPS_HINT}; "
            "apps list it as 'OBS Virtual Camera'"
        )
    if system == "Linux":
        return f"create the {MODULE} device: {modprobe_command(name)} (see `vcamd doctor`)"
    return f"no virtual camera backend is known for {system}: use --sink preview or --sink file:PATH.mp4"


def backends_text(system: str, name: str) -> str:
    """What the user can install on this platform and what apps will list the camera as."""
    if system == "Windows":
        return (
            "Windows backends: OBS Virtual Camera (install OBS Studio 26+ and start its Virtual Camera once; "
            "apps list it as 'OBS Virtual Camera') or Unity Capture (apps list it as 'Unity Video Capture', or as "
            f"'{name}' if you register it under that name and set [virtual_camera] backend = \"unitycapture\" "
            f"and device = \"{name}\")"
        )
    if system == "Darwin":
        return (
            "macOS backend: OBS Virtual Camera (install OBS Studio 30+ and start its Virtual Camera once so macOS "
            f"approves the camera extension); apps list it as 'OBS Virtual Camera' — macOS does not let us call it '{name}'"
        )
    if system == "Linux":
        return f"Linux backend: {MODULE}; apps list the device by its card_label '{name}'"
    return f"no virtual camera backend is known for {system}; use --sink preview or --sink file:PATH.mp4"


# -- the device check (`vcamd doctor`, `vcamd service status`) -----------------------------------


@dataclass(frozen=True, slots=True)
class DeviceCheck:
    """Whether the device [virtual_camera] asks for is there and writable; `fix` when it is not."""

    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{'✓' if self.ok else '✗'} virtual camera: {self.detail}"
        return text if self.ok else f"{text}\n    fix: {self.fix}"


def check_device(name: str, device: str = "", sysfs_root: Path = SYSFS, dev_dir: Path = Path("/dev")) -> DeviceCheck:
    """Linux: the device labelled `name` ([virtual_camera] name), or `device` when one is configured."""
    devices = list_video_devices(sysfs_root)
    labels = dict(devices)
    if device:
        label = labels.get(device)
        if label is None and (dev_dir / Path(device).name).exists():
            # It is there, but the kernel lists no such video device: a typo like /dev/null or /dev/vide10.
            labelled = next((d for d, n in devices if n == name), None)
            fix = (f'set [virtual_camera] device = "{labelled}" (labelled "{name}")' if labelled
                   else "set [virtual_camera] device to the v4l2loopback device") + ", or leave it empty to find it by name"
            return DeviceCheck(False, f"[virtual_camera] device = {device} is not a video device "
                               f"(video devices: {devices_text(devices, quote=chr(34))})", fix)
        if label is None:
            return DeviceCheck(False, f"[virtual_camera] device = {device} does not exist", load_fix())
        matches = [(device, label)]
    else:
        matches = [(dev, label) for dev, label in devices if label == name]
    if not matches:
        if not module_loaded(sysfs_root):
            return DeviceCheck(False, f"{MODULE} is not loaded: no \"{name}\" device", load_fix())
        return DeviceCheck(False, f"{MODULE} is loaded but no device is labelled \"{name}\" "
                           f"(devices: {devices_text(devices, quote=chr(34))})", relabel_fix())
    found, label = matches[0]
    node = dev_dir / Path(found).name
    if not os.access(node, os.W_OK):
        return DeviceCheck(False, f"{found} (\"{label}\") is not writable by you",
                           f"sudo usermod -aG video $USER, then log out and in (or check the permissions of {found})")
    return DeviceCheck(True, f"{found} is \"{label}\"")

"""Start FaceLive Camera with the user's session: install, remove and report the start-up entry.

One mode at a time, because two daemons would fight over the camera and the control socket:

- Linux, headless (default): the systemd user unit `facelive.service` (`vcamd run --no-tray`,
  restart on failure, logs in the journal). A user service runs outside the desktop session, with
  no DISPLAY, so it cannot show a tray icon.
- Linux, with the tray (`--tray`): the XDG autostart entry `facelive-tray.desktop`, started by the
  desktop at log-in (`vcamd run`, tray icon included).
- macOS: the launch agent `ai.facelive.vcamd.plist` (runs in the GUI session, tray included).
- Windows: `facelive-startup.vbs` in the Startup folder (no console window, tray included).

The templates live in `service/` (packaged as `vcamd/data/service/`); installing fills in the
command of the Python environment vcamd runs from. Loading v4l2loopback needs root: it is printed
as the one step the user has to run, never attempted.

All locations follow XDG_CONFIG_HOME / HOME / APPDATA, so tests install into a tmp dir.
"""

from __future__ import annotations

import os
import plistlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PureWindowsPath

from vcamd.common.errors import VcamdError
from vcamd.files.private_files import private_parent, write_private_atomic
from vcamd.system import v4l2loopback
from vcamd.system.packaged import packaged_text

UNIT_NAME = "facelive.service"
DESKTOP_NAME = "facelive-tray.desktop"
PLIST_NAME = "ai.facelive.vcamd.plist"
PLIST_LABEL = "ai.facelive.vcamd"
WINDOWS_STARTUP_NAME = "facelive-startup.vbs"


class Mode(StrEnum):
    systemd = "systemd"
    autostart = "autostart"
    launchd = "launchd"
    windows_startup = "windows-startup"


def default_mode(tray: bool, platform: str = sys.platform) -> Mode:
    if platform == "darwin":
        return Mode.launchd
    if platform == "win32":
        return Mode.windows_startup
    return Mode.autostart if tray else Mode.systemd


# ---------------------------------------------------------------------------------------------
# Rendering the entries with this environment's command


def daemon_command(tray: bool) -> list[str]:
    """How to start the daemon from this Python environment (works in a venv, pipx or system-wide)."""
    return [sys.executable, "-m", "vcamd", "run", *([] if tray else ["--no-tray"])]


def _systemd_quote(word: str) -> str:
    # systemd expands %-specifiers in ExecStart, so a literal % is written %%; quote words with spaces.
    word = word.replace("%", "%%")
    if re.search(r'[\s"\\]', word):
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def _desktop_quote(word: str) -> str:
    # Desktop Entry spec: quote with "…" when needed, escaping " ` $ \ inside; a literal % is %%.
    word = word.replace("%", "%%")
    if re.search(r'[\s"\'\\><~|&;$*?#()`]', word):
        return '"' + re.sub(r'(["`$\\])', r"\\\1", word) + '"'
    return word


def _replace_line(text: str, key: str, value: str, template: str) -> str:
    pattern = re.compile(rf"^{re.escape(key)}=.*$", re.MULTILINE)
    if len(pattern.findall(text)) != 1:
        raise VcamdError(f"packaged {template} must have exactly one {key}= line", fix="reinstall vcamd")
    return pattern.sub(lambda _m: f"{key}={value}", text)


def render_unit(command: Sequence[str]) -> str:
    return _replace_line(packaged_text(UNIT_NAME), "ExecStart", " ".join(map(_systemd_quote, command)), UNIT_NAME)


def render_desktop_entry(command: Sequence[str]) -> str:
    return _replace_line(packaged_text(DESKTOP_NAME), "Exec", " ".join(map(_desktop_quote, command)), DESKTOP_NAME)


def render_plist(command: Sequence[str], log_file: Path) -> bytes:
    agent = plistlib.loads(packaged_text(PLIST_NAME).encode("utf-8"))
    agent["ProgramArguments"] = list(command)
    agent["StandardErrorPath"] = str(log_file)
    agent["StandardOutPath"] = str(log_file)
    return plistlib.dumps(agent)


def windows_command_line(command: Sequence[str], log_file: PureWindowsPath | Path) -> str:
    """The cmd.exe line the start-up script runs: the daemon, with its stderr appended to `log_file`.

    python.exe, not pythonw.exe: pythonw has no stderr at all, so an error before logging starts
    (an invalid config) would vanish. The script hides cmd's console window instead.
    `cmd /c ""prog" args 2>>"log""`: cmd strips the outer pair of quotes and runs the rest.
    """
    inner = subprocess.list2cmdline([str(word) for word in command]) + f' 2>>"{log_file}"'
    return f'cmd /c "{inner}"'


def render_windows_startup(command: Sequence[str], log_file: PureWindowsPath | Path) -> str:
    # VBScript string literal: "" is a literal quote. Window style 0 = hidden; False = do not wait.
    literal = '"' + windows_command_line(command, log_file).replace('"', '""') + '"'
    text = packaged_text(WINDOWS_STARTUP_NAME)
    pattern = re.compile(r'^shell\.Run .*$', re.MULTILINE)
    if len(pattern.findall(text)) != 1:
        raise VcamdError(f"packaged {WINDOWS_STARTUP_NAME} must have one shell.Run line", fix="reinstall vcamd")
    return pattern.sub(lambda _m: f"shell.Run {literal}, 0, False", text).replace("\r\n", "\n").replace("\n", "\r\n")


# ---------------------------------------------------------------------------------------------
# Where things go


@dataclass(frozen=True, slots=True)
class ServicePaths:
    systemd_user_dir: Path
    autostart_dir: Path
    launch_agents_dir: Path
    mac_log_dir: Path
    windows_startup_dir: Path
    windows_log_dir: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServicePaths:
        env = os.environ if environ is None else environ
        home = Path(env.get("HOME") or Path.home())
        config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
        appdata = Path(env["APPDATA"]) if env.get("APPDATA") else home / "AppData" / "Roaming"
        local_appdata = Path(env["LOCALAPPDATA"]) if env.get("LOCALAPPDATA") else home / "AppData" / "Local"
        return cls(
            systemd_user_dir=config / "systemd" / "user",
            autostart_dir=config / "autostart",
            launch_agents_dir=home / "Library" / "LaunchAgents",
            mac_log_dir=home / "Library" / "Logs" / "FaceLive",
            windows_startup_dir=appdata / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Startup",
            # platformdirs' user_state_dir on Windows (author = app name): where the daemon's vcamd.log is too.
            windows_log_dir=local_appdata / "facelive" / "facelive",
        )

    def entry(self, mode: Mode) -> Path:
        return {
            Mode.systemd: self.systemd_user_dir / UNIT_NAME,
            Mode.autostart: self.autostart_dir / DESKTOP_NAME,
            Mode.launchd: self.launch_agents_dir / PLIST_NAME,
            Mode.windows_startup: self.windows_startup_dir / WINDOWS_STARTUP_NAME,
        }[mode]


def modes_for(platform: str = sys.platform) -> tuple[Mode, ...]:
    if platform == "darwin":
        return (Mode.launchd,)
    if platform == "win32":
        return (Mode.windows_startup,)
    return (Mode.systemd, Mode.autostart)


# ---------------------------------------------------------------------------------------------
# Service managers


class Systemctl:
    """`systemctl --user`, when a user manager is reachable."""

    def __init__(self, executable: str = "systemctl", env: Mapping[str, str] | None = None) -> None:
        self.executable = executable
        self.env = dict(os.environ if env is None else env)
        self._available: tuple[bool, str] | None = None

    def available(self) -> tuple[bool, str]:
        """Whether `systemctl --user` reaches a user manager (asked once per Systemctl)."""
        if self._available is None:
            self._available = self._probe()
        return self._available

    def _probe(self) -> tuple[bool, str]:
        if shutil.which(self.executable, path=self.env.get("PATH")) is None:
            return False, f"{self.executable} not found"
        done = self._run("show-environment")
        if done.returncode != 0:
            return False, (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return True, "systemd user manager reachable"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self._run(*args)
        if done.returncode != 0:
            raise VcamdError(
                f"`systemctl --user {' '.join(args)}` failed: {done.stderr.strip()}",
                fix="see `journalctl --user -u facelive` and `systemctl --user status facelive`",
            )
        return done

    def query(self, *args: str) -> str:
        """Output of a query like is-active / is-enabled (non-zero exit is an answer, not an error)."""
        done = self._run(*args)
        return (done.stdout.strip() or done.stderr.strip()).splitlines()[0] if (done.stdout or done.stderr) else ""

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.executable, "--user", *args], capture_output=True, text=True, env=self.env, timeout=30, check=False
        )


# ---------------------------------------------------------------------------------------------
# Install / uninstall / status


@dataclass
class Report:
    """What a service command did, as lines to print, and what the user still has to run."""

    done: list[str]
    todo: list[str]

    def lines(self) -> list[str]:
        out = list(self.done)
        if self.todo:
            out += ["", "Run yourself:"] + [f"  {line}" for line in self.todo]
        return out


def root_step(platform: str = sys.platform) -> list[str]:
    """The step that needs root and that vcamd never does itself: the v4l2loopback module."""
    if platform in ("darwin", "win32"):
        from vcamd.config.schema import VirtualCameraConfig

        system = "Darwin" if platform == "darwin" else "Windows"
        return ["The virtual camera is OBS's" + (" or Unity Capture's" if system == "Windows" else "") + ": "
                + v4l2loopback.setup_fix(system, VirtualCameraConfig().name)]
    options = v4l2loopback.loopback_options()
    return [
        "One step needs root, vcamd does not do it: load v4l2loopback with the FaceLive options, now and at boot",
        f"(Debian/Ubuntu: `{v4l2loopback.INSTALL_MODULE}` first):",
        *(f"  {command}" for command in v4l2loopback.load_commands()),
        f"(Then {options.device} is the \"{options.card_label}\" camera in call apps.)",
    ]


def _write(path: Path, data: str | bytes) -> None:
    """0600 under a fresh temporary name, renamed into place: never through a symlink, whatever the umask."""
    try:
        private_parent(path)
        write_private_atomic(path, data)
    except OSError as exc:
        raise VcamdError(
            f"cannot write the start-up entry {path}: {exc.strerror}",
            fix=f"make {path.parent} a folder you can write to (check XDG_CONFIG_HOME / HOME)",
        ) from None


def install(
    mode: Mode,
    paths: ServicePaths,
    command: Sequence[str],
    systemctl: Systemctl | None = None,
    platform: str = sys.platform,
) -> Report:
    """Write the start-up entry for `mode` (removing the other mode's), and start it when possible."""
    if mode not in modes_for(platform):
        raise VcamdError(f"service mode {mode} is not available on {platform}", fix=f"use one of {', '.join(modes_for(platform))}")
    ctl = systemctl or Systemctl()
    report = Report([], [])
    for other in modes_for(platform):
        if other is not mode and paths.entry(other).exists():
            removed = uninstall_mode(other, paths, ctl)
            report.done += removed.done
            report.todo += removed.todo
    target = paths.entry(mode)
    if mode is Mode.systemd:
        _write(target, render_unit(command))
        report.done.append(f"wrote {target}")
        commands = [("daemon-reload",), ("enable", "--now", UNIT_NAME)]
        ok, why = ctl.available()
        if ok:
            for args in commands:
                ctl.run(*args)
                report.done.append(f"ran systemctl --user {' '.join(args)}")
            report.done.append(f"logs: journalctl --user -u {UNIT_NAME.removesuffix('.service')} -f")
        else:
            report.done.append(f"systemctl --user is not usable here ({why})")
            report.todo += [f"systemctl --user {' '.join(args)}" for args in commands]
    elif mode is Mode.autostart:
        _write(target, render_desktop_entry(command))
        report.done.append(f"wrote {target}: FaceLive Camera starts with the tray at your next log-in")
        report.todo.append(" ".join(shlex.quote(w) for w in command) + " &   # to start it now")
    elif mode is Mode.launchd:
        _write(target, render_plist(command, paths.mac_log_dir / "vcamd.log"))
        paths.mac_log_dir.mkdir(parents=True, exist_ok=True)
        report.done.append(f"wrote {target}")
        report.todo.append(f"launchctl bootstrap gui/$(id -u) {shlex.quote(str(target))}")
    else:
        log_file = paths.windows_log_dir / "vcamd-startup.log"
        _write(target, render_windows_startup(command, log_file))
        paths.windows_log_dir.mkdir(parents=True, exist_ok=True)
        report.done.append(f"wrote {target}: FaceLive Camera starts with the tray at your next log-on")
        report.done.append(f"start-up errors go to {log_file}")
        report.todo.append(f'wscript "{target}"   # to start it now')
    report.todo += root_step(platform)
    return report


def uninstall_mode(mode: Mode, paths: ServicePaths, systemctl: Systemctl | None = None) -> Report:
    ctl = systemctl or Systemctl()
    report = Report([], [])
    target = paths.entry(mode)
    if mode is Mode.systemd:
        ok, why = ctl.available()
        if ok and target.exists():
            ctl.run("disable", "--now", UNIT_NAME)
            report.done.append(f"ran systemctl --user disable --now {UNIT_NAME}")
        elif target.exists():
            report.todo.append(f"systemctl --user disable --now {UNIT_NAME}   # ({why})")
    if mode is Mode.launchd and target.exists():
        report.todo.append(f"launchctl bootout gui/$(id -u)/{PLIST_LABEL}")
    if target.exists():
        target.unlink()
        report.done.append(f"removed {target}")
    if mode is Mode.systemd and report.done and ctl.available()[0]:
        ctl.run("daemon-reload")
    return report


def uninstall(paths: ServicePaths, systemctl: Systemctl | None = None, platform: str = sys.platform) -> Report:
    report = Report([], [])
    for mode in modes_for(platform):
        part = uninstall_mode(mode, paths, systemctl)
        report.done += part.done
        report.todo += part.todo
    if not report.done and not report.todo:
        report.done.append("nothing installed")
    return report


def status(paths: ServicePaths, systemctl: Systemctl | None = None, platform: str = sys.platform) -> tuple[bool, list[str]]:
    """(installed?, lines): which entry is installed and, for systemd, whether it runs."""
    lines = []
    installed = False
    for mode in modes_for(platform):
        target = paths.entry(mode)
        if not target.exists():
            lines.append(f"{mode}: not installed ({target})")
            continue
        installed = True
        line = f"{mode}: installed ({target})"
        if mode is Mode.systemd:
            ctl = systemctl or Systemctl()
            ok, why = ctl.available()
            if ok:
                line += f"; {ctl.query('is-enabled', UNIT_NAME)}, {ctl.query('is-active', UNIT_NAME)}"
            else:
                line += f"; state unknown ({why})"
        lines.append(line)
    if platform.startswith("linux"):
        from vcamd.config.schema import VirtualCameraConfig

        lines.append(v4l2loopback.check_device(VirtualCameraConfig().name).line())
    return installed, lines

"""Service files and `vcamd service install|uninstall|status`, into tmp XDG dirs.

The systemd unit is checked by systemd's own `systemd-analyze verify --user` (with a tmp
XDG_RUNTIME_DIR, so it works in a container without a user session), plus key-by-key checks.
The CLI tests run `vcamd` as a subprocess with no reachable user bus, so they can never touch a
real systemd user manager; the path where systemctl works is tested with a stand-in systemctl
script that records its arguments.
"""

from __future__ import annotations

import configparser
import os
import plistlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.cli import one_clear_line
from support.cli import run_vcamd as run_cli

from vcamd.common.errors import VcamdError
from vcamd.system import service, v4l2loopback
from vcamd.system.packaged import packaged_text

REPO = Path(__file__).resolve().parents[1]
VCAMD = [sys.executable, "-m", "vcamd"]


def isolated_env(tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_RUNTIME_DIR": str(runtime), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/no-bus"}
    return env


def unit_sections(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True, delimiters=("=",))
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(text)
    return parser


def systemd_verify(unit: Path) -> subprocess.CompletedProcess[str]:
    # A short runtime dir of its own: systemd reads the user's socket units (gpg-agent's) with
    # their sockets in it, and a socket path over 108 bytes — under a deep pytest folder, e.g. a
    # parallel worker's — is an error of those units, not of ours.
    with tempfile.TemporaryDirectory(prefix="vrt-", dir="/tmp") as runtime:
        return subprocess.run(["systemd-analyze", "verify", "--user", str(unit)], capture_output=True, text=True,
                              env={**os.environ, "XDG_RUNTIME_DIR": runtime}, timeout=60)


def test_packaged_files_are_the_repository_service_files():
    for packaged, original in [
        ("facelive.service", "facelive.service"),
        ("facelive-tray.desktop", "facelive-tray.desktop"),
        ("ai.facelive.vcamd.plist", "ai.facelive.vcamd.plist"),
        ("facelive-startup.vbs", "facelive-startup.vbs"),
        ("modprobe.d-facelive-v4l2loopback.conf", "modprobe.d/facelive-v4l2loopback.conf"),
        ("modules-load.d-facelive-v4l2loopback.conf", "modules-load.d/facelive-v4l2loopback.conf"),
    ]:
        assert service.packaged_text(packaged) == (REPO / "service" / original).read_text(encoding="utf-8")


def test_rendered_unit_has_the_restart_policy_and_the_headless_command():
    unit = unit_sections(service.render_unit(service.daemon_command(tray=False)))
    assert unit.sections() == ["Unit", "Service", "Install"]
    assert unit["Service"]["ExecStart"] == f"{sys.executable} -m vcamd run --no-tray"
    assert unit["Service"]["Restart"] == "on-failure"
    assert float(unit["Service"]["RestartSec"]) > 0
    assert unit["Service"]["RestartPreventExitStatus"] == "2"
    assert unit["Install"]["WantedBy"] == "default.target"
    assert "FaceLive Camera" in unit["Unit"]["Description"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (apt-get install systemd)")
def test_unit_passes_systemd_analyze_verify(tmp_path):
    # A python path with a space and a % exercises the ExecStart quoting and %-escaping.
    odd_dir = tmp_path / "my env"
    odd_dir.mkdir()
    odd_python = odd_dir / "py%thon"
    odd_python.symlink_to(sys.executable)
    for command in (service.daemon_command(tray=False), [str(odd_python), "-m", "vcamd", "run", "--no-tray"]):
        unit = tmp_path / "facelive.service"
        unit.write_text(service.render_unit(command))
        done = systemd_verify(unit)
        assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
    assert 'ExecStart="' + str(odd_python).replace("%", "%%") + '" -m vcamd run --no-tray' in unit.read_text()
    # The same verification does catch a broken unit (it is not a check that cannot fail).
    unit.write_text(unit.read_text().replace("Restart=on-failure", "Restart=on-failure\nRestartEvery=3"))
    assert "Unknown key 'RestartEvery'" in systemd_verify(unit).stderr


def test_modprobe_and_modules_load_files():
    options = v4l2loopback.parse_modprobe_options(packaged_text(v4l2loopback.MODPROBE_CONF))
    assert options.options == {"devices": "1", "video_nr": "10", "card_label": "FaceLive Camera", "exclusive_caps": "1"}
    assert options.device == "/dev/video10"
    assert options.modprobe_args() == 'devices=1 video_nr=10 card_label="FaceLive Camera" exclusive_caps=1'
    load = packaged_text(v4l2loopback.MODULES_LOAD_CONF)
    assert [line for line in load.splitlines() if line.strip() and not line.startswith("#")] == ["v4l2loopback"]
    with pytest.raises(VcamdError, match="no `options v4l2loopback"):
        v4l2loopback.parse_modprobe_options("# nothing here\n")


def test_launchd_plist_parses_and_runs_this_environment(tmp_path):
    shipped = plistlib.loads(service.packaged_text("ai.facelive.vcamd.plist").encode())
    assert shipped["Label"] == "ai.facelive.vcamd"
    assert shipped["ProgramArguments"][1:] == ["-m", "vcamd", "run"]  # the venv's python, with the tray
    command = service.daemon_command(tray=True)
    agent = plistlib.loads(service.render_plist(command, tmp_path / "vcamd.log"))
    assert agent["Label"] == service.PLIST_LABEL
    assert agent["ProgramArguments"] == command and "--no-tray" not in command
    assert agent["RunAtLoad"] is True
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["ThrottleInterval"] >= 10  # a config error (exit 2) is not retried in a tight loop
    assert agent["LimitLoadToSessionType"] == "Aqua"  # GUI sessions only: tray and camera need one
    assert agent["StandardErrorPath"] == agent["StandardOutPath"] == str(tmp_path / "vcamd.log")
    plutil = shutil.which("plutil")
    if plutil:  # macOS's own checker, where there is one
        rendered = tmp_path / service.PLIST_NAME
        rendered.write_bytes(service.render_plist(command, tmp_path / "vcamd.log"))
        assert subprocess.run([plutil, "-lint", str(rendered)], capture_output=True).returncode == 0


def vbscript_strings(line: str) -> list[str]:
    """The string literals of one VBScript line ("" inside a literal is one quote); fails on an
    unterminated literal, as VBScript would."""
    strings, i = [], 0
    while i < len(line):
        if line[i] == "'":
            break  # a comment
        if line[i] != '"':
            i += 1
            continue
        i += 1
        text = []
        while True:
            assert i < len(line), f"unterminated string literal in: {line}"
            if line[i] == '"' and line[i + 1 : i + 2] == '"':
                text.append('"')
                i += 2
            elif line[i] == '"':
                i += 1
                break
            else:
                text.append(line[i])
                i += 1
        strings.append("".join(text))
    return strings


def cmd_c_argv(command_line: str) -> list[str]:
    """What `cmd /c "…"` runs: cmd drops the outer quote pair; then Windows' argument rules (spaces
    split, quotes group and are removed; no backslash-quote sequences occur in these paths)."""
    assert command_line.startswith('cmd /c "') and command_line.endswith('"')
    inner = command_line[len("cmd /c ") :][1:-1]
    argv, word, quoted = [], [], False
    for char in inner:
        if char == '"':
            quoted = not quoted
        elif char == " " and not quoted:
            if word:
                argv.append("".join(word))
            word = []
        else:
            word.append(char)
    assert not quoted, inner
    return [*argv, "".join(word)] if word else argv


def run_line(script: str) -> str:
    (line,) = [line for line in script.splitlines() if line.startswith("shell.Run ")]
    for other in script.splitlines():
        vbscript_strings(other)  # every line's literals are closed
    assert line.endswith(", 0, False")  # hidden window, do not wait
    (literal,) = vbscript_strings(line)
    return literal


def test_windows_startup_script_runs_this_python_with_a_log_for_early_errors():
    python = r"C:\Users\Ann Lee\facelive\.venv\Scripts\python.exe"
    log = service.PureWindowsPath(r"C:\Users\Ann Lee\AppData\Local\facelive\facelive\vcamd-startup.log")
    script = service.render_windows_startup([python, "-m", "vcamd", "run"], log)
    assert cmd_c_argv(run_line(script)) == [python, "-m", "vcamd", "run", "2>>" + str(log)]
    assert "\r\n" in script and "\n" not in script.replace("\r\n", "")  # Windows line ends
    # The shipped template parses the same way (by hand: the user edits the python.exe path).
    shipped = cmd_c_argv(run_line(service.packaged_text(service.WINDOWS_STARTUP_NAME)))
    assert shipped[0].endswith(r"\.venv\Scripts\python.exe") and shipped[1:4] == ["-m", "vcamd", "run"]
    assert shipped[4].startswith("2>>%TEMP%")  # a folder that exists before vcamd ever ran
    # The parser does catch a broken script (it is not a check that cannot fail).
    with pytest.raises(AssertionError, match="unterminated"):
        vbscript_strings('shell.Run "cmd /c ""x.exe"" run, 0, False')


def test_shipped_desktop_entry_passes_desktop_file_validate():
    if shutil.which("desktop-file-validate") is None:
        pytest.skip("desktop-file-validate not installed (apt-get install desktop-file-utils)")
    path = REPO / "service" / service.DESKTOP_NAME
    done = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "error" not in done.stdout, done.stdout


def test_desktop_entry_runs_with_the_tray(tmp_path):
    text = service.render_desktop_entry(service.daemon_command(tray=True))
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read_string(text)
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application"
    assert desktop["Exec"] == f"{sys.executable} -m vcamd run"
    assert desktop["X-GNOME-Autostart-enabled"] == "true"
    if shutil.which("desktop-file-validate"):
        path = tmp_path / service.DESKTOP_NAME
        path.write_text(text)
        done = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
        assert done.returncode == 0 and "error" not in done.stdout, done.stdout


def run_vcamd(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VCAMD, *args], capture_output=True, text=True, env=env, timeout=60, cwd=REPO)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux modes")
def test_cli_install_status_switch_uninstall(tmp_path):
    env = isolated_env(tmp_path)
    unit = tmp_path / "config" / "systemd" / "user" / "facelive.service"
    desktop = tmp_path / "config" / "autostart" / "facelive-tray.desktop"

    done = run_vcamd(["service", "status"], env)
    assert done.returncode == 1 and "systemd: not installed" in done.stdout

    done = run_vcamd(["service", "install"], env)
    assert done.returncode == 0, done.stderr
    assert unit.is_file()
    assert unit_sections(unit.read_text())["Service"]["ExecStart"].endswith("-m vcamd run --no-tray")
    out = done.stdout
    assert "systemctl --user is not usable here" in out
    assert "systemctl --user daemon-reload" in out and "systemctl --user enable --now facelive.service" in out
    assert 'sudo modprobe v4l2loopback devices=1 video_nr=10 card_label="FaceLive Camera" exclusive_caps=1' in out
    assert "/etc/modprobe.d/facelive-v4l2loopback.conf" in out and "/etc/modules-load.d/facelive-v4l2loopback.conf" in out

    done = run_vcamd(["service", "status"], env)
    assert done.returncode == 0 and f"systemd: installed ({unit})" in done.stdout
    assert "virtual camera" in done.stdout

    # The tray mode replaces the headless one: two daemons must never start.
    done = run_vcamd(["service", "install", "--tray"], env)
    assert done.returncode == 0, done.stderr
    assert desktop.is_file() and not unit.exists()
    assert f"removed {unit}" in done.stdout

    done = run_vcamd(["service", "uninstall"], env)
    assert done.returncode == 0 and f"removed {desktop}" in done.stdout
    assert not desktop.exists() and not unit.exists()
    assert run_vcamd(["service", "status"], env).returncode == 1


def test_install_runs_systemctl_when_the_user_manager_answers(tmp_path):
    # A stand-in for systemctl (the external tool), recording what vcamd asks of it.
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "bin" / "systemctl"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$2" = is-active ] && echo active\n'
                    f'[ "$2" = is-enabled ] && echo enabled\nexit 0\n')
    fake.chmod(0o755)
    ctl = service.Systemctl(str(fake))
    paths = service.ServicePaths.from_env({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    report = service.install(service.Mode.systemd, paths, service.daemon_command(False), ctl, platform="linux")
    assert calls.read_text().splitlines() == ["--user show-environment", "--user daemon-reload",
                                              "--user enable --now facelive.service"]
    assert "ran systemctl --user enable --now facelive.service" in report.done
    assert not any(line.startswith("systemctl") for line in report.todo)
    installed, lines = service.status(paths, ctl, platform="linux")
    assert installed and "systemd: installed" in lines[0] and "enabled, active" in lines[0]
    calls.write_text("")
    service.uninstall(paths, ctl, platform="linux")
    assert calls.read_text().splitlines() == ["--user disable --now facelive.service", "--user daemon-reload"]
    assert not paths.entry(service.Mode.systemd).exists()


def test_install_on_macos_and_windows_write_their_entries(tmp_path):
    paths = service.ServicePaths.from_env({"HOME": str(tmp_path), "APPDATA": str(tmp_path / "AppData")})
    report = service.install(service.Mode.launchd, paths, ["/opt/py/bin/python3", "-m", "vcamd", "run"], platform="darwin")
    agent = plistlib.loads(paths.entry(service.Mode.launchd).read_bytes())
    assert agent["ProgramArguments"] == ["/opt/py/bin/python3", "-m", "vcamd", "run"]
    assert any(line.startswith("launchctl bootstrap gui/") for line in report.todo)
    assert any("OBS" in line for line in report.todo)
    assert any("Privacy & Security" in line for line in report.todo)  # the camera extension approval
    report = service.install(service.Mode.windows_startup, paths, [r"C:\Py\python.exe", "-m", "vcamd", "run"], platform="win32")
    startup = paths.entry(service.Mode.windows_startup)
    assert startup.parent == tmp_path / "AppData" / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Startup"
    log = tmp_path / "AppData" / "Local" / "facelive" / "facelive" / "vcamd-startup.log"
    assert cmd_c_argv(run_line(startup.read_text())) == [r"C:\Py\python.exe", "-m", "vcamd", "run", f"2>>{log}"]
    assert log.parent.is_dir()  # cmd cannot redirect into a missing folder
    assert b"\r\n" in startup.read_bytes()  # Windows line ends
    assert any("Unity Capture" in line for line in report.todo) and any(line.startswith("wscript ") for line in report.todo)
    with pytest.raises(VcamdError, match="not available on linux"):
        service.install(service.Mode.launchd, paths, ["x"], platform="linux")


def test_service_and_doctor_do_not_import_each_other():
    # Both take what they know about v4l2loopback from vcamd.system.v4l2loopback.
    code = ("import sys, importlib; mod = importlib.import_module(sys.argv[1]); "
            "print(sorted(m for m in ('vcamd.doctor', 'vcamd.system.service', 'vcamd.sinks', 'cv2') if m in sys.modules))")
    for module, alone in (("vcamd.system.service", "vcamd.system.service"), ("vcamd.doctor", "vcamd.doctor")):
        out = subprocess.run([sys.executable, "-c", code, module], capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.strip() == str([alone]), out.stdout


def test_root_step_and_the_missing_device_fix_share_the_packaged_options(tmp_path):
    step = "\n".join(service.root_step("linux"))
    for command in v4l2loopback.load_commands():
        assert command in step
    fix = v4l2loopback.missing_device_error("FaceLive Camera", tmp_path).fix
    assert v4l2loopback.modprobe_command("FaceLive Camera") in step and v4l2loopback.modprobe_command("FaceLive Camera") in fix
    assert v4l2loopback.loopback_options().card_label == "FaceLive Camera"


def test_service_install_into_an_unwritable_config_dir_is_one_line(tmp_path):
    # XDG_CONFIG_HOME is a file: the unit's folder cannot be created.
    blocker = tmp_path / "config-is-a-file"
    blocker.write_text("")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(blocker),
           "XDG_RUNTIME_DIR": str(runtime), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/no-bus"}
    one_clear_line(run_cli("service", "install", env=env), str(blocker))
    one_clear_line(run_cli("service", "install", "--tray", env=env), str(blocker))


def service_env(tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_RUNTIME_DIR": str(runtime), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/no-bus"}


def test_service_install_says_the_started_daemon_needs_consent_in_the_config(tmp_path):
    # The installed entry runs `vcamd run` without --i-have-consent: with no consent in the user
    # config it runs with swapping off (and refuses `vcamd on`) — install must say so instead of
    # looking done.
    env = service_env(tmp_path)
    proc = run_cli("service", "install", env=env)
    assert proc.returncode == 0, proc.stderr
    config = tmp_path / "config" / "facelive" / "config.toml"
    assert "source_consent = true" in proc.stdout and str(config) in proc.stdout and "swapping off" in proc.stdout
    config.parent.mkdir(parents=True)
    config.write_text("[swap]\nsource_consent = true\n")
    proc = run_cli("service", "install", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "source_consent" not in proc.stdout
    config.write_text("[swap]\nsource_consent = maybe\n")
    proc = run_cli("service", "install", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"fix {config}" in proc.stdout and "invalid TOML" in proc.stdout

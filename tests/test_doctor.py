"""`vcamd doctor` checks on this machine's real state, and the command as a subprocess.

This machine has no webcam, no v4l2loopback and a CPU-only ONNX Runtime, so several checks are
exercised on their failure path for real; the success paths use real substitutes (a video file
the test writes, a models dir, a live control server on a tmp socket).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd import doctor
from vcamd.config.schema import CameraConfig, Config, ModelsConfig, VirtualCameraConfig
from vcamd.doctor import Status
from vcamd.doctor.camera import OBS_MAC_DAL_PLUGIN, OBS_VIRTUALCAM_CLSID, UNITY_CAPTURE_CLSID
from vcamd.doctor.providers import probe_providers
from vcamd.doctor.results import ok
from vcamd.models.pipeline import build_face_engine
from vcamd.system import v4l2loopback

REPO = Path(__file__).resolve().parents[1]
LOOPBACK_LOADED = Path("/sys/module/v4l2loopback").exists()
MODPROBE = 'sudo modprobe v4l2loopback devices=1 video_nr=10 card_label="FaceLive Camera" exclusive_caps=1'
LINUX = doctor.Platform("linux", {})


@pytest.fixture
def short_dir():
    # A Unix socket path must fit in 108 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="h6doc", dir="/tmp"))
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(bool(list(Path("/dev").glob("video*"))), reason="this machine has video devices")
def test_no_webcam_fails_with_a_fix():
    result = doctor.check_camera(CameraConfig(device="0"))
    assert result.status is Status.fail
    assert "does not open" in result.detail and "no /dev/video* devices here" in result.detail
    assert "plug in the webcam" in result.fix and "[camera] device" in result.fix


def test_camera_from_a_video_file_and_missing_paths(tmp_path):
    video = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 10, (160, 120))
    for i in range(5):
        writer.write(np.full((120, 160, 3), 40 * i, np.uint8))
    writer.release()
    result = doctor.check_camera(CameraConfig(device=str(video)))
    assert result.status is Status.ok and "160×120" in result.detail
    missing = doctor.check_camera(CameraConfig(device=str(tmp_path / "nope.mp4")))
    assert missing.status is Status.fail and "no such file or camera" in missing.detail
    assert doctor.check_camera(CameraConfig(device="synthetic")).status is Status.ok
    # While the daemon runs it holds the camera: its status answers instead of a second open.
    assert doctor.check_camera(CameraConfig(device="0"), {"state": "running", "camera": "live"}).status is Status.ok
    offline = doctor.check_camera(CameraConfig(device="0"), {"state": "offline", "camera": "offline"})
    assert offline.status is Status.fail and "offline" in offline.detail


@pytest.mark.skipif(LOOPBACK_LOADED or not sys.platform.startswith("linux"), reason="v4l2loopback is loaded here")
def test_no_v4l2loopback_fails_with_the_modprobe_fix():
    result = doctor.check_virtual_camera()
    assert result.status is Status.fail
    assert result.detail == 'v4l2loopback is not loaded: no "FaceLive Camera" device'
    assert result.fix.startswith("sudo apt install v4l2loopback-dkms && ")
    assert MODPROBE in result.fix
    assert "/etc/modprobe.d/facelive-v4l2loopback.conf" in result.fix
    assert "Secure Boot" in result.fix and "mokutil" in result.fix
    assert v4l2loopback.SECURE_BOOT_HINT[1:] in result.fix and v4l2loopback.RESTART_APPS_HINT in result.fix
    assert v4l2loopback.CONTAINER_HINT in result.fix and "--sink preview" in result.fix  # modprobe cannot work in a container
    assert "afterwards" not in result.fix and result.fix.count("restart Zoom") == 1  # said once, in one tense (issue 42)


def fake_sysfs(tmp_path: Path, label: str) -> tuple[Path, Path]:
    """A sysfs root (video4linux class, v4l2loopback loaded) and /dev as the kernel lays them out (test data)."""
    sysfs, module, dev = tmp_path / "class" / "video4linux", tmp_path / "module" / "v4l2loopback", tmp_path / "dev"
    for path in (sysfs / "video0", sysfs / "video10", module, dev):
        path.mkdir(parents=True)
    (sysfs / "video0" / "name").write_text("Integrated Camera: Integrated C\n")
    (sysfs / "video10" / "name").write_text(label + "\n")
    (dev / "video10").write_bytes(b"")
    return tmp_path, dev


def test_virtual_camera_found_by_its_label(tmp_path):
    sysfs, dev = fake_sysfs(tmp_path, "FaceLive Camera")
    result = doctor.check_virtual_camera(VirtualCameraConfig(), sysfs, dev, platform=LINUX)
    assert result.status is Status.ok and result.detail == '/dev/video10 is "FaceLive Camera"'
    assert v4l2loopback.list_video_devices(sysfs) == [("/dev/video0", "Integrated Camera: Integrated C"),
                                                      ("/dev/video10", "FaceLive Camera")]


def test_virtual_camera_with_the_wrong_label_or_device(tmp_path):
    sysfs, dev = fake_sysfs(tmp_path, "Dummy video device (0x0000)")
    result = doctor.check_virtual_camera(VirtualCameraConfig(), sysfs, dev, platform=LINUX)
    assert result.status is Status.fail
    assert 'no device is labelled "FaceLive Camera"' in result.detail and '/dev/video10 "Dummy video device' in result.detail
    assert result.fix.startswith("sudo modprobe -r v4l2loopback && sudo modprobe v4l2loopback devices=1")
    wrong = doctor.check_virtual_camera(VirtualCameraConfig(device="/dev/video7"), sysfs, dev, platform=LINUX)
    assert wrong.status is Status.fail and "/dev/video7 does not exist" in wrong.detail


def test_invalid_config_fails_naming_the_key(tmp_path):
    bad = tmp_path / "config.toml"
    bad.write_text("[camera]\nfps = -5\n\n[swap]\nsource_fase = 'me.jpg'\n")
    result, cfg = doctor.check_config(bad)
    assert result.status is Status.fail
    assert "[camera] fps = -5" in result.detail and "[swap] source_fase: unknown key" in result.detail
    assert f"vcamd config check {bad}" in result.fix
    assert cfg == Config()  # the other checks go on with the defaults
    good = tmp_path / "good.toml"
    good.write_text('[camera]\ndevice = "synthetic"\n')
    result, cfg = doctor.check_config(good)
    assert result.status is Status.ok and cfg.camera.device == "synthetic"


def test_two_onnxruntime_builds_conflict():
    result = doctor.check_onnxruntime_install(["onnxruntime 1.32.0", "onnxruntime-gpu 1.32.0"])
    assert result.status is Status.fail and "2 ONNX Runtime builds" in result.detail
    # The venv's pip, not a bare `pip` that may install for another Python (issue 42).
    pip = f"{sys.executable} -m pip"
    assert result.fix == f"{pip} uninstall -y onnxruntime onnxruntime-gpu && {pip} install --force-reinstall onnxruntime-gpu"
    real = doctor.check_onnxruntime_install()
    assert real.status is Status.ok and real.detail.startswith("onnxruntime")  # this venv has one build


def test_provider_probe_reports_the_provider_really_used():
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here: the fallback cannot be observed")
    used, _stderr = probe_providers(["CPUExecutionProvider", "CUDAExecutionProvider"])
    assert used == {"CPUExecutionProvider": "CPUExecutionProvider", "CUDAExecutionProvider": "CPUExecutionProvider"}
    asked = doctor.check_providers(ModelsConfig(providers=["cuda"]))
    assert asked.status is Status.fail and "CUDAExecutionProvider" in asked.detail and "onnxruntime-gpu" in asked.fix
    auto = doctor.check_providers(ModelsConfig())
    assert auto.status is Status.warn and "CPU only" in auto.detail
    # The standard wheel also offers AzureExecutionProvider, a cloud endpoint, not hardware here.
    assert "Azure" not in auto.detail and "Azure" not in asked.detail


def test_models_missing_corrupt_and_given_as_files(tmp_path, assets):
    models = tmp_path / "models"
    models.mkdir()
    (models / "det_10g.onnx").write_bytes(b"not the 16 MB detector")
    recognizer_file = assets / "models" / "mobilefacenet.onnx"
    cfg = Config(models=ModelsConfig(dir=models, recognizer=str(recognizer_file)))
    results = {r.name: r for r in doctor.check_models(cfg)}
    assert set(results) == {"model detector", "model recognizer", "model swapper"}  # enhancer off: not needed
    assert results["model detector"].status is Status.fail and "damaged" in results["model detector"].detail
    # Both ways out: the pull, and the copy by hand (issue 42).
    assert results["model detector"].fix == "delete it, then run `vcamd models pull buffalo_l`, or copy it in by hand: `vcamd models list` says where each file comes from and where it goes"
    assert results["model recognizer"].status is Status.ok and "not verified" in results["model recognizer"].detail
    assert results["model swapper"].status is Status.fail
    assert results["model swapper"].fix == "run `vcamd models pull inswapper_128_fp16`, or copy it in by hand: `vcamd models list` says where each file comes from and where it goes"
    typo = {r.name: r for r in doctor.check_models(Config(models=ModelsConfig(dir=models, swapper="inswaper")))}
    assert typo["model swapper"].status is Status.fail and "neither a manifest model" in typo["model swapper"].detail


def test_control_socket_not_running_then_running(short_dir, monkeypatch):
    from support.fakes import FakeEngine

    from vcamd.control.server import ControlServer

    runtime = short_dir / "rt"
    result, status = doctor.check_control_socket(runtime)
    assert result.status is Status.warn and "not running" in result.detail and status is None
    controller = FakeEngine()
    with ControlServer(controller, runtime):
        result, status = doctor.check_control_socket(runtime)
        assert result.status is Status.ok and result.detail == "running (running), swap on, control socket answers"
        assert status["enabled"] is True
        controller.config_error = "[camera] fps = -1: must be > 0"
        result, _ = doctor.check_control_socket(runtime)
        assert result.status is Status.warn and "[camera] fps" in result.detail
        # Swapping off for want of something: said, with where to read how to get it (issue 42).
        controller.config_error, controller.enabled = None, False
        controller.status = lambda: {**FakeEngine.status(controller), "swap_needs": [{"label": "the face models"}, {"label": "consent"}]}
        result, _ = doctor.check_control_socket(runtime)
        assert result.detail == ("running (running), swap off (it needs the face models, consent: `vcamd status` says how to get "
                                 "each), control socket answers")


def test_source_face_of_the_running_daemon_is_not_reported_as_missing(short_dir, tmp_path, monkeypatch, assets):
    """`vcamd run --face PHOTO` with no source face in the config: doctor finds it in the daemon."""
    from support.fakes import FakeEngine

    from vcamd.control.server import ControlServer

    runtime = short_dir / "rt"
    monkeypatch.setenv("VCAMD_RUNTIME_DIR", str(runtime))
    config = tmp_path / "config.toml"
    config.write_text("[swap]\nsource_consent = true\n")
    alone = {r.name: r for r in doctor.run_checks(config)}["source face"]
    assert alone.status is Status.warn and "no source face set" in alone.detail
    controller = FakeEngine()
    controller.source_face = assets / "images" / "newton.png"
    with ControlServer(controller, runtime):
        found = {r.name: r for r in doctor.run_checks(config)}["source face"]
    assert found.status is Status.ok, found
    assert found.detail.startswith(f"{controller.source_face}, in use by the running daemon")


def test_report_marks_and_exit_code():
    results = [ok("a", "fine"), doctor.CheckResult("b", Status.warn, "hmm", "do x"),
               doctor.CheckResult("c", Status.fail, "broken", "do y")]
    text = doctor.report(results, "utf-8")
    assert text.splitlines()[:5] == ["✓ a: fine", "! b: hmm", "    fix: do x", "✗ c: broken", "    fix: do y"]
    assert text.endswith("3 checks: 1 ok, 1 warnings, 1 failed")
    assert doctor.report(results, "cp1252").startswith("OK a: fine\n!! b: hmm")  # old Windows console
    assert doctor.exit_code(results) == 1 and doctor.exit_code(results[:2]) == 0


def run_doctor(args: list[str], short_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(short_dir / "rt"), "XDG_DATA_HOME": str(short_dir / "data")}
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return subprocess.run([sys.executable, "-m", "vcamd", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=REPO)


def test_doctor_command_with_a_broken_config(short_dir):
    bad = short_dir / "config.toml"
    bad.write_text("[camera]\nfps = 0\n")
    done = run_doctor(["--config", str(bad)], short_dir)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"✗ config: {bad}: [camera] fps = 0:")
    assert "! tray icon: not available: no DISPLAY or WAYLAND_DISPLAY" in done.stdout
    assert "! daemon: FaceLive Camera is not running" in done.stdout
    assert "✓ package numpy" in done.stdout
    assert lines[-1].startswith("20 checks:")
    assert done.stderr == ""  # no OpenCV or ONNX Runtime noise on the terminal


def test_doctor_command_with_a_synthetic_camera(short_dir):
    cfg = short_dir / "config.toml"
    cfg.write_text('[camera]\ndevice = "synthetic"\n')
    done = run_doctor(["--config", str(cfg)], short_dir)
    assert f"✓ config: {cfg} is valid" in done.stdout
    assert '✓ camera: synthetic test pattern' in done.stdout
    assert "✗ model swapper: inswapper_128_fp16 is missing" in done.stdout  # empty data dir
    assert done.returncode == 1


# -- models in the wrong role: doctor and `config check` refuse what `vcamd run` refuses ------------


@pytest.fixture(scope="module")
def standin_models(tmp_path_factory, assets) -> dict[str, Path]:
    from vcamd.bench import standins

    folder = tmp_path_factory.mktemp("standins")
    return {
        "detector": assets / "models" / "scrfd_500m_kps.onnx",
        "recognizer": standins.build_recognizer(folder / "w600k_standin.onnx"),
        "swapper": standins.build_swapper(folder / "inswapper_standin.onnx"),
        "enhancer": standins.build_enhancer(folder / "gfpgan_standin.onnx"),
    }


def models_config(files: dict[str, Path], **override: Path) -> ModelsConfig:
    chosen = {**files, **override}
    return ModelsConfig(**{role: str(path) for role, path in chosen.items()})


def test_doctor_rejects_a_gfpgan_file_as_swapper_like_run(standin_models):
    from vcamd.common.errors import ModelError

    good = Config(models=models_config(standin_models))
    assert [r.status for r in doctor.check_models(good)] == [Status.ok] * 3
    wrong = Config(models=models_config(standin_models, swapper=standin_models["enhancer"]))
    results = {r.name: r for r in doctor.check_models(wrong)}
    assert results["model swapper"].status is Status.fail
    assert results["model swapper"].detail.startswith("gfpgan_standin.onnx is not a face swapper vcamd knows")
    assert "[models] swapper" in results["model swapper"].fix
    # `vcamd run` builds its pipeline with FaceEngine.from_config: the same file, the same refusal.
    with pytest.raises(ModelError, match="gfpgan_standin.onnx is not a face swapper vcamd knows"):
        build_face_engine(wrong)
    swapped_roles = Config(models=models_config(standin_models, detector=standin_models["recognizer"]))
    detector = {r.name: r for r in doctor.check_models(swapped_roles)}["model detector"]
    assert detector.status is Status.fail and "is not an SCRFD detector" in detector.detail


def test_config_check_rejects_a_model_in_the_wrong_role(standin_models, tmp_path):
    import tomli_w

    def config_check(models: dict[str, Path]) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "config.toml"
        path.write_text(tomli_w.dumps({"models": {role: str(p) for role, p in models.items()}}))
        return subprocess.run([sys.executable, "-m", "vcamd", "config", "check", str(path)], capture_output=True,
                              text=True, timeout=120, cwd=REPO, env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")})

    fine = config_check(standin_models)
    assert (fine.returncode, fine.stdout.strip()) == (0, f"{tmp_path / 'config.toml'}: OK"), fine.stderr
    wrong = config_check({**standin_models, "swapper": standin_models["enhancer"]})
    assert wrong.returncode == 2
    assert wrong.stdout.strip().splitlines() == [
        f"{tmp_path / 'config.toml'}: [models] swapper: gfpgan_standin.onnx is not a face swapper vcamd knows "
        + wrong.stdout.split("is not a face swapper vcamd knows ", 1)[1].strip()
    ]
    assert "set [models] swapper to a swapper from `vcamd models list` (e.g. inswapper_128_fp16)" in wrong.stdout
    # A manifest model in the wrong role is refused by name, before any file is read.
    by_name = config_check({**standin_models, "swapper": "gfpgan_1.4"})
    assert by_name.returncode == 2 and "[models] swapper = 'gfpgan_1.4' is not a swapper model" in by_name.stdout
    # Models not downloaded yet are `vcamd models pull`'s business, not a config error.
    defaults = config_check({})
    assert defaults.returncode == 0, defaults.stdout


# -- platform branches, through the one seam (doctor.Platform) ------------------------------------


def windows(registered: set[str] = frozenset()) -> doctor.Platform:
    return doctor.Platform("win32", {}, registry_key_exists=lambda key: key in registered,
                           run_command=lambda cmd: pytest.fail(f"Windows ran {cmd}"))


def macos(listing: str | None = None, paths: set[Path] = frozenset()) -> doctor.Platform:
    return doctor.Platform("darwin", {}, run_command=lambda cmd: listing if cmd == ["systemextensionsctl", "list"] else None,
                           path_exists=lambda path: path in paths)


def test_windows_virtual_camera_needs_obs_or_unity_capture(monkeypatch):
    none = doctor.check_virtual_camera(platform=windows())
    assert none.status is Status.fail and none.detail == "neither OBS Virtual Camera nor Unity Capture is installed"
    assert "install OBS Studio" in none.fix and "Unity Capture" in none.fix
    # Registered, but pyvirtualcam cannot open it here (this is not Windows): the opening is checked too.
    obs = doctor.check_virtual_camera(platform=windows({f"CLSID\\{OBS_VIRTUALCAM_CLSID}"}))
    assert obs.status is Status.fail and obs.detail.startswith("OBS Virtual Camera installed, but it does not open:")
    assert "Start Virtual Camera" in obs.fix
    both = doctor.check_virtual_camera(platform=windows({f"CLSID\\{OBS_VIRTUALCAM_CLSID}",
                                                         f"CLSID\\{UNITY_CAPTURE_CLSID}"}))
    assert both.detail.startswith("OBS Virtual Camera and Unity Capture installed")


def test_macos_virtual_camera_is_the_obs_system_extension():
    missing = doctor.check_virtual_camera(platform=macos(""))
    assert missing.status is Status.fail and "system extension is not installed" in missing.detail
    assert "Privacy & Security" in missing.fix
    old = doctor.check_virtual_camera(platform=macos("", {OBS_MAC_DAL_PLUGIN}))
    assert old.status is Status.warn and "old DAL plug-in" in old.detail
    waiting = ("1 extension(s)\n--- com.apple.system_extension.cmio\nenabled\tactive\tteamID\tbundleID (version)\tname\t[state]\n"
               "\t\t2MMRE5MTB8\tcom.obsproject.obs-studio.mac-camera-extension (30.1.2/30.1.2)\tOBS Virtual Camera\t"
               "[activated waiting for user]\n")
    pending = doctor.check_virtual_camera(platform=macos(waiting))
    assert pending.status is Status.fail and "not enabled" in pending.detail and "waiting for user" in pending.detail
    enabled = doctor.check_virtual_camera(platform=macos(waiting.replace("activated waiting for user", "activated enabled")))
    assert enabled.detail.startswith("OBS camera extension enabled")  # then pyvirtualcam must open it


def test_onnxruntime_builds_per_platform():
    clash = doctor.check_onnxruntime_install(["onnxruntime 1.19.2", "onnxruntime-directml 1.19.2"], windows())
    assert clash.status is Status.fail
    assert "onnxruntime-directml must not sit beside the CPU onnxruntime" in clash.detail
    pip = f"{sys.executable} -m pip"
    assert clash.fix == f"{pip} uninstall -y onnxruntime onnxruntime-directml && {pip} install --force-reinstall onnxruntime-directml"
    assert "onnxruntime-directml" in doctor.check_onnxruntime_install([], windows()).fix
    assert "CoreML" in doctor.check_onnxruntime_install([], macos()).fix
    assert "onnxruntime-gpu" in doctor.check_onnxruntime_install([], LINUX).fix


def test_cpu_only_users_are_told_a_swap_takes_a_second():
    cpu = ["CPUExecutionProvider"]
    for platform, gpu_build in ((LINUX, "onnxruntime-gpu"), (windows(), "onnxruntime-directml")):
        result = doctor.check_providers(ModelsConfig(), platform, available=cpu)
        assert result.status is Status.warn
        assert "a swap then takes seconds (1.6–4.8 s" in result.detail and "a live face needs a GPU" in result.detail
        pip = f"{sys.executable} -m pip"
        assert f"{pip} uninstall -y onnxruntime && {pip} install {gpu_build}" in result.fix
    mac = doctor.check_providers(ModelsConfig(), macos(), available=cpu)
    assert mac.status is Status.warn and "no CoreML" in mac.detail and "takes seconds" in mac.detail
    assert "pip install onnxruntime" in mac.fix


def test_pip_in_a_fix_is_the_one_of_vcamds_own_python():
    """A bare `pip` is often the system's or another venv's: the GPU build would land where vcamd
    does not look (issue 42). A path with a space is quoted."""
    venv = doctor.Platform("linux", {}, python="/home/me/face live/.venv/bin/python")
    result = doctor.check_providers(ModelsConfig(), venv, available=["CPUExecutionProvider"])
    assert result.fix.startswith('with a GPU: "/home/me/face live/.venv/bin/python" -m pip uninstall -y onnxruntime && '
                                 '"/home/me/face live/.venv/bin/python" -m pip install onnxruntime-gpu')
    assert " pip " not in result.fix.replace(" -m pip ", " ")


def test_tray_check_per_platform_and_never_ok_without_a_menu(monkeypatch):
    from vcamd.tray import backends

    assert backends.choose_backend({}, "win32") == backends.BackendChoice("win32", "Windows")
    assert backends.choose_backend({}, "darwin").has_menu
    no_session = doctor.check_tray(LINUX)
    assert no_session.status is Status.warn and "no DISPLAY" in no_session.detail
    # An xorg icon (no PyGObject) works but has no menu: a warning with the fix, never ✓.
    xorg = backends.BackendChoice("xorg", "PyGObject (the [tray] extra) is not installed")
    monkeypatch.setattr(backends, "choose_backend", lambda env, platform: xorg)
    monkeypatch.setattr(backends, "import_pystray", lambda name: None)
    monkeypatch.setattr("vcamd.tray.xorg.systray_owner_present", lambda display: True)
    result = doctor.check_tray(doctor.Platform("linux", {"DISPLAY": ":9", "XDG_CURRENT_DESKTOP": "ubuntu:GNOME"}))
    assert result.status is Status.warn and "has no menu" in result.detail
    assert "pip install -e '.[tray]'" in result.fix and "gnome-shell-extension-appindicator" in result.fix


def test_tray_check_without_a_tray_host_gives_the_desktops_fix_not_the_installed_extra(monkeypatch):
    """A session bus, PyGObject installed, but nothing in the session hosts tray icons."""
    from vcamd.tray import backends

    gtk = backends.BackendChoice("gtk", "no StatusNotifierWatcher on the session bus")
    monkeypatch.setattr(backends, "choose_backend", lambda env, platform: gtk)
    monkeypatch.setattr(backends, "import_pystray", lambda name: None)
    monkeypatch.setattr("vcamd.tray.xorg.systray_owner_present", lambda display: False)
    monkeypatch.setattr(backends, "tray_extra_installed", lambda: True)
    gnome = doctor.check_tray(doctor.Platform("linux", {"DISPLAY": ":9", "XDG_CURRENT_DESKTOP": "GNOME"}))
    assert gnome.status is Status.warn and "no system tray (XEmbed) host" in gnome.detail
    assert "gnome-shell-extension-appindicator" in gnome.fix and "pip install" not in gnome.fix
    other = doctor.check_tray(doctor.Platform("linux", {"DISPLAY": ":9"}))
    assert "no tray host" in other.fix and "--no-tray" in other.fix and "pip install" not in other.fix
    wayland = doctor.check_tray(doctor.Platform("linux", {"WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "GNOME"}))
    assert "gnome-shell-extension-appindicator" in wayland.fix and "pip install" not in wayland.fix
    # Without the extra, installing it is part of the fix (it brings the menu; the host is the desktop's).
    monkeypatch.setattr(backends, "tray_extra_installed", lambda: False)
    missing = doctor.check_tray(doctor.Platform("linux", {"DISPLAY": ":9"}))
    assert "no tray host" in missing.fix and "pip install -e '.[tray]'" in missing.fix


def test_doctor_fails_a_source_face_that_is_not_a_photo(tmp_path, assets):
    from vcamd import doctor
    from vcamd.config.schema import Config
    from vcamd.doctor import Status

    not_a_photo = tmp_path / "face.jpg"
    not_a_photo.write_text("this is not a JPEG")
    cfg = Config.model_validate({"swap": {"source_face": str(not_a_photo), "source_consent": True}})
    result = doctor.check_source_face(cfg)
    assert result.status is Status.fail, result
    assert str(not_a_photo) in result.detail and "not a readable image" in result.detail
    good = Config.model_validate({"swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True}})
    assert doctor.check_source_face(good).status is Status.ok


def test_doctor_says_a_virtual_camera_device_that_exists_is_not_a_video_device(tmp_path):
    from vcamd import doctor
    from vcamd.config.schema import VirtualCameraConfig
    from vcamd.doctor import Status

    sysfs, module, dev = tmp_path / "class" / "video4linux", tmp_path / "module" / "v4l2loopback", tmp_path / "dev"
    for path in (sysfs / "video10", module, dev):
        path.mkdir(parents=True)
    (sysfs / "video10" / "name").write_text("FaceLive Camera\n")
    (dev / "video10").write_bytes(b"")
    (dev / "null").write_bytes(b"")
    result = doctor.check_virtual_camera(VirtualCameraConfig(device="/dev/null"), tmp_path, dev, platform="linux")
    assert result.status is Status.fail
    assert "does not exist" not in result.detail and "not a video device" in result.detail, result.detail
    assert "/dev/video10" in result.fix and "[virtual_camera] device" in result.fix


def test_doctor_names_a_camera_video_file_that_does_not_play_as_such(tmp_path):
    from vcamd import doctor
    from vcamd.config.schema import CameraConfig
    from vcamd.doctor import Status

    broken = tmp_path / "clip.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"not really a video " * 100)
    result = doctor.check_camera(CameraConfig(device=str(broken)))
    assert result.status is Status.fail
    assert "not a playable video file" in result.detail and "plug in the webcam" not in result.fix, result


def test_doctor_warns_that_run_keeps_swapping_off_without_consent(assets):
    from vcamd import doctor
    from vcamd.config.schema import Config
    from vcamd.doctor import Status

    cfg = Config.model_validate({"swap": {"source_face": str(assets / "images" / "newton.png")}})
    result = doctor.check_source_face(cfg)
    assert result.status is Status.warn and "source_consent" in result.detail and "source_consent = true" in result.fix
    assert "keeps swapping off" in result.detail  # it no longer refuses to start (issue 42)

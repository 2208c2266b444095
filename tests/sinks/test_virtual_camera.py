"""VirtualCameraSink: finding the "FaceLive Camera" device, the errors users see, and write retries.

The logic runs against a fake sysfs tree and a scripted camera object standing in for the
pyvirtualcam device; the real pyvirtualcam backend is exercised for its error path here and, with
a v4l2loopback device present, end to end in the `device`-marked test.
"""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.errors import VcamdError
from vcamd.sinks.virtual import RetryPolicy, VirtualCameraSink, pyvirtualcam_camera
from vcamd.system.v4l2loopback import RESTART_APPS_HINT, SECURE_BOOT_HINT, find_loopback_device, list_video_devices

EXACT_MODPROBE = 'sudo modprobe v4l2loopback devices=1 video_nr=10 card_label="FaceLive Camera" exclusive_caps=1'


def linux_sink(make_config, factory, sysfs: Path, clock=None, retry=RetryPolicy(), **vcam):
    cfg = make_config(virtual_camera=vcam).virtual_camera
    extra = {"clock": clock, "sleep": clock.sleep} if clock is not None else {}
    return VirtualCameraSink(cfg, 64, 48, 30.0, camera_factory=factory, system="Linux", sysfs_root=sysfs, retry=retry, **extra)


# -- device lookup --------------------------------------------------------------------------------


def test_lookup_finds_the_device_by_card_label_in_number_order(fake_sysfs):
    sysfs = fake_sysfs({"video0": "Integrated Camera", "video2": "FaceLive Camera", "video10": "FaceLive Camera"})
    assert list_video_devices(sysfs) == [
        ("/dev/video0", "Integrated Camera"),
        ("/dev/video2", "FaceLive Camera"),
        ("/dev/video10", "FaceLive Camera"),
    ]
    assert find_loopback_device("FaceLive Camera", sysfs) == "/dev/video2"
    assert find_loopback_device("Integrated Camera", sysfs) == "/dev/video0"
    assert find_loopback_device("FaceLive", sysfs) is None  # exact label, not a prefix


def test_lookup_without_video4linux_finds_nothing(tmp_path):
    assert list_video_devices(tmp_path) == []
    assert find_loopback_device("FaceLive Camera", tmp_path) is None


def test_open_uses_the_labelled_device_and_describes_it(make_config, camera_factory, fake_sysfs):
    sysfs = fake_sysfs({"video0": "Integrated Camera", "video10": "FaceLive Camera"})
    factory = camera_factory()
    sink = linux_sink(make_config, factory, sysfs)
    sink.open()
    assert factory.calls == [(64, 48, 30.0, "/dev/video10", None)]
    assert sink.describe() == "v4l2loopback /dev/video10 'FaceLive Camera'"
    sink.open()  # idempotent: still one device
    assert len(factory.calls) == 1
    sink.close()


def test_configured_device_is_used_as_given(make_config, camera_factory, fake_sysfs, tmp_path):
    device = tmp_path / "video7"
    device.touch()
    factory = camera_factory()
    sink = linux_sink(make_config, factory, fake_sysfs({}), device=str(device))
    sink.open()
    assert factory.calls[0][3] == str(device)
    sink.close()


# -- errors the user reads --------------------------------------------------------------------------


def test_missing_device_error_gives_the_exact_modprobe_fix(make_config, camera_factory, fake_sysfs):
    sysfs = fake_sysfs({"video0": "Integrated Camera"})
    factory = camera_factory()
    with pytest.raises(VcamdError) as info:
        linux_sink(make_config, factory, sysfs).open()
    text = str(info.value)
    assert "no v4l2loopback device labelled 'FaceLive Camera'" in text
    assert EXACT_MODPROBE in text
    assert "vcamd service install" in text
    assert "/dev/video0 'Integrated Camera'" in text  # what is there instead
    assert "modprobe -r" not in text  # the module is not loaded, so no unload step
    assert factory.calls == []  # the backend is never asked to open a device that is not there


def test_missing_device_with_module_loaded_says_to_reload_it(make_config, camera_factory, fake_sysfs):
    sysfs = fake_sysfs({"video3": "Dummy video device (0x0000)"}, module_loaded=True)
    with pytest.raises(VcamdError) as info:
        linux_sink(make_config, camera_factory(), sysfs).open()
    text = str(info.value)
    assert "sudo modprobe -r v4l2loopback" in text
    assert EXACT_MODPROBE in text


def test_custom_name_goes_into_the_card_label(make_config, camera_factory, fake_sysfs):
    with pytest.raises(VcamdError) as info:
        linux_sink(make_config, camera_factory(), fake_sysfs({}), name="Studio Cam").open()
    assert 'card_label="Studio Cam"' in str(info.value)


def test_configured_device_that_does_not_exist(make_config, camera_factory, fake_sysfs, tmp_path):
    missing = str(tmp_path / "video99")
    with pytest.raises(VcamdError) as info:
        linux_sink(make_config, camera_factory(), fake_sysfs({}), device=missing).open()
    text = str(info.value)
    assert f"[virtual_camera] device {missing} does not exist" in text
    assert EXACT_MODPROBE in text


def test_backend_failure_on_linux_names_device_and_permissions(make_config, camera_factory, fake_sysfs):
    factory = camera_factory()
    factory.open_error = RuntimeError("'v4l2loopback' backend: Permission denied")
    with pytest.raises(VcamdError) as info:
        linux_sink(make_config, factory, fake_sysfs({"video10": "FaceLive Camera"})).open()
    text = str(info.value)
    assert "cannot open virtual camera /dev/video10" in text and "Permission denied" in text
    assert "video` group" in text


def test_unknown_backend_is_refused(make_config, camera_factory, fake_sysfs):
    with pytest.raises(VcamdError) as info:
        linux_sink(make_config, camera_factory(), fake_sysfs({}), backend="obs").open()
    assert "[virtual_camera] backend = 'obs' is not available on Linux" in str(info.value)
    assert "v4l2loopback" in str(info.value)


def test_windows_names_its_backends_and_what_apps_show(make_config, camera_factory):
    cfg = make_config().virtual_camera
    factory = camera_factory()
    factory.open_error = RuntimeError("'obs' backend: OBS Virtual Camera is not installed")
    sink = VirtualCameraSink(cfg, 64, 48, 30.0, camera_factory=factory, system="Windows")
    before = sink.describe()
    assert "OBS Virtual Camera" in before and "Unity Capture" in before
    with pytest.raises(VcamdError) as info:
        sink.open()
    text = str(info.value)
    assert "OBS Virtual Camera is not installed" in text
    assert "apps list it as 'OBS Virtual Camera'" in text and "Unity Video Capture" in text
    assert factory.calls == [(64, 48, 30.0, None, None)]  # Windows: the backend picks its device

    working = camera_factory(backend="obs")
    sink = VirtualCameraSink(cfg, 64, 48, 30.0, camera_factory=working, system="Windows")
    sink.open()
    assert sink.describe() == "OBS Virtual Camera (apps list it as 'OBS Virtual Camera')"
    sink.close()

    unity_cfg = make_config(virtual_camera={"backend": "unitycapture", "device": "FaceLive Camera"}).virtual_camera
    sink = VirtualCameraSink(unity_cfg, 64, 48, 30.0, camera_factory=camera_factory(), system="Windows")
    sink.open()
    assert sink.describe() == "Unity Capture (apps list it as 'FaceLive Camera')"
    sink.close()


def test_macos_offers_obs_only(make_config, camera_factory):
    factory = camera_factory()
    factory.open_error = RuntimeError("'obs' backend: camera extension not installed")
    sink = VirtualCameraSink(make_config().virtual_camera, 64, 48, 30.0, camera_factory=factory, system="Darwin")
    assert "OBS Virtual Camera" in sink.describe() and "Unity" not in sink.describe()
    with pytest.raises(VcamdError) as info:
        sink.open()
    assert "macOS" in str(info.value) and "apps list it as 'OBS Virtual Camera'" in str(info.value)
    with pytest.raises(VcamdError, match="not available on Darwin"):
        VirtualCameraSink(
            make_config(virtual_camera={"backend": "unitycapture"}).virtual_camera, 64, 48, 30.0, system="Darwin"
        ).open()


def test_real_pyvirtualcam_error_is_wrapped(make_config, tmp_path):
    """The real backend, given a path that is no video device, fails; the user sees a VcamdError."""
    not_a_device = tmp_path / "video5"
    not_a_device.write_bytes(b"")
    cfg = make_config(virtual_camera={"device": str(not_a_device)}).virtual_camera
    sink = VirtualCameraSink(cfg, 64, 48, 30.0, camera_factory=pyvirtualcam_camera, system="Linux")
    with pytest.raises(VcamdError, match=f"cannot open virtual camera {not_a_device}"):
        sink.open()


def test_this_machine_without_loopback_device_gets_the_fix(make_config):
    """With the real /sys: on a machine with no "FaceLive Camera" device, open() explains the fix."""
    if find_loopback_device("FaceLive Camera") is not None:
        pytest.skip("this machine has a FaceLive Camera device; see the device test")
    with pytest.raises(VcamdError, match="sudo modprobe v4l2loopback"):
        VirtualCameraSink(make_config().virtual_camera, 64, 48, 30.0, system="Linux").open()


# -- sending, resizing and retries ------------------------------------------------------------------


def test_send_before_open_is_a_programming_error(make_config, camera_factory, fake_sysfs, solid):
    sink = linux_sink(make_config, camera_factory(), fake_sysfs({"video10": "FaceLive Camera"}))
    with pytest.raises(RuntimeError, match="before open"):
        sink.send(solid(64, 48, (0, 0, 0)))


def test_frames_are_resized_only_when_needed(make_config, camera_factory, fake_sysfs, solid):
    factory = camera_factory()
    sink = linux_sink(make_config, factory, fake_sysfs({"video10": "FaceLive Camera"}))
    sink.open()
    right = solid(64, 48, (10, 20, 30))
    sink.send(right)
    big = solid(128, 96, (200, 100, 50))
    sink.send(big)
    sent = factory.cameras[0].frames
    assert sent[0] is right  # no copy when the size already fits
    assert sent[1].shape == (48, 64, 3) and tuple(sent[1][24, 32]) == (200, 100, 50)
    assert (sink.frames_sent, sink.write_failures, sink.frames_dropped, sink.reopens) == (2, 0, 0, 0)


def test_transient_failure_is_retried_with_backoff(make_config, camera_factory, fake_sysfs, solid, clock):
    factory = camera_factory(fail_first_send=2)
    sink = linux_sink(make_config, factory, fake_sysfs({"video10": "FaceLive Camera"}), clock=clock)
    sink.open()
    sink.send(solid(64, 48, (1, 2, 3)))  # fails twice, the third try succeeds; never raises
    assert clock.sleeps == [0.002, 0.004]
    assert (sink.frames_sent, sink.write_failures, sink.frames_dropped) == (1, 2, 0)


def test_failure_streak_drops_frames_without_waiting_then_reopens(make_config, camera_factory, fake_sysfs, solid, clock):
    factory = camera_factory(fail_first_send=-1)  # the first camera never accepts a frame
    retry = RetryPolicy(attempts=3, reopen_after=4)
    sink = linux_sink(make_config, factory, fake_sysfs({"video10": "FaceLive Camera"}), clock=clock, retry=retry)
    sink.open()
    frame = solid(64, 48, (9, 9, 9))
    for _ in range(4):
        sink.send(frame)
    first = factory.cameras[0]
    # Frame 1 gets 3 tries (2 waits); frames 2–4 of the streak one try each and no wait.
    assert first.calls == 3 + 3 and clock.sleeps == [0.002, 0.004]
    assert (sink.frames_sent, sink.write_failures, sink.frames_dropped) == (0, 6, 4)
    assert first.closed and sink.is_down  # 4 failed frames in a row: device closed for a reopen
    sink.send(frame)  # the next frame reopens at once and goes out on the new device
    assert len(factory.cameras) == 2 and factory.calls[1][3] == "/dev/video10"
    assert factory.cameras[1].frames == [frame]
    assert (sink.frames_sent, sink.reopens, sink.is_down) == (1, 1, False)


def test_reopen_failures_back_off_and_recover(make_config, camera_factory, fake_sysfs, solid, clock):
    factory = camera_factory(fail_first_send=-1)
    retry = RetryPolicy(attempts=1, reopen_after=1, reopen_backoff_s=0.5, reopen_backoff_max_s=1.0)
    sink = linux_sink(make_config, factory, fake_sysfs({"video10": "FaceLive Camera"}), clock=clock, retry=retry)
    sink.open()
    frame = solid(64, 48, (5, 5, 5))
    sink.send(frame)  # fails → device closed
    factory.open_error = RuntimeError("device busy")
    sink.send(frame)  # reopen try 1 fails → next try in 0.5 s
    assert len(factory.calls) == 2
    clock.now += 0.4
    sink.send(frame)  # too early: no reopen attempt, frame dropped
    assert len(factory.calls) == 2
    clock.now += 0.1
    sink.send(frame)  # try 2 fails → next in 1.0 s
    clock.now += 0.9
    sink.send(frame)
    assert len(factory.calls) == 3
    clock.now += 0.1
    sink.send(frame)  # try 3 fails → backoff capped at 1.0 s
    clock.now += 1.0
    factory.open_error = None
    sink.send(frame)  # try 4 works
    assert len(factory.calls) == 5
    assert (sink.frames_sent, sink.reopens, sink.frames_dropped) == (1, 1, 6)
    assert "device busy" in sink.last_error


def test_reopen_finds_a_renumbered_device(make_config, camera_factory, fake_sysfs, solid, clock):
    """The module was reloaded while we ran: the labelled device is now /dev/video11."""
    sysfs = fake_sysfs({"video10": "FaceLive Camera"})
    factory = camera_factory(fail_first_send=-1)
    retry = RetryPolicy(attempts=1, reopen_after=1)
    sink = linux_sink(make_config, factory, sysfs, clock=clock, retry=retry)
    sink.open()
    frame = solid(64, 48, (5, 5, 5))
    sink.send(frame)  # fails: device closed for a reopen
    node = sysfs / "class" / "video4linux"
    (node / "video10").rename(node / "video11")
    sink.send(frame)
    assert [call[3] for call in factory.calls] == ["/dev/video10", "/dev/video11"]
    assert factory.cameras[1].frames == [frame] and sink.describe() == "v4l2loopback /dev/video11 'FaceLive Camera'"
    sink.close()


def test_close_is_idempotent_and_later_frames_are_ignored(make_config, camera_factory, fake_sysfs, solid):
    factory = camera_factory()
    sink = linux_sink(make_config, factory, fake_sysfs({"video10": "FaceLive Camera"}))
    sink.open()
    sink.close()
    sink.close()
    sink.send(solid(64, 48, (0, 0, 0)))  # a late frame from a stopping publisher: no error
    assert factory.cameras[0].closed and factory.cameras[0].calls == 0


# -- the real device --------------------------------------------------------------------------------


@pytest.mark.device
def test_real_v4l2loopback_device_shows_the_frames(make_config, solid):
    device = find_loopback_device("FaceLive Camera")
    if device is None:
        pytest.skip("no v4l2loopback device labelled 'FaceLive Camera' (see the modprobe fix)")
    sink = VirtualCameraSink(make_config().virtual_camera, 640, 480, 30.0)
    sink.open()
    try:
        assert sink.describe() == f"v4l2loopback {device} 'FaceLive Camera'"
        frame = solid(640, 480, (40, 180, 220))
        for _ in range(10):
            sink.send(frame)
            time.sleep(1 / 30)
        reader = cv2.VideoCapture(device, cv2.CAP_V4L2)
        assert reader.isOpened(), f"cannot read back {device}"
        seen = None
        for _ in range(30):
            sink.send(frame)
            ok, got = reader.read()
            if ok:
                seen = got
                break
            time.sleep(1 / 30)
        reader.release()
        assert seen is not None, "the loopback device delivered no frame"
        centre = seen[seen.shape[0] // 2, seen.shape[1] // 2].astype(int)
        assert np.abs(centre - np.array([40, 180, 220])).max() < 20  # through I420 and back
        assert sink.write_failures == 0
    finally:
        sink.close()


# -- the platform's own fix when no virtual camera opens (issue 12, item 2) --------------------------
# The platform is chosen at one seam, VirtualCameraSink(system=...); each branch is driven through it
# with the error text pyvirtualcam really gives on that platform.

PYVIRTUALCAM_ERRORS = {
    "Windows": "'obs' backend: OBS Virtual Camera is not installed\n'unitycapture' backend: Unity Capture is not installed",
    "Darwin": "'obs' backend: OBS Virtual Camera is not installed",
}


@pytest.mark.parametrize(
    ("system", "shown_as", "must_say"),
    [
        ("Windows", "Windows", ["OBS Studio 26 or newer", "Start Virtual Camera", "Unity Capture", 'backend = "unitycapture"',
                                "restart Zoom, Teams", "'OBS Virtual Camera'"]),
        ("Darwin", "macOS", ["OBS Studio 30 or newer", "Start Virtual Camera", "Privacy & Security → Allow",
                             "restart Zoom, Teams", "'OBS Virtual Camera'"]),
    ],
)
def test_no_virtual_camera_names_the_platforms_fix(make_config, camera_factory, system, shown_as, must_say):
    factory = camera_factory()
    factory.open_error = RuntimeError(PYVIRTUALCAM_ERRORS[system])
    sink = VirtualCameraSink(make_config().virtual_camera, 64, 48, 30.0, camera_factory=factory, system=system)
    with pytest.raises(VcamdError) as info:
        sink.open()
    err = info.value
    assert err.message.startswith(f"no virtual camera could be opened on {shown_as}: 'obs' backend: OBS Virtual Camera is not installed")
    assert "\n" not in str(err)  # pyvirtualcam's per-backend lines are joined into the one line
    for words in must_say:
        assert words in err.fix, words
    assert "modprobe" not in err.fix and "v4l2loopback" not in err.fix
    if system == "Darwin":
        assert "Unity" not in err.fix  # Unity Capture is Windows only


def test_linux_missing_device_fix_has_the_module_package_secure_boot_and_app_restart(make_config, camera_factory, fake_sysfs):
    with pytest.raises(VcamdError) as info:
        linux_sink(make_config, camera_factory(), fake_sysfs({"video0": "Integrated Camera"})).open()
    fix = info.value.fix
    assert EXACT_MODPROBE in fix and "v4l2loopback-dkms" in fix
    assert "Secure Boot" in fix and "mokutil --import" in fix
    assert "restart Zoom, Teams or the browser" in fix
    assert SECURE_BOOT_HINT in fix and RESTART_APPS_HINT in fix  # the same hints `vcamd doctor` gives
    assert "--sink preview" in fix  # and the way on without the module (a container, issue 42)
    assert "OBS" not in fix


def test_platform_without_a_backend_points_to_the_other_sinks(make_config, camera_factory):
    factory = camera_factory()
    factory.open_error = RuntimeError("no backend")
    with pytest.raises(VcamdError) as info:
        VirtualCameraSink(make_config().virtual_camera, 64, 48, 30.0, camera_factory=factory, system="FreeBSD").open()
    assert "--sink preview" in info.value.fix and "--sink file:PATH.mp4" in info.value.fix


def test_the_platform_defaults_to_this_machines(make_config, camera_factory, monkeypatch):
    import vcamd.sinks.virtual as sinks

    monkeypatch.setattr(sinks.platform, "system", lambda: "Darwin")
    factory = camera_factory()
    factory.open_error = RuntimeError(PYVIRTUALCAM_ERRORS["Darwin"])
    with pytest.raises(VcamdError, match="opened on macOS"):
        VirtualCameraSink(make_config().virtual_camera, 64, 48, 30.0, camera_factory=factory).open()

"""`vcamd swap` end to end, as a subprocess, with stand-in models in a temp dir."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.configs import swap_config
from support.video import read_video

from vcamd.privacy.badge import badge_box


def _vcamd(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vcamd", *map(str, args)], capture_output=True, text=True, timeout=120)


def _make_video(path: Path, image: np.ndarray, frames: int = 20, fps: float = 12.0) -> None:
    """Newton sliding right and down, ~3 px per frame."""
    height, width = image.shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    assert writer.isOpened()
    for i in range(frames):
        shift = np.float32([[1, 0, 3 * i - 30], [0, 1, i - 10]])
        writer.write(cv2.warpAffine(image, shift, (width, height), borderMode=cv2.BORDER_REFLECT))
    writer.release()


def test_swap_a_photo(tmp_path: Path, standins, assets: Path, newton, newton_face) -> None:  # type: ignore[no-untyped-def]
    config = swap_config(tmp_path, standins)
    out = tmp_path / "out.png"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "--input", assets / "images" / "newton.png", "--output", out)
    assert done.returncode == 0, done.stderr
    assert "swapped 1 face(s)" in done.stdout
    result = cv2.imread(str(out))
    assert result.shape == newton.shape
    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    assert np.abs(result[y1:y2, x1:x2].astype(np.int16) - newton[y1:y2, x1:x2]).mean() > 20
    badge = badge_box(newton.shape, "AI-altered", "bottom-right")
    assert (result[badge.y0 : badge.y1, badge.x0 : badge.x1] != newton[badge.y0 : badge.y1, badge.x0 : badge.x1]).any()
    assert np.array_equal(result[:50, :200], newton[:50, :200])  # far from the face and the badge


@dataclass(frozen=True)
class SwappedVideo:
    folder: Path
    source: Path
    out: Path
    done: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def swapped_video(tmp_path_factory: pytest.TempPathFactory, standins, assets: Path, newton) -> SwappedVideo:  # type: ignore[no-untyped-def]
    """One `vcamd swap` of a 20-frame clip, output not a terminal: the video test and the progress
    test read the same run (each run costs a process start and a model load)."""
    folder = tmp_path_factory.mktemp("swapped_video")
    config = swap_config(folder, standins, badge=False)
    source, out = folder / "in.mp4", folder / "out.mp4"
    _make_video(source, newton)
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", source, "-o", out)
    return SwappedVideo(folder, source, out, done)


def test_swap_a_video_keeps_frames_fps_and_size(swapped_video: SwappedVideo) -> None:
    source, out, done = swapped_video.source, swapped_video.out, swapped_video.done
    assert done.returncode == 0, done.stderr
    assert "in 20 of 20 frame(s)" in done.stdout
    original, swapped = cv2.VideoCapture(str(source)), cv2.VideoCapture(str(out))
    assert swapped.get(cv2.CAP_PROP_FPS) == pytest.approx(12.0)
    count = 0
    while True:
        ok_a, a = original.read()
        ok_b, b = swapped.read()
        assert ok_a == ok_b
        if not ok_a:
            break
        count += 1
        assert a.shape == b.shape
        assert np.abs(a.astype(np.int16) - b).mean() > 1  # the face changed in every frame
    assert count == 20
    assert not list(swapped_video.folder.glob(".out.partial-*")), "the temporary file is renamed into place"


def test_refuses_without_consent(tmp_path: Path, standins, assets: Path) -> None:  # type: ignore[no-untyped-def]
    config = swap_config(tmp_path, standins, consent=False)
    out = tmp_path / "out.png"
    args = ("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", assets / "images" / "newton.png", "-o", out)
    done = _vcamd(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "consent" in done.stderr and "--i-have-consent" in done.stderr
    assert "onto video" not in done.stderr, "the input is a photo"
    assert not out.exists()
    assert _vcamd(*args, "--i-have-consent").returncode == 0
    assert out.exists()


@pytest.mark.parametrize(
    ("make_input", "output_name", "expected"),
    [
        (lambda d: d / "missing.png", "out.png", "does not exist"),
        (lambda d: (d / "notes.txt").write_text("hello") and d / "notes.txt", "out.png", "not a photo or video file"),
        (lambda d: (d / "fake.png").write_text("not a png") and d / "fake.png", "out.png", "not a readable image"),
        (lambda d: (d / "fake.mp4").write_bytes(b"\0" * 4096) and d / "fake.mp4", "out.mp4", "not a readable video"),
        (lambda d: d, "out.png", "not a file"),
        (lambda d: Path("NEWTON"), "missing_dir/out.png", "folder"),
        (lambda d: Path("NEWTON"), "out.mp4", "a photo is written as a photo"),
    ],
    ids=["missing", "text-file", "corrupt-png", "corrupt-mp4", "folder", "no-output-dir", "photo-to-video"],
)
def test_bad_files_are_one_line_errors(tmp_path: Path, standins, assets: Path, make_input, output_name: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    config = swap_config(tmp_path, standins)
    source = make_input(tmp_path)
    if source == Path("NEWTON"):
        source = assets / "images" / "newton.png"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", source, "-o", tmp_path / output_name)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("vcamd: error:") and done.stderr.count("\n") == 1, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


# -- sound, progress and faces that are not there (issue 12, item 4) -------------------------------

TONE_HZ = 440.0


def _make_video_with_tone(path: Path, image: np.ndarray, frames: int = 20, fps: int = 12, rate: int = 16000) -> float:
    """Newton sliding as in `_make_video`, plus a mono AAC track of a 440 Hz sine as long as the video.
    Returns the audio's length in seconds."""
    import av

    height, width = image.shape[:2]
    with av.open(str(path), "w") as out:
        video = out.add_stream("mpeg4", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        audio = out.add_stream("aac", rate=rate)
        audio.layout = "mono"
        for i in range(frames):
            shift = np.float32([[1, 0, 3 * i - 30], [0, 1, i - 10]])
            picture = cv2.warpAffine(image, shift, (width, height), borderMode=cv2.BORDER_REFLECT)
            for packet in video.encode(av.VideoFrame.from_ndarray(picture, format="bgr24")):
                out.mux(packet)
        samples = int(rate * frames / fps)
        tone = (0.3 * np.sin(2 * np.pi * TONE_HZ * np.arange(samples) / rate)).astype(np.float32)
        for start in range(0, samples, 1024):
            chunk = av.AudioFrame.from_ndarray(tone[None, start : start + 1024], format="fltp", layout="mono")
            chunk.sample_rate, chunk.pts = rate, start
            for packet in audio.encode(chunk):
                out.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode(None):
                out.mux(packet)
    return samples / rate


def _decoded_audio(path: Path) -> tuple[np.ndarray, int]:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        chunks = [frame.to_ndarray().reshape(-1) for frame in container.decode(stream)]
        return np.concatenate(chunks), stream.codec_context.sample_rate


def test_swap_a_video_keeps_its_sound(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    config = swap_config(tmp_path, standins, badge=False)
    source = tmp_path / "talk.mp4"
    seconds = _make_video_with_tone(source, newton)
    out = tmp_path / "out.mp4"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", source, "-o", out)
    assert done.returncode == 0, done.stderr
    assert "in 20 of 20 frame(s)" in done.stdout and "1 audio track(s) copied" in done.stdout
    assert len(read_video(out)) == 20
    sound, rate = _decoded_audio(out)
    assert rate == 16000
    assert len(sound) / rate == pytest.approx(seconds, abs=0.1)
    # It is the input's tone, not silence or noise: the spectrum peaks at 440 Hz.
    spectrum = np.abs(np.fft.rfft(sound[rate // 10 : -rate // 10]))
    peak_hz = np.fft.rfftfreq(len(sound[rate // 10 : -rate // 10]), 1 / rate)[spectrum.argmax()]
    assert peak_hz == pytest.approx(TONE_HZ, abs=5)
    assert not list(tmp_path.glob(".out.partial-*")), "the temporary files are gone"


def test_swap_to_avi_reencodes_the_sound_it_cannot_copy(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    config = swap_config(tmp_path, standins, badge=False)
    source = tmp_path / "talk.mp4"
    seconds = _make_video_with_tone(source, newton, frames=12)
    out = tmp_path / "out.avi"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", source, "-o", out)
    assert done.returncode == 0, done.stderr
    assert "re-encoded to mp3" in done.stdout
    assert len(read_video(out)) == 12
    sound, rate = _decoded_audio(out)
    assert len(sound) / rate == pytest.approx(seconds, abs=0.15)


def test_video_progress_is_reported_without_a_terminal(swapped_video: SwappedVideo) -> None:
    done = swapped_video.done
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("swapping:")]
    assert [line.split(" (")[0] for line in lines] == [f"swapping: {p}%" for p in range(10, 101, 10)]
    assert "(20/20 frames)" in lines[-1] and "elapsed, about 0:00 left" in lines[-1]


def test_video_progress_bar_on_a_terminal(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    import os
    import pty

    config = swap_config(tmp_path, standins, badge=False)
    source = tmp_path / "in.mp4"
    _make_video(source, newton)
    main, child = pty.openpty()
    args = [sys.executable, "-m", "vcamd", "swap", "--config", str(config), "--face", str(assets / "images" / "newton.png"),
            "-i", str(source), "-o", str(tmp_path / "out.mp4")]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=child, env={**os.environ, "TERM": "xterm", "COLUMNS": "120"})
    os.close(child)
    shown = b""
    while True:  # read the terminal until the process closes it
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: the child side is closed
            break
        if not chunk:
            break
        shown += chunk
    assert proc.wait(timeout=120) == 0
    os.close(main)
    text = shown.decode("utf-8", "replace")
    assert "swapping" in text and "20/20" in text and "left" in text and "━" in text
    assert "swapping:" not in text  # the bar, not the plain lines


def test_photo_without_a_face_is_an_error(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    config = swap_config(tmp_path, standins)
    empty = tmp_path / "wall.png"
    cv2.imwrite(str(empty), cv2.resize(newton[:50, :200], (400, 100)))  # a corner of the portrait: no face
    out = tmp_path / "out.png"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", empty, "-o", out)
    assert done.returncode == 2, done.stdout
    error = done.stderr.splitlines()[-1]  # after the INFO lines of loading the models
    assert error.startswith(f"vcamd: error: no face found in {empty} — ")
    assert f"vcamd faces {empty}" in error and "[detection] threshold" in error and "Traceback" not in done.stderr
    assert not out.exists()


def test_video_summary_counts_frames_without_a_face(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    config = swap_config(tmp_path, standins, badge=False)
    source = tmp_path / "in.mp4"
    height, width = newton.shape[:2]
    writer = cv2.VideoWriter(str(source), cv2.VideoWriter_fourcc(*"mp4v"), 12.0, (width, height))
    blank = np.full_like(newton, 128)
    for i in range(12):
        writer.write(blank if i < 4 else newton)  # the face walks in at frame 4
    writer.release()
    out = tmp_path / "out.mp4"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", source, "-o", out)
    assert done.returncode == 0, done.stderr
    assert "swapped faces in 8 of 12 frame(s)" in done.stdout and "no face found in 4 frame(s)" in done.stdout

    empty = tmp_path / "empty.mp4"
    writer = cv2.VideoWriter(str(empty), cv2.VideoWriter_fourcc(*"mp4v"), 12.0, (width, height))
    for _ in range(6):
        writer.write(blank)
    writer.release()
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", empty, "-o", tmp_path / "none.mp4")
    assert done.returncode == 2
    assert f"no face found in any frame of {empty}" in done.stderr.splitlines()[-1]
    assert not (tmp_path / "none.mp4").exists() and not list(tmp_path.glob(".none.partial-*"))


def _damage_middle(path: Path) -> None:
    """Overwrite the middle fifth of the file with noise (a bad sector, a broken download)."""
    data = bytearray(path.read_bytes())
    start, end = len(data) * 2 // 5, len(data) * 3 // 5
    data[start:end] = np.random.default_rng(7).integers(0, 256, end - start, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))


def test_a_damaged_video_says_how_many_frames_were_read_and_exits_non_zero(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    """Before: exit 0 and "swapped faces in 41 of 41 frame(s)" for a file of 150 frames."""
    config = swap_config(tmp_path, standins, badge=False)
    source = tmp_path / "in.mp4"
    small = cv2.resize(newton, (newton.shape[1] // 2, newton.shape[0] // 2))
    _make_video(source, small, frames=60)
    _damage_middle(source)
    out = tmp_path / "out.mp4"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", source, "-o", out)
    assert done.returncode == 2, (done.stdout, done.stderr)
    read = len(read_video(out))
    assert 0 < read < 60
    assert f"the input claims 60 frames, {read} could be read" in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("vcamd: error:")]
    assert len(errors) == 1 and f"{60 - read} of the 60 frames" in errors[0] and "Traceback" not in done.stderr


def test_swap_output_is_private_and_never_written_through_a_symlink(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    """Before: written through a link planted at OUT (the victim's file overwritten), 0666 under umask 000."""
    import os

    config = swap_config(tmp_path, standins, badge=False)
    source = tmp_path / "in.mp4"
    _make_video(source, cv2.resize(newton, (newton.shape[1] // 2, newton.shape[0] // 2)), frames=6)
    for name, given in (("out.png", assets / "images" / "newton.png"), ("out.mp4", source)):
        victim = tmp_path / f"victim-{name}"
        victim.write_bytes(b"the victim's own file")
        out = tmp_path / name
        out.symlink_to(victim)
        done = subprocess.run([sys.executable, "-m", "vcamd", "swap", "--config", str(config), "--face",
                               str(assets / "images" / "newton.png"), "-i", str(given), "-o", str(out)],
                              capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(0))
        assert done.returncode == 0, done.stderr
        assert victim.read_bytes() == b"the victim's own file"
        assert not out.is_symlink() and oct(out.stat().st_mode & 0o777) == oct(0o600)


def test_sigterm_during_a_video_swap_leaves_no_partial_file(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    """Before: killed by the signal with its .partial file left next to OUT."""
    import signal
    import time

    config = swap_config(tmp_path, standins, badge=False)
    source = tmp_path / "in.mp4"
    _make_video(source, newton, frames=400)
    out = tmp_path / "out.mp4"
    proc = subprocess.Popen([sys.executable, "-m", "vcamd", "swap", "--config", str(config), "--face",
                             str(assets / "images" / "newton.png"), "-i", str(source), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".out.partial-*")):  # the swap loop has started writing
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no partial file appeared"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "vcamd: stopped (SIGTERM)", err
    assert not list(tmp_path.glob(".out.partial*")) and not out.exists()


@pytest.mark.parametrize("kind", ["video", "photo"])
def test_an_output_folder_that_cannot_hold_files_is_one_line(tmp_path: Path, standins, assets: Path, newton, kind) -> None:  # type: ignore[no-untyped-def]
    """Issue 36 item 5: `--output` under /proc (a folder even root cannot create files in) ended in
    a traceback for a video."""
    config = swap_config(tmp_path, standins)
    source = assets / "images" / "newton.png"
    if kind == "video":
        source = tmp_path / "in.mp4"
        _make_video(source, newton, frames=3)
    out = Path(f"/proc/facelive-swap-test.{'mp4' if kind == 'video' else 'png'}")
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "--input", source, "--output", out)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("vcamd: error:")]
    assert len(errors) == 1 and str(out) in errors[0] and "/proc" in errors[0], done.stderr[-2000:]
    assert not out.exists()


def test_an_output_name_over_the_limit_is_one_line(tmp_path: Path, standins, assets: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / ("n" * 300 + ".png")
    done = _vcamd("swap", "--config", swap_config(tmp_path, standins), "--face", assets / "images" / "newton.png",
                  "--input", assets / "images" / "newton.png", "--output", out)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "cannot be used (File name too long)" in done.stderr

"""vcamd.files.audio and the swap command's use of it, in process: what happens when the sound cannot be kept."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from vcamd.commands.swap import _keep_audio
from vcamd.common.errors import VcamdError
from vcamd.files.audio import audio_track_count, mux_audio
from vcamd.files.videofile import VideoFile


def _tone_clip(path: Path, seconds: float = 1.0, rate: int = 16000) -> None:
    with av.open(str(path), "w") as out:
        video = out.add_stream("mpeg4", rate=10)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = out.add_stream("aac", rate=rate)
        audio.layout = "mono"
        for _ in range(int(seconds * 10)):
            for packet in video.encode(av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="bgr24")):
                out.mux(packet)
        tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(rate * seconds)) / rate)).astype(np.float32)
        for start in range(0, len(tone), 1024):
            frame = av.AudioFrame.from_ndarray(tone[None, start : start + 1024], format="fltp", layout="mono")
            frame.sample_rate, frame.pts = rate, start
            for packet in audio.encode(frame):
                out.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode(None):
                out.mux(packet)


def test_track_count(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    _tone_clip(clip)
    assert audio_track_count(clip) == 1
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\0" * 1000)
    assert audio_track_count(junk) == 0


def test_unreadable_video_is_a_one_line_error_and_leaves_nothing(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    _tone_clip(clip)
    junk = tmp_path / "video-only.mp4"
    junk.write_bytes(b"not a video" * 100)
    out = tmp_path / "out.mp4"
    with pytest.raises(VcamdError) as info:
        mux_audio(junk, clip, out)
    assert f"cannot copy the audio of {clip} into out.mp4" in info.value.message and "\n" not in str(info.value)
    assert not out.exists()


def test_when_the_sound_cannot_be_kept_the_swapped_video_still_is(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    clip = tmp_path / "clip.mp4"
    _tone_clip(clip)
    partial = tmp_path / ".out.partial-1.mp4"
    partial.write_bytes(b"swapped frames FFmpeg cannot read back" * 10)
    out = tmp_path / "out.mp4"
    video = VideoFile(out, fourcc="mp4v", fps=30.0, size=(64, 48), what="output")
    summary = _keep_audio(video, partial, clip, frames=10)
    assert summary == "audio NOT kept (see the warning)"
    assert out.read_bytes().startswith(b"swapped frames") and not partial.exists()
    warning = capsys.readouterr().err
    assert warning.startswith("vcamd: warning: cannot copy the audio of") and f"{out} has no sound" in warning
    assert not list(tmp_path.glob(".out.partial-1-audio*"))

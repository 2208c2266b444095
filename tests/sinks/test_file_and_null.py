"""FileSink writes an mp4 that OpenCV reads back frame for frame; NullSink counts."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from support.video import read_video, video_fps

from vcamd.common.errors import VcamdError
from vcamd.sinks.file import FileSink
from vcamd.sinks.null import NullSink


def test_writes_a_readable_mp4_with_every_frame(tmp_path, solid):
    path = tmp_path / "out.mp4"
    sink = FileSink(path, 320, 240, 25.0)
    sink.open()
    colours = [(20 * i, 255 - 20 * i, 128) for i in range(12)]
    for bgr in colours:
        sink.send(solid(320, 240, bgr))
    sink.close()
    sink.close()  # idempotent
    frames, fps = read_video(path), video_fps(path)
    assert len(frames) == 12 and sink.frames_sent == sink.frames_written == 12
    assert fps == pytest.approx(25.0)
    for frame, bgr in zip(frames, colours):
        assert frame.shape == (240, 320, 3)
        assert np.abs(frame[120, 160].astype(int) - np.array(bgr)).max() <= 12


def test_frames_of_another_size_are_resized_not_lost(tmp_path, solid):
    # cv2.VideoWriter silently drops frames of the wrong size; the sink must not.
    path = tmp_path / "mixed.mp4"
    sink = FileSink(path, 320, 240, 30.0)
    sink.open()
    for i in range(6):
        sink.send(solid(640, 480, (0, 0, 200)) if i % 2 else solid(320, 240, (200, 0, 0)))
    sink.close()
    frames = read_video(path)
    assert len(frames) == 6 and all(f.shape == (240, 320, 3) for f in frames)
    assert frames[1][120, 160, 2] > 180 and frames[0][120, 160, 0] > 180


def test_the_caller_may_reuse_its_frame_buffer(tmp_path, solid):
    """Frames are encoded later on the writer thread; the sink must have kept its own pixels."""
    path = tmp_path / "reuse.mp4"
    sink = FileSink(path, 160, 120, 30.0)
    sink.open()
    buffer = solid(160, 120, (0, 0, 255))
    sink.send(buffer)
    buffer[:] = (255, 0, 0)  # the engine drawing the next frame into the same array
    sink.send(buffer)
    sink.close()
    sink.send(buffer)  # a late frame after close is ignored
    frames = read_video(path)
    assert len(frames) == 2 and (sink.frames_sent, sink.frames_written, sink.failure) == (2, 2, None)
    assert frames[0][60, 80, 2] > 200 and frames[0][60, 80, 0] < 40
    assert frames[1][60, 80, 0] > 200 and frames[1][60, 80, 2] < 40


def test_missing_folder(tmp_path):
    path = tmp_path / "no" / "such" / "out.mp4"
    with pytest.raises(VcamdError) as info:
        FileSink(path, 64, 64, 30.0).open()
    assert f"folder {path.parent} does not exist" in str(info.value) and "mkdir -p" in str(info.value)
    assert not path.parent.exists()


def test_bad_paths_are_refused_with_the_reason(tmp_path):
    (tmp_path / "clip.mp4").mkdir()
    with pytest.raises(VcamdError, match="is a folder"):
        FileSink(tmp_path / "clip.mp4", 64, 64, 30.0).open()
    (tmp_path / "plain").write_text("x")
    with pytest.raises(VcamdError, match="is not a folder"):
        FileSink(tmp_path / "plain" / "out.mp4", 64, 64, 30.0).open()
    with pytest.raises(VcamdError, match=r"\.mp4 extension"):
        FileSink(tmp_path / "out.avi", 64, 64, 30.0).open()


def test_unwritable_location(tmp_path):
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(VcamdError, match="not writable"):
            FileSink(locked / "out.mp4", 64, 64, 30.0).open()
    # Even root cannot create files in /proc: the writer fails to open and says so.
    with pytest.raises(VcamdError, match=r"--sink file:/proc/facelive-test.mp4: cannot create a file in /proc|not writable"):
        FileSink(Path("/proc/facelive-test.mp4"), 64, 64, 30.0).open()


def test_send_before_open_is_a_programming_error(tmp_path, solid):
    with pytest.raises(RuntimeError, match="before open"):
        FileSink(tmp_path / "x.mp4", 64, 64, 30.0).send(solid(64, 64, (0, 0, 0)))


def test_null_sink_counts(solid):
    sink = NullSink(64, 64)
    with pytest.raises(RuntimeError, match="before open"):
        sink.send(solid(64, 64, (0, 0, 0)))
    sink.open()
    for _ in range(7):
        sink.send(solid(64, 64, (0, 0, 0)), {"fps": {"published": 30.0}})
    sink.close()
    sink.send(solid(64, 64, (0, 0, 0)))  # after close: ignored, not counted
    assert sink.frames_sent == 7
    assert "null" in sink.describe()


def test_the_recording_is_private_and_never_written_through_a_symlink(tmp_path, solid):
    """Before: written through a link planted at PATH (the victim's file overwritten), 0666 under umask 000."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"the victim's own file")
    path = tmp_path / "out.mp4"
    path.symlink_to(victim)
    old_umask = os.umask(0)
    try:
        sink = FileSink(path, 160, 120, 30.0)
        sink.open()
        sink.send(solid(160, 120, (0, 0, 255)))
        sink.close()
    finally:
        os.umask(old_umask)
    assert victim.read_bytes() == b"the victim's own file"
    assert not path.is_symlink() and oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert len(read_video(path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mp4", "victim.txt"]

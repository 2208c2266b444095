"""A stop (SIGTERM → `Stopped`) that lands between making a temporary file and recording it leaves
no file behind (`vcamd.common.stopping.held_off`). `vcamd swap` stopped just as its output's
temporary appeared left `.OUT.partial-…` now and then (tests/commands/test_swap.py, on a busy
machine): the signal arrived inside `private_temporary`, after the file was made and before the
writer knew it. Here the signal is sent at exactly that point, every time."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from vcamd.common import stopping
from vcamd.files import private_files, videofile


@pytest.fixture
def sigterm_raises_stopped():
    before = signal.getsignal(signal.SIGTERM)
    stopping.install()
    yield
    signal.signal(signal.SIGTERM, before)


def test_held_off_delays_the_stop_to_the_end_of_the_block(sigterm_raises_stopped) -> None:
    reached = []
    with pytest.raises(stopping.Stopped):
        with stopping.held_off():
            os.kill(os.getpid(), signal.SIGTERM)
            reached.append("after the signal, inside the block")
    assert reached == ["after the signal, inside the block"]


def test_a_stop_while_the_video_temporary_is_made_leaves_no_file(tmp_path: Path, monkeypatch, sigterm_raises_stopped) -> None:
    made = private_files.private_temporary

    def made_then_stopped(path: Path | str, tag: str = "partial") -> Path:
        temporary = made(path, tag)
        os.kill(os.getpid(), signal.SIGTERM)  # the stop lands after the file exists, before it is returned
        return temporary

    monkeypatch.setattr(videofile, "private_temporary", made_then_stopped)
    video = videofile.VideoFile(tmp_path / "out.mp4", fourcc="mp4v", fps=10.0, size=(64, 48), what="output")
    with pytest.raises(stopping.Stopped):
        try:
            video.open()
            video.write(np.zeros((48, 64, 3), np.uint8))
        except BaseException:
            video.discard()  # what `vcamd swap` does with any exception, a stop included
            raise
    assert list(tmp_path.iterdir()) == []


def test_a_stop_swallowed_inside_a_weakref_callback_is_raised_at_the_next_check(sigterm_raises_stopped, monkeypatch) -> None:
    """Python runs the handler wherever the main thread is; inside a weak reference's callback its
    `Stopped` is printed as "Exception ignored" and dropped (the import system's module-lock callbacks
    run during a swap: a CI run's `vcamd swap` wrote its whole video after SIGTERM and exited 0).
    The stop must still end the command at its loop's next `raise_if_stopped`."""
    import sys
    import weakref

    swallowed: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: swallowed.append(unraisable.exc_value))

    def signalled_in_callback(_ref: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecodes after the signal: the handler runs here, inside the callback
            pass

    class Thing:
        pass

    thing = Thing()
    ref = weakref.ref(thing, signalled_in_callback)
    del thing  # the callback runs; its Stopped is swallowed, nothing propagates here
    assert ref() is None and len(swallowed) == 1 and isinstance(swallowed[0], stopping.Stopped)
    with pytest.raises(stopping.Stopped):
        stopping.raise_if_stopped()


def test_no_stop_no_raise(sigterm_raises_stopped) -> None:
    stopping.raise_if_stopped()  # nothing came: the loop goes on

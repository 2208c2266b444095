"""An icon whose event loop fails before it is ready leaves no thread behind: pystray's setup thread
(not a daemon thread) is released through the one adapter that reaches into pystray's private state
(vcamd.tray.pystray_setup). pystray's dummy backend is such an icon: its event loop raises at once."""

from __future__ import annotations

import logging
import threading

import pytest
from support.waiting import wait_for

from vcamd.tray.backends import BackendChoice
from vcamd.tray.lifecycle import run_tray
from vcamd.tray.pystray_setup import release_setup_thread


def _setup_threads() -> list[threading.Thread]:
    # pystray starts it as threading.Thread(target=setup_handler): Python names it "Thread-N (setup_handler)".
    return [t for t in threading.enumerate() if t.name.endswith("(setup_handler)")]


def test_an_icon_whose_loop_fails_releases_pystrays_setup_thread_and_starts_nothing(controller, pystray_without_display):
    before = set(_setup_threads())
    started: list[object] = []
    with pytest.raises(NotImplementedError):  # pystray's dummy backend has no event loop
        run_tray(controller, started.append, backend=BackendChoice("dummy", "a test: the loop fails at once"))
    wait_for(lambda: not (set(_setup_threads()) - before), "pystray's setup thread to end")
    assert started == []  # released into the daemon's setup, which saw the failure and started no engine


def test_a_pystray_without_the_ready_queue_is_said_not_hidden(caplog):
    class NoQueue:
        pass

    with caplog.at_level(logging.WARNING, logger="vcamd.tray.pystray_setup"):
        assert release_setup_thread(NoQueue()) is False
    assert any("cannot release pystray's setup thread" in r.getMessage() for r in caplog.records)

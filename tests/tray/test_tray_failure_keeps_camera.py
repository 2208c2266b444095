"""The tray icon is a convenience: when it fails or closes on its own, the camera keeps running."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

from support.waiting import wait_for

import vcamd.tray.lifecycle as tray
from vcamd.tray.controller import TrayApp


class Controller:
    def __init__(self) -> None:
        self.quit = threading.Event()
        self.quit_calls = 0

    def request_quit(self) -> None:
        self.quit_calls += 1
        self.quit.set()


def test_an_icon_that_never_comes_up_runs_the_engine_headless(monkeypatch) -> None:
    def broken_tray(controller, setup, **_):
        raise RuntimeError("cannot connect to the tray host")

    monkeypatch.setattr(tray, "run_tray", broken_tray)
    ran_on = []
    result = tray.run_engine_with_tray(Controller(), lambda: ran_on.append(threading.current_thread()) or "stats")
    assert result == "stats" and ran_on == [threading.main_thread()]  # here, with no engine thread


def test_an_icon_that_closes_by_itself_leaves_the_engine_running(monkeypatch, caplog) -> None:
    controller = Controller()
    after_the_icon: dict[str, bool] = {}

    def tray_that_dies(ctrl, setup, **_):
        setup(SimpleNamespace())  # starts the engine thread
        return SimpleNamespace(quit_chosen=False)  # the event loop ended: not the user's Quit

    def said_it_keeps_running() -> bool:
        return any("keeps running" in r.getMessage() for r in caplog.records)

    def engine_run():
        # The icon is gone once the daemon has dealt with its end: by saying the camera runs on, or
        # (wrongly) by asking the engine to quit. Still running then, it stops when `vcamd quit` asks.
        wait_for(lambda: controller.quit.is_set() or said_it_keeps_running(), "the icon's end to be dealt with")
        after_the_icon["asked to quit"] = controller.quit.is_set()
        controller.request_quit()  # `vcamd quit`
        return "ran until vcamd quit"

    monkeypatch.setattr(tray, "run_tray", tray_that_dies)
    with caplog.at_level(logging.WARNING, logger=tray.log.name):
        assert tray.run_engine_with_tray(controller, engine_run) == "ran until vcamd quit"
    assert after_the_icon == {"asked to quit": False}
    assert controller.quit_calls == 1  # only `vcamd quit`'s: the icon's end asked for nothing


def test_quit_from_the_menu_stops_the_engine(monkeypatch, caplog) -> None:
    controller = Controller()

    def tray_quit_chosen(ctrl, setup, **_):
        app = TrayApp(ctrl)
        setup(app)  # starts the engine thread
        app.quit()  # the menu's Quit item itself; the event loop then ends
        return app

    monkeypatch.setattr(tray, "run_tray", tray_quit_chosen)
    with caplog.at_level(logging.WARNING, logger=tray.log.name):
        assert tray.run_engine_with_tray(controller, lambda: controller.quit.wait(5) and "stopped") == "stopped"
    assert controller.quit_calls == 1  # the menu's, and nothing else asked
    assert not any("keeps running" in r.getMessage() for r in caplog.records)


def test_an_icon_that_fails_while_vcamd_quit_stops_the_engine_says_nothing_of_running_on(monkeypatch, caplog) -> None:
    controller = Controller()

    def tray_that_fails_coming_down(ctrl, setup, *, quit_event, **_):
        setup(SimpleNamespace())
        ctrl.request_quit()  # what `vcamd quit` does through the control socket
        assert quit_event.wait(5), "the engine did not stop"
        raise RuntimeError("the tray host went away while the icon was being removed")

    monkeypatch.setattr(tray, "run_tray", tray_that_fails_coming_down)
    with caplog.at_level(logging.DEBUG, logger=tray.log.name):
        assert tray.run_engine_with_tray(controller, lambda: controller.quit.wait(5) and "stopped") == "stopped"
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not any("keeps running" in line for line in said), said
    # ...and the failure was seen, not missed: it is logged for debugging only.
    assert any("failed while stopping" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)

"""The tray's process lifecycle: the pystray icon on the main thread, the engine loop beside it.

pystray wants the main thread, so the daemon calls `run_engine_with_tray(engine, lambda:
engine.run(...), ...)` from its main thread: the engine loop runs in a worker started from pystray's
`setup`, and each side stops the other when it ends. Ctrl-C asks the engine to quit; a tray that
fails or closes on its own leaves the camera running. The menu and the icon's drawing are
`TrayApp` (vcamd.tray.controller).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from vcamd.common.signalrelay import relayed
from vcamd.control.protocol import Controllable
from vcamd.tray.backends import BackendChoice, Pystray, choose_backend, import_pystray
from vcamd.tray.controller import TrayApp
from vcamd.tray.pystray_setup import release_setup_thread
from vcamd.tray.view import APP_TITLE, TrayState, render_icon
from vcamd.tray.xorg import is_xorg, show_xorg_icon, stop_icon

log = logging.getLogger(__name__)
T = TypeVar("T")

ICON_NAME = "facelive"
"""pystray icon name; the X11 window class becomes "facelive" / "facelive SystemTrayIcon"."""


def _quit_on_sigint_in_glib(controller: Controllable) -> None:
    """gtk/appindicator: pystray sets SIGINT to SIG_DFL before its GLib loop (Ctrl-C would kill the
    daemon with the camera open); route it to the engine's quit instead, as on the xorg backend."""
    from gi.repository import GLib

    def on_interrupt() -> bool:
        log.info("tray: interrupted; stopping the engine")
        controller.request_quit()
        return bool(GLib.SOURCE_CONTINUE)  # keep the handler

    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, on_interrupt)


def run_tray(
    controller: Controllable,
    setup: Callable[[TrayApp], None],
    *,
    quit_event: threading.Event | None = None,
    backend: BackendChoice | None = None,
    **app_options: Any,
) -> TrayApp:
    """Show the tray icon and run its event loop on the calling (main) thread until Quit.

    `setup(app)` runs once the icon is up, in pystray's setup thread: start the engine there (and
    keep `app` to send notifications, e.g. about a broken config edit). When it raises, the icon is
    taken down and the error is raised here. `quit_event` set by the daemon (e.g. after `vcamd
    quit`) takes the icon down within one poll interval. `backend`: default `choose_backend()`.
    `app_options` are passed to TrayApp (recent_faces, open_preview, edit_config, ...).
    """
    choice = backend or choose_backend()
    pystray: Pystray = import_pystray(choice.name)
    log.info("tray: pystray backend %s (%s)", choice.name, choice.why)
    app = TrayApp(controller, quit_event=quit_event, **app_options)
    icon = pystray.Icon(ICON_NAME, render_icon(TrayState.off), f"{APP_TITLE}: starting", app.menu())
    failure: list[BaseException] = []
    loop_failed = threading.Event()

    app.attach(icon)  # before run(): the xorg set-up must not race the event loop

    def on_ready(icon: Any) -> None:
        if loop_failed.is_set():
            return  # released by the failure below: start nothing
        if choice.name in ("gtk", "appindicator"):
            _quit_on_sigint_in_glib(controller)
        try:
            if is_xorg(icon):
                show_xorg_icon(icon)  # never over the event loop's own connection (see vcamd.tray.xorg)
            else:
                icon.visible = True
            setup(app)
        except BaseException as exc:  # noqa: BLE001 — handed to the main thread below
            failure.append(exc)
            stop_icon(icon)
            return
        app.start_polling()

    try:
        icon.run(setup=on_ready)
    except BaseException:
        # pystray's setup thread (not a daemon thread) waits for a "ready" the failed backend never
        # sends, and would keep the process from exiting: release it into on_ready, which returns.
        loop_failed.set()
        release_setup_thread(icon)
        raise
    finally:
        app.loop_ended()
        app.stop_polling()
    if failure:
        raise failure[0]
    return app


def _ctrl_c_asks_to_quit(controller: Controllable) -> AbstractContextManager[None]:
    """While the tray runs on the main thread, Ctrl-C (SIGINT) asks the engine to quit and the
    tray follows it, like `vcamd quit` and SIGTERM; a second Ctrl-C asks again.

    Relayed (vcamd.common.signalrelay), not a Python handler: the main thread waits in the tray's
    event loop, where a handler would run only at the next desktop event; and a KeyboardInterrupt
    would land in pystray's xorg event loop, whose bare `except:` swallows it (and it may cut an X
    request in half). Off the main thread signals cannot be relayed: nothing changes there.
    """

    def on_interrupt() -> None:
        log.info("tray: interrupted; stopping the engine")
        controller.request_quit()

    return relayed({signal.SIGINT: on_interrupt})


def run_engine_with_tray(
    controller: Controllable,
    engine_run: Callable[[], T],
    *,
    on_app: Callable[[TrayApp], None] | None = None,
    **app_options: Any,
) -> T:
    """The daemon's entry with a tray: the engine loop in a worker thread, the tray on this one.

    `engine_run` is the blocking engine loop (e.g. `lambda: engine.run(max_frames=n)`). When it
    returns (`vcamd quit`, SIGTERM, --frames reached) the icon is taken down; when the user picks
    Quit or presses Ctrl-C, the engine is asked to quit. Returns what `engine_run` returned and
    raises what it raised. Call it from the main thread (pystray needs it on macOS).
    `on_app(app)` runs once the icon is up, before the engine starts (keep `app` to notify).
    """
    engine_done = threading.Event()
    results: list[T] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(engine_run())
        except BaseException as exc:  # noqa: BLE001 — re-raised on the main thread below
            errors.append(exc)
        finally:
            engine_done.set()

    worker = threading.Thread(target=work, name="engine", daemon=True)

    def setup(app: TrayApp) -> None:
        if on_app is not None:
            on_app(app)
        worker.start()

    quit_chosen = False
    try:
        with _ctrl_c_asks_to_quit(controller):
            quit_chosen = run_tray(controller, setup, quit_event=engine_done, **app_options).quit_chosen
    except Exception as exc:  # the icon is a convenience: its failure must not take the camera down
        if engine_done.is_set():  # the engine stopped (`vcamd quit`) and the icon failed coming down
            log.debug("the tray icon failed while stopping (%s)", exc)
        else:
            log.warning("the tray icon failed (%s); FaceLive Camera keeps running without it", exc)
    if worker.ident is None:
        log.warning("no tray icon; running without it (control it with `vcamd on/off/status/quit`)")
        work()  # the icon never came up: run the engine here, headless (a Ctrl-C meanwhile asked it to quit)
    else:
        if not engine_done.is_set() and not quit_chosen:
            # The icon went away on its own (pystray error, tray host gone): keep the camera.
            log.warning("the tray icon closed; FaceLive Camera keeps running (stop it with `vcamd quit`)")
        worker.join()
    if errors:
        raise errors[0]
    return results[0]

"""Workarounds for pystray 0.19's xorg backend (XEmbed tray icons: XFCE, MATE, trayer).

That backend has no pop-up menu: a left click runs the default item. Four problems of it (with
python-xlib 0.33) are worked around here: clicks never delivered (`enable_xorg_clicks`), a stop
that leaves the event loop blocked (`XorgWaker`), and icon updates, the first show and the stop
that deadlock its connection (`XorgIconWindow`, `show_xorg_icon`, `stop_xorg_icon`). Xlib is imported lazily: it
connects to the X server.

What the deadlocks share: pystray runs a call made from another thread (`icon.visible = True`
from its setup thread, `icon.icon = ...` from ours) by sending a message over the icon's own X
connection — the one its event loop reads from — and python-xlib's threaded connection can then
lose the reply the loop waits for. So no thread but pystray's loop uses that connection: the
messages go over connections of our own.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from PIL import Image

log = logging.getLogger(__name__)


def is_xorg(icon: Any) -> bool:
    return icon is not None and type(icon).__module__ == "pystray._xorg"


def enable_xorg_clicks(icon: Any) -> None:
    """Make a left click on the xorg backend's icon reach pystray.

    pystray 0.19's xorg backend handles ButtonPress but creates its window without selecting
    ButtonPressMask, so X never delivers the click and the default action never runs. Selecting it
    here is the smallest fix; other backends have no `_window` and are left alone.
    """
    from Xlib import X

    window, display = icon._window, icon._display
    window.change_attributes(event_mask=X.ExposureMask | X.StructureNotifyMask | X.ButtonPressMask)
    display.flush()


class XorgWaker:
    """Wakes pystray's xorg event loop when `Icon.stop()` left it blocked.

    With pystray 0.19.5 and python-xlib 0.33, `Icon.stop()` called from another thread left the
    loop blocked in `select()` in 6 of 20 tries under Xvfb (the icon window was gone, `run()` never
    returned). Any new event on the icon's X connection unblocks it, so after a stop we send a
    no-op ClientMessage to a small helper window of that connection, from a second connection,
    until the loop has returned.
    """

    def __init__(self, display_name: str, window: Any) -> None:
        self.display_name = display_name
        self.window = window

    @classmethod
    def for_icon(cls, icon: Any) -> XorgWaker:
        from Xlib import X

        display = icon._display
        window = display.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent, window_class=X.InputOnly)
        display.flush()
        return cls(display.get_display_name(), window)

    def wake_until(self, ended: threading.Event, interval_s: float = 0.3, attempts: int = 20) -> None:
        from Xlib.display import Display
        from Xlib.protocol.event import ClientMessage

        for _ in range(attempts):
            if ended.wait(interval_s):
                return
            display = Display(self.display_name)
            try:
                wake = ClientMessage(window=self.window, client_type=display.intern_atom("_FACELIVE_WAKE"),
                                     data=(32, [0, 0, 0, 0, 0]))
                display.send_event(self.window, wake, event_mask=0)
                display.flush()
            finally:
                display.close()
        log.warning("tray: the icon's event loop did not end after stop()")


SHOW_TIMEOUT_S = 60.0
"""How long `show_xorg_icon` waits for pystray's event loop to have shown the icon."""

STOP_TIMEOUT_S = 10.0
"""How long `stop_xorg_icon` waits for pystray's event loop to have run its stop."""


def show_xorg_icon(icon: Any, timeout_s: float = SHOW_TIMEOUT_S) -> None:
    """`icon.visible = True` on the xorg backend, from any thread, without using the icon's own X
    connection: pystray's setter sends its `_update_icon` and `_show` requests to the event loop
    over that connection and waits for the loop's answer; under Xvfb the loop once stayed blocked
    in a reply (`get_geometry`, repainting an Expose) for 60 s while the setter's message went
    out on the same connection (one daemon start in a loaded run of the whole suite), and the
    daemon never started its camera. Here the same two messages go over a connection of our own
    (`_run_on_loop`). Raises what the loop's call raised, or TimeoutError."""
    if icon.visible:
        return
    _run_on_loop(icon, ("_update_icon", "_show") if not icon._icon_valid else ("_show",), timeout_s)
    icon._visible = True  # what the setter records once `_show` ran


def stop_xorg_icon(icon: Any, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """`icon.stop()` on the xorg backend, from any thread, without using the icon's own X
    connection. pystray's `stop()` from another thread sends its `_stop` over that connection and
    waits for the loop's answer without a timeout: in a loaded suite run the loop was repainting
    (`get_geometry`) when the stop went out, lost its reply, and both threads waited for good.
    On the loop's own thread (or before the loop runs) pystray's stop is called as it is. A loop
    that does not answer within `timeout_s` is logged, not waited for: `XorgWaker` then wakes it,
    and the caller goes on stopping."""
    loop = getattr(icon, "_thread", None)
    if loop is None or loop.ident == threading.get_ident():
        icon.stop()
        return
    if not icon._running:
        return
    try:
        _run_on_loop(icon, ("_stop",), timeout_s)
    except TimeoutError as exc:
        log.warning("tray: %s", exc)
    # The rest of pystray's stop(): its setup thread given time to end, the icon marked stopped
    # (else its __del__ stops it again, over the loop's connection, once the X server may be gone).
    setup = getattr(icon, "_setup_thread", None)
    if setup is not None and setup.ident != threading.get_ident():
        setup.join(timeout=icon.SETUP_THREAD_TIMEOUT)
    icon._running = False


def stop_icon(icon: Any) -> None:
    """Stop a pystray icon from any thread: the xorg backend's with `stop_xorg_icon`, the others'
    as pystray does."""
    if is_xorg(icon):
        stop_xorg_icon(icon)
    else:
        icon.stop()


def _run_on_loop(icon: Any, names: tuple[str, ...], timeout_s: float) -> None:
    """Have pystray's xorg event loop run its implementations `names` (those its
    `_rewrite_implementation` dispatches: `_show`, `_stop`, ...) one after the other, asked over an X
    connection of our own; each answer is read from pystray's own queue. Raises what the loop's call
    raised, or TimeoutError."""
    import queue

    from Xlib import X
    from Xlib.display import Display
    from Xlib.protocol.event import ClientMessage

    display = Display(icon._display.get_display_name())
    try:
        for name in names:  # pystray's atom for each: `_rewrite_implementation`
            message = ClientMessage(window=icon._window.id, client_type=display.intern_atom(f"_PYSTRAY_{name.upper()}"),
                                    data=(32, [X.CurrentTime, 0, 0, 0, 0]))
            display.send_event(icon._window.id, message, event_mask=X.NoEventMask)
            display.flush()
            try:
                answer = icon._queue.get(timeout=timeout_s)
            except queue.Empty:
                raise TimeoutError(f"the tray icon's event loop did not run {name} within {timeout_s:g} s") from None
            if answer is not True:
                raise answer[1].with_traceback(answer[2])
    finally:
        display.close()


class XorgIconWindow:
    """xorg: paints the icon, sets its tooltip and keeps it docked, over the poller's own X connection.

    pystray's xorg backend forwards `icon.icon = ...` from other threads to its event loop over
    the same python-xlib connection the loop reads from, and under Xvfb that deadlocked in about
    1 of 30 runs (the loop stuck waiting for a reply inside the forwarded update). X windows can
    be drawn from any connection, so the poller draws the icon window itself and hands pystray the
    new image only as the data its own Expose handler repaints from.

    It also re-sends the dock request when the window is not embedded while a tray host exists:
    the first request can go unanswered (seen in ~1 of 30 starts), and a tray host can start after
    us (session start) or restart.
    """

    _SYSTEM_TRAY_REQUEST_DOCK = 0

    def __init__(self, display_name: str, window_id: int, retry_s: float = 2.0) -> None:
        from Xlib.display import Display

        self._display = Display(display_name)
        self._window = self._display.create_resource_object("window", window_id)
        self._gc = self._window.create_gc()
        self._root = self._display.screen().root
        self._tray_atom = self._display.intern_atom(f"_NET_SYSTEM_TRAY_S{self._display.get_default_screen()}")
        self._opcode_atom = self._display.intern_atom("_NET_SYSTEM_TRAY_OPCODE")
        self._retry_s = retry_s
        self._last_request = time.monotonic()  # pystray sent the first request when the icon was shown

    @classmethod
    def for_icon(cls, icon: Any) -> XorgIconWindow:
        return cls(icon._display.get_display_name(), icon._window.id)

    def show(self, icon: Any, image: Image.Image | None, title: str) -> None:
        from Xlib.error import XError

        try:
            if image is not None:
                geometry = self._window.get_geometry()
                canvas = Image.new("RGB", (geometry.width, geometry.height))
                canvas.paste(image.resize((geometry.width, geometry.height), Image.Resampling.LANCZOS))
                # What pystray's Expose handler paints from (plain attributes, no X traffic). Each
                # is replaced by a complete object, never cleared: the event loop may be drawing
                # from them right now. (Setting _icon_data to None raced the loop's
                # _assert_icon_data: AttributeError, pystray's loop ended and the daemon with it,
                # in ~1 of 20 daemon starts under Xvfb.)
                icon._icon = image
                icon._icon_data = canvas
                self._window.put_pil_image(self._gc, 0, 0, canvas)
            self._window.set_wm_name(title)
            self._display.flush()
        except XError as exc:
            log.debug("tray: icon window not drawable (%s)", exc)  # stopping, or not mapped yet

    def keep_docked(self) -> None:
        from Xlib import X
        from Xlib.error import XError
        from Xlib.protocol.event import ClientMessage

        try:
            embedded = self._window.query_tree().parent.id != self._root.id
            owner = self._display.get_selection_owner(self._tray_atom)
        except XError:
            return  # the icon window is gone (stopping)
        now = time.monotonic()
        if embedded or owner == X.NONE or now - self._last_request < self._retry_s:
            return
        self._last_request = now
        log.info("tray: icon not embedded in the system tray; asking the tray host again")
        request = ClientMessage(
            window=owner, client_type=self._opcode_atom,
            data=(32, [X.CurrentTime, self._SYSTEM_TRAY_REQUEST_DOCK, self._window.id, 0, 0]),
        )
        self._display.send_event(owner, request, event_mask=X.NoEventMask)
        self._display.flush()

    def close(self) -> None:
        self._display.close()


def systray_owner_present(display_name: str | None = None) -> bool:
    """X11: whether a system tray host owns `_NET_SYSTEM_TRAY_S<screen>` (so an icon can dock)."""
    from Xlib import X
    from Xlib.display import Display

    display = Display(display_name)
    try:
        atom = display.intern_atom(f"_NET_SYSTEM_TRAY_S{display.get_default_screen()}")
        return bool(display.get_selection_owner(atom) != X.NONE)  # python-xlib is untyped
    finally:
        display.close()

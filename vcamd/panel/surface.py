"""The control page in `vcamd run`: `open_panel` runs it beside the daemon, and `WithPanelUrl` is the
engine as the control socket and the tray drive it, with the page's address in its status."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from vcamd.control.protocol import Controllable
from vcamd.panel.server import PanelServer, RecentFaceList


class WithPanelUrl:
    """The engine as the control socket and the tray drive it: every state it reports — `status()`
    and the state a change answers with — also carries "panel_url" (the plain address) and
    "panel_token" (for Bearer scripts: the socket is private to the user; never put it on a command
    line). `panel_login_url()` is the tray's one-time address (opened through `panel.login.login_page`).
    Everything else is the engine's own (one control surface, not a copy of it)."""

    STATE_ANSWERS = frozenset({"set_enabled", "toggle", "set_source_face", "set_quality", "set_badge", "reload_config"})
    """The engine's changes that answer with the state after they applied."""

    def __init__(self, engine: Controllable, panel: PanelServer) -> None:
        self._engine = engine
        self._panel = panel

    def _with_url(self, state: Any) -> Any:
        if not isinstance(state, dict):
            return state
        return {**state, "panel_url": self._panel.base_url, "panel_token": self._panel.token}

    def panel_login_url(self) -> str:
        return self._panel.login_url()

    def status(self) -> dict[str, Any]:
        state: dict[str, Any] = self._with_url(self._engine.status())
        return state

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._engine, name)
        if name not in self.STATE_ANSWERS:
            return attr
        return lambda *args, **kwargs: self._with_url(attr(*args, **kwargs))


@contextlib.contextmanager
def open_panel(engine: Controllable, cfg: Any, recent_faces: RecentFaceList) -> Iterator[Controllable]:
    """For `vcamd run`: the control page while the block runs (unless [panel] enabled = false);
    yields what the control socket should serve — the engine, with "panel_url" in its status.
    `recent_faces` is the tray's list (the caller's: the page sits below the tray)."""
    if not cfg.panel.enabled:
        yield engine
        return
    from vcamd.panel.faces import uploads_dir

    panel = PanelServer(engine, cfg.panel, faces_dir=uploads_dir(), recent_faces=recent_faces,
                        badge=cfg.disclosure.badge)
    with panel:
        yield WithPanelUrl(engine, panel)

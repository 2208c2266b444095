"""What the tray shows, computed from `Controllable.status()`: icon state, labels, the menu model.

Pure data and Pillow only: no pystray, no display. The menu controller (vcamd.tray.controller) turns
the menu model into a pystray menu; tests read it directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from vcamd.common.quality import Level, is_degraded, label
from vcamd.remote.summary import describe_server

APP_TITLE = "FaceLive Camera"


class TrayState(StrEnum):
    on = "on"
    off = "off"
    degraded = "degraded"
    error = "error"


STATE_COLOURS: dict[TrayState, tuple[int, int, int]] = {
    TrayState.on: (38, 166, 65),
    TrayState.off: (128, 128, 128),
    TrayState.degraded: (230, 162, 0),
    TrayState.error: (210, 40, 40),
}
"""Background colour of the icon per state (tests look for these in a screenshot of the tray)."""

HEALTHY_STATES = ("running", "starting")
"""Engine states that are not a problem; any other (camera offline, error, stopped) shows red."""


@dataclass(frozen=True, slots=True)
class TrayView:
    """The engine status as the tray presents it."""

    state: TrayState
    enabled: bool
    level: Level | None
    """The level the engine runs at now (None when the status does not say)."""
    quality: Level | None
    """The quality the user fixed, None = automatic (the watchdog decides)."""
    source_face: Path | None
    summary: str
    """One line: tooltip and the text of the Status menu item."""
    detail: str
    """Several lines: the Status notification."""
    panel_url: str | None = None
    """The control page's address (no secret in it), when the daemon serves one."""
    headline: str = ""
    """The summary without the changing numbers (fps, ms): the Status menu item. A menu label that
    changed every second would rebuild the menu under the user's pointer (new dbusmenu ids)."""
    models: tuple[tuple[str, str], ...] = ()
    """(role, the running model) for the swapper and the enhancer."""
    model_choices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(role, the models of that role in the models dir), what the menu can switch to."""
    needs: tuple[str, ...] = ()
    """What swapping still needs (status' `swap_needs`), a few words each: "the face models"."""


STARTING_VIEW = TrayView(TrayState.off, False, None, None, None, "starting", "starting")


def parse_level(value: object) -> Level | None:
    """A level as the status reports it (Level, int, name or None) → Level | None."""
    if value is None or isinstance(value, Level):
        return value
    if isinstance(value, bool):
        raise ValueError(f"level {value!r} is not a Level")
    if isinstance(value, int):
        return Level(value)
    if isinstance(value, str):
        if value in ("", "auto"):
            return None
        if value.isdigit():
            return Level(int(value))
        try:
            return Level[value]
        except KeyError:
            raise ValueError(f"level {value!r} is not one of {[m.name for m in Level]}") from None
    raise ValueError(f"level {value!r} is not a Level")


def view_from_status(status: Mapping[str, Any], quality_fallback: Level | None = None) -> TrayView:
    """Turn `controller.status()` into what the icon and menu show.

    `quality_fallback` is what the tray itself last chose; it is used only when the status has no
    `quality` key.
    """
    enabled = bool(status.get("enabled", False))
    state_text = str(status.get("state", "running"))
    level = parse_level(status.get("level"))
    quality = parse_level(status["quality"]) if "quality" in status else quality_fallback
    face = status.get("source_face")
    source_face = Path(face) if face else None
    config_error = status.get("config_error")
    panel_url = status.get("panel_url") or None
    models, model_choices, loading = _models_of(status)
    swap_needs = [n for n in status.get("swap_needs") or [] if isinstance(n, Mapping)]
    needs = tuple(str(n.get("label") or n.get("what") or "?") for n in swap_needs)

    problem = None
    if state_text not in HEALTHY_STATES:
        problem = state_text
    if config_error:
        problem = f"config error: {config_error}"
    if enabled and needs and not problem:
        problem = f"swap on, but it needs {', '.join(needs)}"  # the models failed to load while on: every frame covered

    if problem:
        state = TrayState.error
    elif not enabled:
        state = TrayState.off
    elif level is not None and is_degraded(level):
        state = TrayState.degraded
    else:
        state = TrayState.on

    if state is TrayState.degraded and level is not None:  # degraded is always at a level
        headline = f"swap on, degraded ({label(level).lower()})"
    elif state is TrayState.error:
        headline = problem or "error"
    elif needs:
        headline = f"swap off: needs {', '.join(needs)}"
    else:
        headline = f"swap {state.value}"
    fps = status.get("fps")
    latency = status.get("latency_ms")
    numbers = []
    if isinstance(fps, (int, float)):
        numbers.append(f"{fps:.0f} fps")
    if isinstance(latency, Mapping):  # the engine reports percentiles: show the median
        latency = latency.get("p50")
    if isinstance(latency, (int, float)):
        numbers.append(f"{latency:.0f} ms")
    summary = headline + (f" · {' · '.join(numbers)}" if numbers else "")

    providers = status.get("providers") or {}
    provider_text = ", ".join(sorted({str(p) for p in providers.values()})) if isinstance(providers, Mapping) else str(providers)
    lines = [
        f"Swap: {'on' if enabled else 'off'} ({state_text})",
        f"Quality: {label(level) if level is not None else 'unknown'}"
        f" ({'auto' if quality is None else 'fixed'})",
        f"Source face: {source_face or 'none'}",
    ]
    if status.get("source_face_pick"):  # a group photo: which of its faces was taken
        lines.append(f"  {status['source_face_pick']}")
    if numbers:
        lines.append("Speed: " + ", ".join(numbers))
    for role, name in models:
        lines.append(f"{role.capitalize()}: {name}")
    if loading:
        lines.append(f"Loading: {loading} (the running model swaps until it is ready)")
    if provider_text:
        lines.append(f"Runs on: {provider_text}")
    server = status.get("server")
    if isinstance(server, Mapping):  # [models] server: the swap runs on Triton elsewhere
        lines.append(f"Server: {describe_server(server)}")
    for need in swap_needs:
        lines.append(f"To swap: {need.get('what', '?')} — {need.get('fix', '')}")
    if config_error:
        lines.append(f"Config error: {config_error}")
    return TrayView(state, enabled, level, quality, source_face, summary, "\n".join(lines), panel_url, headline, models, model_choices, needs)


def _models_of(status: Mapping[str, Any]) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[str, ...]], ...], str | None]:
    """(role, running model), (role, models there to switch to) and the model loading, from the
    status' `models` and `model_choices` (left out by engines that do not report them)."""
    found_models, found_choices = status.get("models"), status.get("model_choices")
    models: Mapping[str, Any] = found_models if isinstance(found_models, Mapping) else {}
    choices: Mapping[str, Any] = found_choices if isinstance(found_choices, Mapping) else {}
    running = tuple((role, Path(str(models[role])).name if models.get(role) else "") for role in MODEL_ROLES if models.get(role))
    present = tuple(
        (role, tuple(str(c["name"]) for c in choices.get(role, []) if isinstance(c, Mapping) and c.get("present") and c.get("name")))
        for role in MODEL_ROLES
    )
    loading = models.get("loading")
    return running, tuple((role, names) for role, names in present if names), str(loading) if loading else None


# ---------------------------------------------------------------------------------------------
# The menu model


class Verb(StrEnum):
    """What a menu item does; the app maps each to a `Controllable` call or a desktop action."""

    toggle = "toggle"
    enable = "enable"
    face = "face"
    choose_face = "choose_face"
    quality = "quality"
    model = "model"
    open_panel = "open_panel"
    edit_config = "edit_config"
    show_status = "show_status"
    quit = "quit"


@dataclass(frozen=True, slots=True)
class Command:
    verb: Verb
    arg: Any = None


@dataclass(frozen=True, slots=True)
class MenuEntry:
    """One menu item as data. `command` None with `submenu` None is a separator."""

    label: str
    command: Command | None = None
    checked: bool | None = None
    radio: bool = False
    default: bool = False
    visible: bool = True
    submenu: tuple[MenuEntry, ...] | None = None

    @property
    def is_separator(self) -> bool:
        return self.command is None and self.submenu is None


SEPARATOR = MenuEntry("- - - -")

TOGGLE_LABEL = "Switch the swap"
MODEL_ROLES = ("swapper", "enhancer")
MODEL_MENU_LABELS = {"swapper": "Swap model", "enhancer": "Enhancer model"}
"""The model submenus: the models of each role in the models dir (`vcamd models pull` adds more)."""
OPEN_PANEL_LABEL = "Open control page"


def build_menu(view: TrayView, faces: Sequence[Path]) -> tuple[MenuEntry, ...]:
    """The whole tray menu for this view; `faces` are the source-face shortcuts (current first).

    Swap on / Swap off is a radio pair (an item's label says what clicking it does, on every
    backend). The hidden first item is the default action: a left click on the icon (xorg, gtk)
    switches the swap; pystray runs a default item even when it is not shown.
    """
    face_items = tuple(
        MenuEntry(face.name, Command(Verb.face, face), checked=view.source_face == face, radio=True) for face in faces
    )
    quality_items = (MenuEntry("Auto", Command(Verb.quality, None), checked=view.quality is None, radio=True),) + tuple(
        MenuEntry(label(level), Command(Verb.quality, level), checked=view.quality == level, radio=True)
        for level in Level
    )
    running = dict(view.models)
    model_menus = tuple(
        MenuEntry(MODEL_MENU_LABELS[role], submenu=tuple(
            MenuEntry(name, Command(Verb.model, (role, name)), checked=running.get(role) == name, radio=True) for name in names))
        for role, names in view.model_choices
    )
    return (
        MenuEntry(TOGGLE_LABEL, Command(Verb.toggle), default=True, visible=False),
        MenuEntry("Swap on", Command(Verb.enable, True), checked=view.enabled, radio=True),
        MenuEntry("Swap off", Command(Verb.enable, False), checked=not view.enabled, radio=True),
        MenuEntry("Source face", submenu=face_items + (SEPARATOR, MenuEntry("Choose…", Command(Verb.choose_face))) if face_items
                  else (MenuEntry("Choose…", Command(Verb.choose_face)),)),
        MenuEntry("Quality", submenu=quality_items),
        *model_menus,
        SEPARATOR,
        MenuEntry(OPEN_PANEL_LABEL, Command(Verb.open_panel)),
        MenuEntry("Edit config", Command(Verb.edit_config)),
        MenuEntry(f"Status: {view.headline or view.summary}", Command(Verb.show_status)),
        SEPARATOR,
        MenuEntry("Quit", Command(Verb.quit)),
    )


def faces_for_menu(current: Path | None, recent: Sequence[Path]) -> list[Path]:
    """The current source face first, then the recent ones, without duplicates."""
    faces: list[Path] = []
    for face in [current, *recent]:
        if face is not None and face not in faces:
            faces.append(face)
    return faces


# ---------------------------------------------------------------------------------------------
# The icon image


def render_icon(state: TrayState, size: int = 64) -> Image.Image:
    """The tray image: a rounded square in the state's colour with a white camera glyph.

    Off strikes the camera through, degraded adds a "!" badge, error a "×" badge, so the states
    differ in shape as well as colour (readable for colour-blind users too).
    """
    image = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    s = size / 64  # everything below is drawn on a 64-unit grid
    draw.rounded_rectangle((0, 0, size - 1, size - 1), radius=round(12 * s), fill=STATE_COLOURS[state] + (255,))
    white = (255, 255, 255, 255)
    # Camera: body and lens (a triangle pointing right).
    draw.rounded_rectangle((10 * s, 22 * s, 40 * s, 44 * s), radius=round(4 * s), fill=white)
    draw.polygon([(42 * s, 33 * s), (54 * s, 24 * s), (54 * s, 42 * s)], fill=white)
    if state is TrayState.off:
        draw.line((8 * s, 54 * s, 56 * s, 12 * s), fill=white, width=max(1, round(5 * s)))
    elif state is TrayState.degraded:
        draw.rectangle((28 * s, 4 * s, 34 * s, 14 * s), fill=white)
        draw.rectangle((28 * s, 16 * s, 34 * s, 19 * s), fill=white)
    elif state is TrayState.error:
        w = max(1, round(4 * s))
        draw.line((24 * s, 48 * s, 40 * s, 62 * s), fill=white, width=w)
        draw.line((40 * s, 48 * s, 24 * s, 62 * s), fill=white, width=w)
    return image

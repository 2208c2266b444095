"""The tray's menu descriptor, icon states and helpers, without a display.

The menu is the real pystray Menu (dummy backend, so no X connection); its items are activated the
way pystray's backends activate them (`item(icon)`), against an in-test controller that logs calls.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from PIL import Image

from vcamd.common.errors import VcamdError
from vcamd.common.quality import Level
from vcamd.tray import (
    STATE_COLOURS,
    NoFileDialog,
    RecentFaces,
    TrayApp,
    TrayState,
    parse_level,
    pick_image_file,
    render_icon,
    tray_available,
    view_from_status,
)
from vcamd.tray.view import Command, Verb


class Notes(list):
    """Collects (title, message) of the tray's notifications."""

    def __call__(self, message: str, title: str) -> None:
        self.append((title, message))


@pytest.fixture
def notes() -> Notes:
    return Notes()


@pytest.fixture
def app(controller, notes, assets, pystray_without_display):
    return TrayApp(
        controller,
        recent_faces=lambda: [assets / "images" / "newton.png", assets / "images" / "crowd_selfie.jpg"],
        notify=notes,
        run_in_background=lambda fn: fn(),  # run background actions inline, so tests see their effect
    )


def texts(menu) -> list[str]:
    return [item.text for item in menu]


def item(menu, path: str):
    first, _, rest = path.partition("/")
    found = next(i for i in menu if i.text == first)
    return item(found.submenu, rest) if rest else found


def test_menu_texts_and_initial_checks(app, controller):
    app.refresh()
    menu = app.menu()
    assert texts(menu) == [
        "Swap on", "Swap off", "Source face", "Quality", "- - - -", "Open control page", "Edit config",
        "Status: swap on", "- - - -", "Quit",
    ]
    assert item(menu, "Swap on").checked is True and item(menu, "Swap off").checked is False
    assert item(menu, "Swap on").radio and item(menu, "Swap off").radio
    # The default item (a left click on the icon) is hidden from the menu and switches the swap.
    assert [i.text for i in menu.items if i.default] == ["Switch the swap"]
    assert texts(item(menu, "Quality").submenu) == ["Auto", "Full quality", "No pixel boost", "No enhancer", "Lower resolution", "Every other frame"]
    quality_checks = [i.checked for i in item(menu, "Quality").submenu]
    assert quality_checks == [True, False, False, False, False, False]
    assert all(i.radio for i in item(menu, "Quality").submenu)
    assert texts(item(menu, "Source face").submenu) == ["newton.png", "crowd_selfie.jpg", "- - - -", "Choose…"]
    assert controller.calls == []  # building and reading the menu changes nothing


def test_the_default_action_toggles_and_the_radio_pair_sets(app, controller):
    app.refresh()
    menu = app.menu()
    menu(None)  # the default action, what a left click on the icon runs
    assert controller.calls == [("set_enabled", False)]
    assert item(menu, "Swap on").checked is False and item(menu, "Swap off").checked is True
    assert app.view.state is TrayState.off
    menu(None)
    assert controller.calls[-1] == ("set_enabled", True)
    item(menu, "Swap off")(None)
    assert controller.calls[-1] == ("set_enabled", False)
    item(menu, "Swap off")(None)  # a radio item sets, it does not toggle
    assert controller.calls[-1] == ("set_enabled", False) and app.view.state is TrayState.off
    item(menu, "Swap on")(None)
    assert controller.calls[-1] == ("set_enabled", True)
    assert item(menu, "Swap on").checked is True
    assert app.view.state is TrayState.on


def test_quality_radio_follows_the_choice(app, controller):
    app.refresh()
    menu = app.menu()
    item(menu, "Quality/Lower resolution")(None)
    assert controller.calls == [("set_quality", "low_res")]
    checks = {i.text: i.checked for i in item(menu, "Quality").submenu}
    assert checks == {"Auto": False, "Full quality": False, "No pixel boost": False, "No enhancer": False, "Lower resolution": True,
                      "Every other frame": False}
    assert app.view.state is TrayState.degraded
    assert item(menu, "Status: swap on, degraded (lower resolution)")
    assert app.view.summary == "swap on, degraded (lower resolution) · 30 fps · 41 ms"  # the tooltip
    item(menu, "Quality/Auto")(None)
    assert controller.calls[-1] == ("set_quality", None)
    assert item(menu, "Quality/Auto").checked is True
    assert app.view.state is TrayState.on


def test_source_face_from_recent_list(app, controller, notes, assets):
    app.refresh()
    menu = app.menu()
    item(menu, "Source face/crowd_selfie.jpg")(None)
    assert controller.source_face == assets / "images" / "crowd_selfie.jpg"
    checks = {i.text: i.checked for i in item(menu, "Source face").submenu if i.text != "- - - -"}
    assert checks == {"crowd_selfie.jpg": True, "newton.png": False, "Choose…": None}
    assert notes[-1] == ("FaceLive Camera", "Source face: crowd_selfie.jpg")


def test_a_bad_source_face_is_reported_and_the_tray_survives(controller, notes, tmp_path, pystray_without_display):
    not_a_photo = tmp_path / "notes.txt"
    not_a_photo.write_text("hello")
    app = TrayApp(controller, recent_faces=lambda: [not_a_photo], notify=notes)
    app.refresh()
    item(app.menu(), "Source face/notes.txt")(None)
    assert controller.source_face is None
    title, message = notes[-1]
    assert title == f"Cannot use {not_a_photo} as the source face"
    assert "notes.txt" in message
    assert app.view.state is TrayState.on  # still working


def test_choose_uses_the_picked_file(controller, notes, assets, pystray_without_display):
    asked = []

    def choose(start: Path) -> Path:
        asked.append(start)
        return assets / "images" / "newton.png"

    remembered = []
    app = TrayApp(controller, choose_face=choose, remember_face=remembered.append, notify=notes,
                  run_in_background=lambda fn: fn())
    app.refresh()
    item(app.menu(), "Source face/Choose…")(None)
    assert asked == [Path.home()]
    assert controller.source_face == assets / "images" / "newton.png"
    assert remembered == [assets / "images" / "newton.png"]
    # The current face now leads the list even though no recent-faces provider knows it.
    assert texts(item(app.menu(), "Source face").submenu)[0] == "newton.png"


def test_choose_without_a_file_dialog_points_to_the_config(controller, notes, tmp_path, pystray_without_display):
    def no_dialog(start: Path) -> Path:
        raise NoFileDialog("no file dialog available", fix="install python3-tk or zenity")

    config = tmp_path / "config.toml"
    app = TrayApp(controller, choose_face=no_dialog, config_path=config, notify=notes, run_in_background=lambda fn: fn())
    item(app.menu(), "Source face/Choose…")(None)
    title, message = notes[-1]
    assert title == "No file dialog"
    assert f"Set [swap] source_face in {config}" in message
    assert "install python3-tk or zenity" in message
    assert controller.calls == []


@pytest.mark.skipif(sys.platform != "linux", reason="checks the Linux dialog fallbacks")
def test_pick_image_file_without_any_dialog_raises(tmp_path, monkeypatch):
    if shutil.which("zenity") or shutil.which("kdialog"):
        pytest.skip("zenity or kdialog is installed here")
    monkeypatch.delenv("DISPLAY", raising=False)  # so tkinter, when installed, cannot open a window
    with pytest.raises(NoFileDialog, match=r"no file dialog could be shown \(tkinter: .+; zenity and kdialog"):
        pick_image_file(tmp_path)


def test_status_and_quit(app, controller, notes):
    app.refresh()
    menu = app.menu()
    item(menu, "Status: swap on")(None)
    title, message = notes[-1]
    assert title == "FaceLive Camera: on"
    assert "Swap: on (running)" in message and "Runs on: CPUExecutionProvider" in message
    item(menu, "Quit")(None)
    assert controller.calls[-1] == ("request_quit", None)


def test_control_page_and_config_actions_call_through(controller, notes, pystray_without_display, tmp_path, monkeypatch):
    monkeypatch.setenv("VCAMD_RUNTIME_DIR", str(tmp_path / "rt"))  # where the private login page goes
    opened = []
    app = TrayApp(controller, open_preview=lambda: opened.append("preview"), edit_config=lambda: opened.append("config"),
                  open_url=lambda url: opened.append(url), notify=notes, run_in_background=lambda fn: fn())
    item(app.menu(), "Open control page")(None)  # no panel_url in the status: the preview page instead
    item(app.menu(), "Edit config")(None)
    controller.panel_url = "http://127.0.0.1:8790/"
    item(app.menu(), "Open control page")(None)  # a one-time login address, minted at the click
    # A private page that moves on to the one-time address, never the address on a command line.
    assert opened[:2] == ["preview", "config"] and len(opened) == 3
    assert opened[2].parent == tmp_path / "rt" and "code=" not in str(opened[2])
    assert 'content="0;url=http://127.0.0.1:8790/?code=one-time"' in opened[2].read_text()
    bare = TrayApp(controller, notify=notes)
    item(bare.menu(), "Edit config")(None)
    assert "vcamd config init" in notes[-1][1]
    controller.panel_url = None
    item(bare.menu(), "Open control page")(None)
    assert "control page is not available" in notes[-1][1]


def test_engine_states_map_to_icon_states(controller, notes, pystray_without_display):
    app = TrayApp(controller, notify=notes)
    assert app.refresh().state is TrayState.on
    controller.level = Level.frame_skip
    assert app.refresh().state is TrayState.degraded
    controller.state = "camera offline"
    view = app.refresh()
    assert view.state is TrayState.error and view.summary.startswith("camera offline")
    controller.state = "running"
    controller.config_error = "[camera] fps = -1: must be > 0"
    view = app.refresh()
    assert view.state is TrayState.error and "[camera] fps" in view.summary
    controller.config_error = None
    controller.enabled = False
    assert app.refresh().state is TrayState.off


def test_a_failing_status_shows_the_error_state(notes, pystray_without_display):
    class Broken:
        def status(self):
            raise ConnectionError("engine gone")

    app = TrayApp(Broken(), notify=notes)  # type: ignore[arg-type]
    view = app.refresh()
    assert view.state is TrayState.error
    assert "engine gone" in view.summary


def test_view_from_status_reads_the_engine_status_shape():
    # The shape LiveEngine.status() reports: latency as percentiles, quality "auto" or a level name.
    view = view_from_status({"enabled": True, "state": "starting", "level": "full", "quality": "auto",
                             "fps": 0.0, "latency_ms": {"p50": 38.2, "p95": 51.0}, "source_face": None,
                             "providers": {}, "config_error": None})
    assert view.state is TrayState.on and view.summary == "swap on · 0 fps · 38 ms"
    assert view_from_status({"enabled": True, "state": "offline", "level": "full"}).state is TrayState.error


def test_what_swapping_needs_is_in_the_status_item_and_the_notification():
    from vcamd.live.readiness import FACE_MISSING, consent_missing

    needs = [consent_missing(withdrawn=False).to_json(), FACE_MISSING.to_json()]
    view = view_from_status({"enabled": False, "state": "running", "level": "full", "swap_needs": needs})
    assert view.state is TrayState.off  # a step still to take, not an error
    assert view.headline == "swap off: needs consent, a source face" and view.needs == ("consent", "a source face")
    for need in needs:
        assert f"To swap: {need['what']} — {need['fix']}" in view.detail.splitlines()
    # On, yet unable to swap (the models failed to load while on): every frame covered, shown as an error.
    on = view_from_status({"enabled": True, "state": "running", "level": "full", "swap_needs": needs[:1]})
    assert on.state is TrayState.error and on.headline == "swap on, but it needs consent"


def test_the_status_detail_says_where_the_swap_runs_when_a_server_runs_it():
    server = {"url": "grpc://gpu-box:8001", "tls": True, "state": "away", "rtt_ms": None, "call_ms": None,
              "serves": [], "error": "connection refused", "fallback": "none"}
    detail = view_from_status({"enabled": True, "state": "running", "level": "full", "server": server}).detail
    assert "Server: grpc://gpu-box:8001 away; mutual TLS; connection refused; fallback none" in detail.splitlines()
    up = server | {"state": "up", "rtt_ms": 1.24, "serves": ["inswapper_128"], "error": None}
    assert ("Server: grpc://gpu-box:8001 up; 1.2 ms round trip; mutual TLS; serves inswapper_128; fallback none"
            in view_from_status({"enabled": True, "state": "running", "server": up}).detail.splitlines())
    assert "Server:" not in view_from_status({"enabled": True, "state": "running", "server": None}).detail


def test_the_status_detail_says_which_face_of_a_group_photo_was_taken():
    pick = "the largest of the 29 faces in the photo (61×80 px at x=1107, y=190)"
    view = view_from_status({"enabled": True, "state": "running", "level": "full", "source_face": "/f/solvay.png",
                             "source_face_pick": pick})
    assert f"Source face: /f/solvay.png\n  {pick}" in view.detail
    assert "  the largest" not in view_from_status({"enabled": True, "state": "running", "source_face": "/f/me.png",
                                                    "source_face_pick": None}).detail


def test_view_from_status_reads_a_reported_quality_and_rejects_bad_levels():
    view = view_from_status({"enabled": True, "state": "running", "level": 2, "quality": "low_res"})
    assert view.quality is Level.low_res and view.level is Level.low_res
    assert view_from_status({"enabled": True, "level": "full", "quality": "auto"}, Level.low_res).quality is None
    assert parse_level("no_enhancer") is Level.no_enhancer
    with pytest.raises(ValueError, match="best"):
        parse_level("best")
    with pytest.raises(ValueError):
        parse_level(9)


def test_icon_states_differ_in_colour_and_shape():
    images = {state: render_icon(state) for state in TrayState}
    for state, image in images.items():
        assert image.size == (64, 64) and image.mode == "RGBA"
        rgb = image.convert("RGB")
        colours = rgb.getcolors(64 * 64)
        _, dominant = max(colours)
        assert dominant == STATE_COLOURS[state], state
    # Shapes: the white glyph pixels differ between every pair of states.
    masks = {s: {xy for xy in ((x, y) for x in range(64) for y in range(64)) if images[s].getpixel(xy) == (255, 255, 255, 255)}
             for s in TrayState}
    states = list(TrayState)
    for i, a in enumerate(states):
        for b in states[i + 1:]:
            assert masks[a] != masks[b], (a, b)
    assert isinstance(render_icon(TrayState.on, 22), Image.Image)


def test_tray_available_needs_a_display():
    if sys.platform in ("win32", "darwin"):
        pytest.skip("no DISPLAY on this platform")
    ok, reason = tray_available({})
    assert not ok and "DISPLAY" in reason


def test_recent_faces_keeps_the_latest_first(tmp_path, assets):
    recent = RecentFaces(tmp_path / "state" / "recent_faces.json", limit=2)
    assert recent.list() == []
    newton, crowd = assets / "images" / "newton.png", assets / "images" / "crowd_selfie.jpg"
    gone = tmp_path / "gone.png"
    gone.write_bytes(b"x")
    recent.add(newton)
    recent.add(gone)
    recent.add(crowd)
    assert recent.list() == [crowd.resolve(), gone.resolve()]
    gone.unlink()
    assert recent.list() == [crowd.resolve()]
    recent.add(newton)
    assert recent.list() == [newton.resolve(), crowd.resolve()]
    (tmp_path / "state" / "recent_faces.json").write_text("{broken")
    assert recent.list() == []


def test_backend_choice_follows_the_desktop():
    from vcamd.tray.backends import BackendChoice, choose_backend

    bus = {"DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent", "DISPLAY": ":0"}

    def choose(env, *, watcher=False, indicator=True, gtk=True):
        return choose_backend(env, "linux", watcher_present=lambda _env: watcher, has_appindicator=lambda: indicator,
                              has_gtk=lambda: gtk).name

    assert choose(bus, watcher=True) == "appindicator"  # KDE, GNOME with the AppIndicator extension
    assert choose(bus) == "gtk"  # XFCE/MATE panels: XEmbed, still with a menu
    assert choose(bus, indicator=False) == "gtk"
    assert choose(bus, indicator=False, gtk=False) == "xorg"  # no PyGObject
    assert choose({"DISPLAY": ":0"}, watcher=True) == "xorg"  # no session bus: the GTK backends cannot start
    assert choose({**bus, "PYSTRAY_BACKEND": "xorg"}, watcher=True) == "xorg"  # the user's word wins
    assert choose_backend({}, "win32") == BackendChoice("win32", "Windows")
    assert not BackendChoice("xorg", "").has_menu and BackendChoice("gtk", "").has_menu


def test_menu_model_is_data_built_from_the_status():
    from vcamd.tray.view import Command, Verb, build_menu, view_from_status

    view = view_from_status({"enabled": False, "state": "running", "level": "full", "quality": "low_res",
                             "source_face": "/photos/ada.jpg", "panel_url": "http://127.0.0.1:1/?t=x"})
    menu = build_menu(view, [Path("/photos/ada.jpg"), Path("/photos/bob.png")])
    visible = [e.label for e in menu if e.visible]
    assert visible[:4] == ["Swap on", "Swap off", "Source face", "Quality"]
    hidden = [e for e in menu if not e.visible]
    assert [(e.label, e.command, e.default) for e in hidden] == [("Switch the swap", Command(Verb.toggle), True)]
    by_label = {e.label: e for e in menu}
    assert by_label["Swap off"].checked is True and by_label["Swap off"].command == Command(Verb.enable, False)
    faces = {e.label: e.checked for e in by_label["Source face"].submenu if not e.is_separator}
    assert faces == {"ada.jpg": True, "bob.png": False, "Choose…": None}
    quality = {e.label: e.checked for e in by_label["Quality"].submenu}
    assert quality["Lower resolution"] is True and quality["Auto"] is False
    assert view.panel_url == "http://127.0.0.1:1/?t=x"
    assert [e.label for e in build_menu(view, [])[3].submenu] == ["Choose…"]


def test_the_menu_is_rebuilt_only_when_what_it_shows_changes(app, controller):
    class Icon:
        icon = title = None
        rebuilds = 0

        def update_menu(self):
            self.rebuilds += 1

    icon = Icon()
    app.attach(icon)
    app.refresh()
    app.draw()
    assert icon.rebuilds == 1 and icon.title == "FaceLive Camera: swap on · 30 fps · 41 ms"
    controller.fps = 12.4  # the numbers change every second: the tooltip follows, the menu stays
    app.refresh()
    app.draw()
    assert icon.title == "FaceLive Camera: swap on · 12 fps · 41 ms" and icon.rebuilds == 1
    app.run(Command(Verb.enable, False))
    app.draw()
    assert icon.rebuilds == 2 and item(app.menu(), "Swap off").checked is True


def test_the_model_menus_offer_the_models_there_and_switch_through_the_engine(controller, notes, pystray_without_display):
    from vcamd.tray.view import build_menu, view_from_status

    status = {"enabled": True, "state": "running", "level": "full",
              "models": {"swapper": "inswapper_128_fp16", "enhancer": "gfpgan_1.4", "loading": "ghost_1_256"},
              "model_choices": {"swapper": [{"name": "inswapper_128_fp16", "license": "nc", "present": True},
                                            {"name": "ghost_1_256", "license": "Apache-2.0", "present": True},
                                            {"name": "simswap_256", "license": "nc", "present": False}],
                                "enhancer": [{"name": "gfpgan_1.4", "license": "Apache-2.0", "present": False}]}}
    view = view_from_status(status)
    by_label = {e.label: e for e in build_menu(view, [])}
    swappers = {e.label: (e.checked, e.command) for e in by_label["Swap model"].submenu}
    assert swappers == {"inswapper_128_fp16": (True, Command(Verb.model, ("swapper", "inswapper_128_fp16"))),
                        "ghost_1_256": (False, Command(Verb.model, ("swapper", "ghost_1_256")))}  # not the one not downloaded
    assert "Enhancer model" not in by_label  # none of them there: no menu
    assert "Loading: ghost_1_256" in view.detail and "Swapper: inswapper_128_fp16" in view.detail
    assert "Swap model" not in {e.label for e in build_menu(view_from_status({"enabled": True}), [])}  # an engine without models

    app = TrayApp(controller, notify=notes, run_in_background=lambda fn: fn())
    app.run(Command(Verb.model, ("swapper", "ghost_1_256")))
    assert controller.calls[-1] == ("set_model", ["swapper", "ghost_1_256"])

    def refuse(role, name):
        raise VcamdError(f"model file {name}.onnx is missing", fix=f"run `vcamd models pull {name}`")

    controller.set_model = refuse
    app.run(Command(Verb.model, ("swapper", "simswap_256")))
    assert notes[-1][0] == "Cannot switch the swapper to simswap_256" and "vcamd models pull simswap_256" in notes[-1][1]

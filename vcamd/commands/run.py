"""`vcamd run`: the live daemon — camera in, swapped face out as the "FaceLive Camera"."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vcamd.commands import Subcommands, add_config_option, check_output_file
from vcamd.common.signalrelay import relayed
from vcamd.files.private_files import private_parent, write_private_atomic
from vcamd.sinks.registry import SINK_FORMS

if TYPE_CHECKING:
    from vcamd.config.schema import Config
    from vcamd.control.protocol import Controllable
    from vcamd.live.engine import LiveEngine
    from vcamd.live.loading import FacePipeline, WarmUp
    from vcamd.tray import RecentFaces

log = logging.getLogger(__name__)


def register(subparsers: Subcommands) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the live camera: swap your face and publish it as the virtual camera",
        description="Capture the camera, swap the face live and publish the result to a sink "
        "(the 'FaceLive Camera' virtual camera by default). Stops on Ctrl-C, `vcamd quit`, or after --frames. "
        "Without the models, a source face or consent it starts with swapping off and says what is missing "
        "(`vcamd status`, the control page, the tray); `vcamd on` works once they are there, without a restart.",
    )
    add_config_option(p)
    p.add_argument("--source", default=None, metavar="S",
                   help='camera index ("0"), /dev/videoN, a video file played like a camera, or "synthetic" (default: [camera] device)')
    p.add_argument("--sink", default="virtual", metavar="SINK", help=f"where the output goes: {SINK_FORMS}")
    p.add_argument("--face", type=Path, default=None, metavar="PATH",
                   help="source face photo (overrides [swap] source_face)")
    p.add_argument("--loop", action="store_true", help="for a video-file source: start again at the end")
    p.add_argument("--frames", type=int, default=None, metavar="N", help="stop after N published frames")
    p.add_argument("--stats-json", type=Path, default=None, metavar="PATH", help="write the run's stats here at the end")
    p.add_argument("--no-tray", action="store_true", help="do not show the tray icon")
    p.add_argument("--i-have-consent", action="store_true",
                   help="confirm you have the consent of the person in the source face photo (or set [swap] source_consent = true)")
    # The daemon leaves with os._exit after its shutdown (see vcamd.cli.leave_process).
    p.set_defaults(func=handle, leave_process=True)


def handle(args: argparse.Namespace) -> int:
    started_at = process_started_at()  # the zero of the stats' startup_ms
    from vcamd.common.errors import VcamdError
    from vcamd.config.folders import user_config_path
    from vcamd.config.reading import load_config
    from vcamd.control.client import ControlClient
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import LiveEngine
    from vcamd.live.readiness import look_at_model_files
    from vcamd.sinks.registry import open_sink
    from vcamd.system.logs import setup_logging
    from vcamd.system.memory import apply_memory_cap

    if args.frames is not None and args.frames <= 0:
        raise VcamdError(f"--frames {args.frames}: must be a positive number of frames", fix="omit it to run until stopped")
    if args.stats_json is not None:
        check_output_file(args.stats_json, "--stats-json")  # found out now, not after the run with the stats lost
    cfg, config_path = load_config(args.config)
    file_cfg = cfg  # as the file says it; the watcher diffs later edits against this
    if args.face is not None:
        cfg = cfg.model_copy(update={"swap": cfg.swap.model_copy(update={"source_face": args.face.expanduser().resolve()})})
    setup_logging("debug" if args.verbose else cfg.runtime.log_level)
    if ControlClient().is_running():
        raise VcamdError("FaceLive Camera is already running", fix="stop it with `vcamd quit`, or drive it with `vcamd on/off/status`")
    _check_models_ready(cfg, capped=apply_memory_cap(cfg.runtime.max_memory_gb) is not None)
    open_sink(args.sink, cfg, cfg.camera.width, cfg.camera.height, cfg.camera.fps)  # a bad --sink fails now, not after model loading
    spec = args.source or cfg.camera.device
    loop = True if args.loop else None
    source = open_source(spec, cfg.camera, loop=loop)
    # No face pipeline yet: the engine opens the camera and the output, publishes covered frames at
    # once and loads the models in the background (the same path a [models] reload takes).
    engine = LiveEngine(
        cfg,
        source=source,
        # Reads engine.cfg when called, so a reload of [virtual_camera]/[preview] reopens with the new values.
        sink_factory=lambda w, h, fps: open_sink(args.sink, engine.cfg, w, h, fps),
        faces=None,
        config_path=config_path,
        # A reload that changes [camera] reopens the same source (--source wins over [camera] device).
        source_factory=lambda camera: open_source(args.source or camera.device, camera, loop=loop),
        pipeline_factory=_face_pipeline,
        file_cfg=file_cfg,
        log_level_pinned=bool(args.verbose),  # -v pins debug for the whole run
        started_at=started_at,
        # Without consent, a face or the model files, it runs with swapping off and says why.
        consent_given=cfg.swap.source_consent or args.i_have_consent,
        look_at_models=look_at_model_files,
    )
    watched = config_path or user_config_path()
    # SIGTERM (service stop) ends the run like Ctrl-C: the sink is closed and stats are written.
    # SIGHUP (`systemctl reload`, `kill -HUP`) re-reads the config file; the loop applies it.
    # Relayed: acted on at once even while the main thread waits in the tray's event loop.
    stop_signals: dict[signal.Signals, Callable[[], None]] = {signal.SIGTERM: engine.request_quit}
    if hasattr(signal, "SIGHUP"):
        stop_signals[signal.SIGHUP] = engine.request_reload
    with relayed(stop_signals):
        log.info("live: %s → %s", source.description, args.sink)
        # The camera and the output first: the "starting" card goes out now and the models start
        # loading, before the control page, the socket and the watcher are set up (and imported).
        engine.open()
        try:
            from vcamd.config.folders import user_state_dir
            from vcamd.control.server import ControlServer
            from vcamd.live.reload import ConfigWatcher
            from vcamd.panel import open_panel
            from vcamd.tray import RecentFaces

            # One list of recent source faces, shared by the page and the tray (the same file, one lock).
            recent = RecentFaces(user_state_dir() / "recent_faces.json")
            # The control page runs whatever the sink; the socket's status then carries its "panel_url".
            with open_panel(engine, cfg, recent) as controllable, ControlServer(controllable), ConfigWatcher(
                watched, engine.on_config_change, engine.on_config_error,
                current=file_cfg, missing_ok=config_path is None, on_note=engine.on_config_note,
            ):
                stats = _run_with_optional_tray(engine, controllable, args, cfg, watched, recent)
        finally:
            engine.close()  # when the run never started (its own end releases everything)
            _remove_partial_uploads()
    stats_lost = False
    if args.stats_json is not None:
        try:
            private_parent(args.stats_json)
            write_private_atomic(args.stats_json, json.dumps(stats, indent=2) + "\n")  # 0600, never through a symlink
        except OSError as exc:
            log.error("cannot write --stats-json %s: %s", args.stats_json, exc.strerror)
            print(json.dumps(stats), file=sys.stderr)  # the run's numbers are not lost
            stats_lost = True
    f, lat = stats["frames"], stats["latency_ms"]
    print(
        f"published {f['published']} frames at {stats['fps']['published']:.1f} fps (source {stats['fps']['source']:.1f}); "
        f"swapped {f['swapped']}, held {f['held']}, blurred {f['blurred']}, passthrough {f['passthrough']}, "
        f"swapping off {f['off']}, offline {f['offline']}, starting {f['starting']}; latency p50/p95/p99 {lat['p50']:.1f}/{lat['p95']:.1f}/{lat['p99']:.1f} ms; "
        f"{stats['cpu_ms_per_frame']:.1f} CPU-ms/frame"
    )
    # An output that could not finish its work says so once closed: a recording whose disk filled
    # up (`--sink file:`) is an error, not "published N frames".
    failure = getattr(engine.sink, "failure", None)
    if isinstance(failure, VcamdError):
        raise failure
    return 2 if stats_lost else 0


def _remove_partial_uploads() -> None:
    """An upload the stop cut short leaves its temporary file (its thread is not waited for)."""
    from vcamd.panel.faces import sweep_partial_uploads, uploads_dir

    folder = uploads_dir()
    if folder.is_dir():
        sweep_partial_uploads(folder, including_ours=True)


def _run_with_optional_tray(engine: LiveEngine, controllable: Controllable, args: argparse.Namespace, cfg: Config, config_path: Path,
                            recent: RecentFaces) -> dict[str, Any]:
    """Run the engine; with a display, the tray icon owns the main thread and the engine runs beside it.
    The tray drives `controllable`: the engine as the control socket serves it (with "panel_url");
    `recent` is the recent-faces list the control page shares."""
    if args.no_tray or not cfg.tray.enabled:
        return _run_engine(engine, args.frames)
    from vcamd.tray import (
        open_with_desktop,
        run_engine_with_tray,
        tray_available,
    )

    available, why = tray_available()
    if not available:
        log.info("no tray icon: %s (use --no-tray to silence this)", why)
        return _run_engine(engine, args.frames)
    if cfg.swap.source_face is not None:
        recent.add(cfg.swap.source_face)
    return run_engine_with_tray(
        controllable,
        lambda: _run_engine(engine, args.frames),
        recent_faces=recent.list,
        remember_face=recent.add,
        config_path=config_path,
        edit_config=(lambda: open_with_desktop(config_path)) if config_path else None,
        open_preview=lambda: _open_output_page(engine, open_with_desktop),
    )


def _open_output_page(engine: LiveEngine, open_url: Callable[[Path | str], None]) -> None:
    """The tray's "Open control page" when there is no control page: the output's own page, if it has one.
    The sink exists only once the engine runs, so its URL is read when the item is clicked. A page
    that needs a login (the preview) is opened through a private file holding a one-time address
    (`panel.login.login_page`), never with its token or a code on the opener's command line."""
    from vcamd.common.errors import VcamdError

    sink = engine.sink
    if sink is None or sink.url is None:
        raise VcamdError("the control page is not available in this session", fix="see [panel] in the config")
    login_url = getattr(sink, "login_url", None)
    if login_url is None:
        open_url(sink.url)
        return
    from vcamd.panel.login import login_page

    open_url(login_page(login_url()))


def _face_pipeline(cfg: Config, warm_up: WarmUp) -> tuple[FacePipeline, dict[str, str]]:
    """The face pipeline for `cfg` (at start-up and for a reloaded config), and which provider runs
    each of its models. `VCAMD_TEST_MODEL_LOAD_DELAY_S` (tests only) makes loading that much
    slower, to show what is published while the models load."""
    from vcamd.live.loading import load_face_pipeline

    delay = float(os.environ.get("VCAMD_TEST_MODEL_LOAD_DELAY_S", "0") or 0)
    if delay > 0:
        time.sleep(delay)
    return load_face_pipeline(cfg, warm_up)


def _check_models_ready(cfg: Config, *, capped: bool) -> None:
    """What a user can fix, found before the camera opens (cheap: no model is loaded): the model
    files there fit the memory cap, the photos the config names can be read. Missing model files
    do not stop the start: the daemon runs with swapping off and says which (`live.readiness`)."""
    from vcamd.common.errors import ModelError
    from vcamd.config.schema import FaceSelection
    from vcamd.files.images import read_image
    from vcamd.models.pipeline import local_model_paths
    from vcamd.system.memory import check_all_fit

    try:
        paths = local_model_paths(cfg)  # with [models] server, the models run there need no file here
    except ModelError:
        paths = []  # missing: the daemon starts with swapping off and says which (`live.readiness`)
    if capped and paths:
        check_all_fit(paths, cfg.runtime.max_memory_gb)  # a clear message now rather than a MemoryError inside ONNX Runtime
    if cfg.swap.source_face is not None:
        read_image(cfg.swap.source_face, "source face")
    if cfg.swap.face_selection == FaceSelection.reference and cfg.swap.reference_face is not None:
        read_image(cfg.swap.reference_face, "reference face")


def process_started_at() -> float:
    """When this process started, on `time.monotonic()`'s clock: Linux's /proc/self/stat start time
    (so interpreter start-up and imports count), else now (the command's entry)."""
    now = time.monotonic()
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command name
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        age = since_boot - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - age if 0 <= age < 600 else now


def _run_engine(engine: LiveEngine, frames: int | None) -> dict[str, Any]:
    try:
        return engine.run(max_frames=frames)
    except KeyboardInterrupt:
        return engine.stats_json()

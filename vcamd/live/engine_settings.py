"""The live engine's settings: the config it runs on, and how a change reaches the running parts.

`reconfigure` decides how each key takes effect (live / rebuild / restart) and which part owns it;
this module diffs an edit once (`reconfigure.plan`) and, on the loop's thread between two frames,
hands each owner of a changed live key its part of the new config: the parts apply their own
(`configure(...)`: watchdog, tracker, frame policy, publisher); kept here are the switches and the
whole replacements — the camera reopened, swapping, consent, a source photo embedded on the
face-loader thread, the enhancer, the log level. The face pipeline is built in the background
(`loading.PipelineBuild`; the first one once its files are there, `first_load`), installed between two
frames. `Problems`: what is wrong (`config_error`); `swap_needs`: what swapping lacks; `runtime_choices`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vcamd.common.errors import VcamdError
from vcamd.config.reading import load_config
from vcamd.config.schema import CameraConfig, Config, EnhancerConfig
from vcamd.live import reconfigure
from vcamd.live.capture.sources import FrameSource
from vcamd.live.first_load import FirstLoad
from vcamd.live.int8upgrade import Int8Upgrade
from vcamd.live.loading import FaceLoader, FacePipeline, Loaded, PipelineBuild, PipelineFactory, Tell
from vcamd.live.output.publisher import PublisherSettings
from vcamd.live.problems import Problems
from vcamd.live.readiness import (
    FACE_MISSING,
    Consent,
    ModelFilesSeen,
    Need,
    SwapNotReady,
    consent_missing,
    log_needs,
    models_key,
)
from vcamd.live.reconfigure import Owner
from vcamd.live.runtime_choices import RuntimeChoices
from vcamd.live.tracking.sizes import TrackerSettings
from vcamd.sinks.registry import OUTPUT_SECTIONS

if TYPE_CHECKING:
    from vcamd.live.frames import FrameProcessor
    from vcamd.live.parts import LiveParts

log = logging.getLogger(__name__)


class Settings:
    """The config the engine runs on, and how a change of it reaches the running parts."""

    def __init__(
        self,
        parts: LiveParts,
        frames: FrameProcessor,
        cfg: Config,
        *,
        tell: Tell,
        file_cfg: Config,
        config_path: Path | None,
        source_factory: Callable[[CameraConfig], FrameSource] | None,
        pipeline_factory: PipelineFactory | None,
        log_level_pinned: bool,
        on_first_pipeline: Callable[[], None] = lambda: None,
        consent_given: bool = True,
        look_at_models: Callable[[Config], ModelFilesSeen] | None = None,
    ) -> None:
        """`consent_given`: at start, by the config or `--i-have-consent`. `look_at_models` says
        whether the model files `cfg` names are there (`readiness.look_at_model_files`); None: they
        are taken to be (a pipeline given ready-made, tests)."""
        self._parts = parts
        self.cfg = cfg
        """The config the engine runs on: the file's, with what was chosen at run time."""
        self._tell = tell
        self.config_path = config_path
        self.problems = Problems()
        self.face_loader = FaceLoader()
        self._source_factory = source_factory
        self._build = PipelineBuild(pipeline_factory, tell) if pipeline_factory is not None else None
        self.int8 = Int8Upgrade(tell, since_start=lambda: parts.clock() - frames.startup.started_at)
        """The swapper's int8 copy, built and switched to in the background (`vcamd.inference.precision`)."""
        self._log_level_pinned = log_level_pinned
        self._on_first_pipeline = on_first_pipeline
        self.choices = RuntimeChoices(cfg, file_cfg)
        """A source face and models chosen at run time, kept over edits of the file's other keys."""
        self._pipeline_cfg = cfg  # what the running face pipeline was built from (at start-up: is being)
        self.consent = Consent(consent_given)
        self._first_load = FirstLoad.watching(
            None if look_at_models is None else lambda: look_at_models(self.cfg), self._tell_models_seen)
        """The model files, the load and its failure, while no face pipeline is installed."""
        # Who applies each live key (`reconfigure.Owner`): the parts their own settings, the rest here. Each
        # gets only what it reads: its sections, or a record of its keys (tracker, publisher); the watchdog also which changed.
        self._appliers: dict[Owner, Callable[[Config, reconfigure.Plan], None]] = {
            Owner.camera: lambda new, _: self._restart_camera(new.camera),
            Owner.watchdog: lambda new, edit: parts.watchdog.configure(new.watchdog, edit.keys_in("watchdog")),
            Owner.tracker: lambda new, _: parts.tracker.configure(TrackerSettings.of(new)),  # [detection], lowres_scale, the selection
            Owner.frames: lambda new, _: frames.configure(new.swap, new.smoothing),
            Owner.swapping: lambda new, _: self._apply_enabled(new.swap.enabled),
            Owner.consent: lambda new, _: self._consent_changed(new.swap.source_consent),
            Owner.source_face: lambda new, _: self._apply_source_face(new.swap.source_face),
            Owner.enhancer: lambda new, _: self._apply_enhancer(new.enhancer),
            Owner.logging: lambda new, _: self._apply_log_level(new.runtime.log_level),
            Owner.publisher: lambda new, _: self._apply_publisher(new),  # [disclosure], the output sections
        }

    def stop(self) -> None:
        self.face_loader.stop()
        self.int8.stop()
        self._first_load.stop()

    # -- what swapping needs ----------------------------------------------------------------------
    def swap_needs(self) -> list[Need]:
        """What swapping needs and does not have (empty: it may go on). Loop thread; no disk."""
        needs: list[Need] = []
        if self._parts.faces is None and (models := self._first_load.need()) is not None:
            needs.append(models)
        if (consent := self.consent.need()) is not None:
            needs.append(consent)
        if self._face_missing():
            needs.append(FACE_MISSING)
        return needs

    def _face_missing(self) -> bool:
        """No source face, and the swapper needs one (a DeepFaceLab model swaps in its own trained
        face: told from the config's swapper before the models load, from the model after)."""
        faces = self._parts.faces
        if faces is None:
            from vcamd.models.pipeline import has_own_identity

            return self.cfg.swap.source_face is None and not self.cfg.swap.map and not has_own_identity(self.cfg)
        return faces.source is None and faces.needs_source

    def start_swapping_off_if_not_ready(self) -> None:
        """At start: swapping stays off while something it needs is missing (said in the log)."""
        needs = self.swap_needs()
        if needs:
            self._parts.enabled = False
            log_needs(needs)

    def models_seen(self, seen: ModelFilesSeen) -> None:
        """A look at the model files (the watch, or `on`): while no face pipeline is installed,
        remember it, and load the models when they are all there and not loaded or failed as they
        are. Loop thread."""
        if self._parts.faces is not None or self._build is None or seen.models != models_key(self.cfg):
            return  # installed (later changes are rebuilds), or a look at another config's models
        if not self._first_load.saw(seen):
            return  # not all there, loading, or loaded or failed from exactly these files
        log.info("the face model files are there now")
        self.load_pipeline(self.cfg)

    def _tell_models_seen(self, seen: ModelFilesSeen) -> None:
        """From the watch's thread: handled by the loop."""
        self._tell(lambda: self.models_seen(seen), "model files")

    def watch_models(self) -> None:
        """Until a face pipeline is installed, look at the model files every two seconds."""
        if self._parts.faces is None:
            self._first_load.watch()

    # -- the config file ----------------------------------------------------------------------------
    def file_broken(self, err: VcamdError) -> None:
        self.problems.report("file", str(err))
        log.error("config reload failed, keeping the running settings: %s", err)

    def file_note(self, message: str) -> None:
        """The file as applied removed settings the user may not have meant to (the watcher's
        `dropped_settings`): said in `config_error` until the next valid edit."""
        self.problems.report("file", message)

    def file_valid(self, file_cfg: Config) -> None:
        """A valid file: the broken-file problem is gone; apply what changed."""
        self.problems.clear("file")
        new = self.choices.over(file_cfg)
        edit = self._plan(new)
        if not edit.changed and not edit.pipeline_outdated:
            log.info("config file is valid; running settings unchanged")
            return
        self.apply(new, edit)

    def reload_file(self) -> None:
        """Re-read the file on the loop (SIGHUP): a broken one is reported, a valid one applied."""
        try:
            new, _ = load_config(self.config_path)
        except VcamdError as err:
            self.file_broken(err)
            return
        log.info("reloading the config (SIGHUP)")
        self.file_valid(new)

    # -- applying a config --------------------------------------------------------------------------
    def _plan(self, new: Config) -> reconfigure.Plan:
        """The one diff of an edit: against the running config, and (the rebuild keys, the detector copy's looks) against
        what the running pipeline was built from — after a failed load, every later edit tries again until the models load."""
        return reconfigure.plan(self.cfg, new, built_from=self._pipeline_cfg, detector_copy=reconfigure.detector_copy(self._parts.faces))

    def apply(self, new: Config, edit: reconfigure.Plan | None = None) -> None:
        """Apply a changed config between two frames (the loop's thread): one diff (`edit`, made
        here when the caller has none), then each owner of a changed live key applies its part of
        the new config, in `reconfigure.APPLY_ORDER`."""
        plan = self._plan(new) if edit is None else edit
        rebuild = plan.pipeline_outdated
        if not rebuild:
            if self._build is not None and self._parts.faces is not None:
                self._build.cancel()  # an edit reverted while a load was in flight: drop it
            self.problems.clear("models")
        self._report_waiting(plan, rebuild)
        self.cfg = new
        # While a pipeline loads for this edit, it is built with [enhancer] as the edit says.
        skipped = {Owner.enhancer} if rebuild else set()
        for owner in reconfigure.APPLY_ORDER:
            if owner in plan.owners - skipped:
                self._appliers[owner](new, plan)
        if rebuild and self._build is not None:
            log.info("loading the face pipeline for the new settings in the background")
            self.load_pipeline(new)
        log.info("config applied: changed %s", ", ".join(sorted(plan.changed)) or "nothing")

    def _report_waiting(self, plan: reconfigure.Plan, rebuild: bool) -> None:
        """Say which changes wait for a restart; those the user expected live are a problem."""
        waiting = sorted(plan.restart)
        cannot_rebuild = rebuild and self._build is None
        cannot_reopen = Owner.camera in plan.owners and self._source_factory is None
        if cannot_rebuild:
            waiting.append("[models] and what the face engine is built with")
        if cannot_reopen:
            waiting.append("[camera]")
        self.problems.clear("restart")
        if waiting:
            message = f"{', '.join(waiting)}: take effect after a restart of vcamd run"
            log.warning(message)
            if cannot_rebuild or cannot_reopen:
                self.problems.report("restart", message)

    # -- the face pipeline ------------------------------------------------------------------------
    def load_pipeline(self, cfg: Config) -> None:
        """Load the models for `cfg` in the background (seconds for a real swapper) while the engine
        keeps publishing; the new pipeline is installed between two frames when ready. Before the
        first one is installed, only when the model files were seen there (else they are waited for)."""
        assert self._build is not None, "no pipeline factory"
        if self._parts.faces is None:
            # Nothing runs yet: the newest load stands for the running pipeline, so an edit during
            # start-up is compared with what is loading (and a revert loads the first one again).
            self._pipeline_cfg = cfg
            first, seen = self._first_load, self._first_load.seen
            if seen is not None and (seen.models != models_key(cfg) or seen.error is not None):
                self._build.cancel()  # a load for other files is out of date
                first.loading = False
                first.seen = None if seen.models != models_key(cfg) else seen
                log.info("waiting for the face model files (looked at every few seconds); they load once they are there")
                self.watch_models()  # looks at the files `cfg` names; loads when they are there
                return
            first.loading, first.failed = True, None
            log.info("loading the face models in the background%s",
                     "; frames are covered until they are ready" if self._parts.enabled else "")
        self._build.start(cfg, self._parts.frame_size(cfg), failed=self._pipeline_failed,
                          loaded=lambda ready: self._install_pipeline(ready, ready.built_from.swap.source_face))

    def _pipeline_failed(self, generation: int, exc: Exception) -> None:
        assert self._build is not None
        if not self._build.is_current(generation):
            return
        if self._parts.faces is None:
            # Nothing loaded yet: the daemon keeps running (swapping as it was: off shows the
            # camera, on covers every frame) and says why; the watch tries again on a change.
            failed = self._first_load.load_failed(exc)
            log.error("%s — %s", failed.what, failed.fix)
            self.watch_models()
            return
        message = f"new models not loaded, keeping the running ones: {exc}"
        self.problems.report("models", message)
        log.error(message)

    def _install_pipeline(self, loaded: Loaded, face: Path | None) -> None:
        """Make `loaded` (with `face` read into it) the running pipeline, on the loop's thread."""
        assert self._build is not None
        if not self._build.is_current(loaded.generation):
            return  # a newer edit is being loaded; this one is already out of date
        parts = self._parts
        wanted = self.cfg.swap.source_face
        if wanted is not None and wanted != face:
            # A face chosen while the models loaded: read it into the new pipeline first (off the loop).
            reading = self.face_loader.submit(lambda: loaded.faces.set_source_face(wanted))
            reading.add_done_callback(lambda f: self._tell(
                lambda: self._install_pipeline(loaded, wanted if f.exception() is None else face), "models"))
            return
        self._pipeline_cfg = loaded.built_from
        self.choices.forget_model_list()  # a file pulled meanwhile shows up
        first = parts.faces is None
        parts.install_pipeline(loaded.faces, loaded.providers, self.cfg)
        self._first_load.installed()  # from now on a models edit is a rebuild
        self.problems.clear("models")
        # The last swap stays on screen until the new pipeline's first swap lands (no leak: compose covers).
        parts.watchdog.enhancer_enabled = self.cfg.enhancer.enabled
        self.int8.start(loaded.faces, loaded.built_from)  # the swapper's int8 copy, when this pipeline wants one
        loaded.warm_rest_after_first_swap(parts.worker.results, current=lambda: parts.faces is loaded.faces, shown=parts.worker.first_shown)
        if first:
            self._on_first_pipeline()
        log.info("face pipeline installed; providers: %s", loaded.providers)

    # -- consent ----------------------------------------------------------------------------------
    def _consent_changed(self, given: bool) -> None:
        """[swap] source_consent edited while running: false withdraws it — swapping goes off from
        the next frame and stays off (on, toggle and set-face are refused) until it is true again.
        True gives it (also when it was never given at start); swapping is not switched on by it."""
        self.consent.edited(given)
        if given:
            self.problems.clear("consent")
            log.info("[swap] source_consent = true: consent given; swapping can be switched on")
            return
        self._parts.enabled = False
        withdrawn = consent_missing(withdrawn=True)
        self.problems.report("consent", withdrawn.what)
        log.warning("%s", withdrawn.what)

    def switch_swapping(self, on: bool) -> None:
        """Swapping on or off (the loop's thread). On is refused with what swapping still needs
        (`SwapNotReady`) when it is off; already on (the models failed to load while it was on),
        it stays on: every frame covered, the status says why."""
        if on and not self._parts.enabled and (needs := self.swap_needs()):
            raise SwapNotReady(needs)
        self._parts.enabled = on

    # -- the source face --------------------------------------------------------------------------
    def read_source_face(self, path: Path) -> Future[Any]:
        """Read and embed `path` into the running pipeline on the face-loader thread. Once read,
        the loop records it as the user's choice (also when the caller stopped waiting)."""
        faces = self._parts.faces
        if faces is None:
            if not self._first_load.loading and (needs := [n for n in self.swap_needs() if n.topic == "models"]):
                raise VcamdError(f"a source face is read by the face models, and they are not there: {needs[0].what}",
                                 fix=needs[0].fix)
            raise VcamdError("the face models are still loading", fix="try again in a moment")
        loaded = self.face_loader.submit(lambda: faces.set_source_face(path))
        loaded.add_done_callback(lambda f: f.exception() is None and self._tell(lambda: self.record_source_face(path, faces), "set-face"))
        return loaded

    def record_source_face(self, path: Path, loaded_into: Any) -> None:
        """The face is read: keep the running config in step with it (status shows it) and
        remember it as the user's choice over the file's. Until the first swap with the new face
        lands, the last swap stays on screen."""
        self.consent.require()  # withdrawn while the photo was read: it is not used
        self.choices.face = path
        self.problems.clear("source_face")
        self.cfg = self.cfg.model_copy(update={"swap": self.cfg.swap.model_copy(update={"source_face": path})})
        if loaded_into is not self._parts.faces:  # a rebuilt pipeline was installed meanwhile
            self.load_source_face(path)

    def load_source_face(self, path: Path) -> None:
        """Read `path` into the running pipeline on the face-loader thread; problems are reported.
        Before the first pipeline is installed there is nothing to read into: the install reads the
        face the config names by then."""
        faces: FacePipeline | None = self._parts.faces
        if faces is None:
            return
        loading = self.face_loader.submit(lambda: faces.set_source_face(path))

        def loaded(f: Future[Any]) -> None:
            error = f.exception()
            if error is None:
                self._tell(lambda: self.problems.clear("source_face"), "source face")
                if faces is not self._parts.faces:
                    self._tell(lambda: self.load_source_face(path), "source face")
            else:
                self._tell(lambda: self.problems.report("source_face", f"[swap] source_face: {error}"), "source face")

        loading.add_done_callback(loaded)

    # -- the enhancer, the output, the camera -----------------------------------------------------
    def _apply_enhancer(self, enhancer: EnhancerConfig) -> None:
        """Enhancer on/off/strength takes effect on the next frame (the model loads on first use)."""
        parts, faces = self._parts, self._parts.faces
        self.problems.clear("enhancer")
        if faces is None:
            return  # the pipeline being loaded is built with [enhancer] as the config says by then
        try:
            faces.set_enhancer(enhancer.enabled, enhancer.strength, enhancer.weight)
        except VcamdError as err:
            self.problems.report("enhancer", message := f"[enhancer]: {err}; keeping the enhancer off")
            log.error(message)
            faces.set_enhancer(False, enhancer.strength)
            parts.watchdog.enhancer_enabled = False
            return
        parts.watchdog.enhancer_enabled = enhancer.enabled

    def _apply_enabled(self, enabled: bool) -> None:
        """[swap] enabled edited: on only while swapping has what it needs (consent included: it
        stays off until source_consent is true again, whichever way swapping is asked to go on)."""
        self._parts.enabled = enabled and not self.swap_needs()

    def _apply_source_face(self, source_face: Path | None) -> None:
        if source_face is not None:
            self.load_source_face(source_face)

    def _apply_log_level(self, log_level: str) -> None:
        if not self._log_level_pinned:
            logging.getLogger().setLevel(log_level.upper())

    # -- the models chosen at run time ------------------------------------------------------------
    def set_model(self, role: str, name: str) -> None:
        """Use the manifest's model `name` for `role` ("swapper" or "enhancer") from now on: the new
        face pipeline loads in the background while the running one keeps swapping, and is
        installed between two frames (no frame shows a raw face meanwhile). Kept over edits of
        other keys until the file's own value changes. VcamdError (with the pull to run) for a
        model that is not there; nothing changes then."""
        new = self.choices.choose_model(self.cfg, role, name)
        log.info("%s %s chosen at run time; loading it in the background", role, name)
        self.apply(new)

    def models_status(self) -> dict[str, Any]:
        """What the status says of the models (`RuntimeChoices.models_status`)."""
        return self.choices.models_status(running=self._pipeline_cfg.models, wanted=self.cfg.models)

    def set_badge(self, on: bool) -> None:
        """Show or hide the "AI-altered" badge from the next frame on (the tray, the control page)."""
        self.apply(self.cfg.model_copy(update={"disclosure": self.cfg.disclosure.model_copy(update={"badge": on})}))

    def _apply_publisher(self, new: Config) -> None:
        """The publisher applies [disclosure] and the output sections (`PublisherSettings`). If a new output
        cannot open, go back to the old output settings (`sinks.registry.OUTPUT_SECTIONS`) so the output never vanishes."""
        publisher = self._parts.publisher
        self.problems.clear("output")
        old = publisher.applied
        problem = publisher.configure(PublisherSettings.of(new))
        if problem is None or old is None:
            return
        self.problems.report("output", message := f"output settings: {problem}; keeping the previous output")
        log.error(message)
        self.cfg = self.cfg.model_copy(update={section: getattr(old, section) for section in OUTPUT_SECTIONS})
        if (again := publisher.configure(PublisherSettings.of(self.cfg))) is not None:
            log.error("the previous output does not open either: %s", again)

    def _restart_camera(self, camera: CameraConfig) -> None:
        """Reopen the camera with the new [camera] settings; if it cannot be opened now, the
        reader keeps retrying every reopen_interval_s and the offline frame is published meanwhile."""
        if self._source_factory is None:
            return  # said in `_report_waiting`: [camera] takes effect after a restart
        self.problems.clear("camera")
        try:
            source = self._source_factory(camera)
        except VcamdError as err:
            self.problems.report("camera", message := f"[camera]: {err}; keeping the current camera")
            log.error(message)
            return
        self._parts.replace_camera(source, camera)
        log.info("camera reopened: %s", source.description)

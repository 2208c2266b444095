"""Applies config changes to the running parts of the live engine, as `reconfigure.TABLE` says.

`reconfigure` decides how each key takes effect (live / rebuild / restart) and which part owns it;
this module keeps the running config, diffs an edit once (`reconfigure.plan`) and, on the loop's
thread between two frames, hands the new config to each owner of a changed live key: the parts
apply their own settings (`configure(cfg)`: watchdog, tracker, the frame policy, publisher); the
owners kept here are the switches and whole replacements — the camera reopened, swapping and
consent, a source photo embedded on the face-loader thread, the enhancer switched, the log level.
The face pipeline is built in the background (`loading.PipelineBuild`) and installed when it is
ready — at start-up too.

It is also the one owner of `config_error` (`Problems`): each problem has a topic (broken file,
models, camera, output, enhancer, source face, restart, settings); a failed model load stays
reported until a load succeeds or the edit is reverted. And of what swapping still needs
(`swap_needs`: the face models, consent, a source face — `readiness`): with any of them missing,
swapping stays off and `on` is refused with the list; the first face pipeline is loaded once the
model files are there (looked at by `readiness.ModelWatch` until then).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vcamd.common.errors import VcamdError
from vcamd.config.reading import load_config
from vcamd.config.schema import CameraConfig, Config
from vcamd.live import reconfigure
from vcamd.live.capture.sources import FrameSource
from vcamd.live.loading import FaceLoader, FacePipeline, Int8Upgrade, Loaded, PipelineBuild, PipelineFactory, Tell
from vcamd.live.readiness import (
    CONSENT_FIX,
    FACE_MISSING,
    ModelFilesSeen,
    ModelWatch,
    Need,
    SwapNotReady,
    consent_missing,
    log_needs,
    models_key,
    models_missing,
    models_not_loaded,
)
from vcamd.live.reconfigure import Owner
from vcamd.sinks.registry import OUTPUT_SECTIONS

if TYPE_CHECKING:
    from vcamd.live.frames import FrameProcessor
    from vcamd.live.parts import LiveParts

log = logging.getLogger(__name__)


MODEL_CHOICE_ROLES = ("swapper", "enhancer")
"""The roles whose model the page and the tray switch (`Settings.set_model`)."""


class Problems:
    """What is wrong with the settings now, by topic: the one source of status' `config_error`.
    Written on the loop's thread only."""

    def __init__(self) -> None:
        self._by_topic: dict[str, str] = {}

    def report(self, topic: str, message: str) -> None:
        self._by_topic[topic] = message

    def clear(self, topic: str) -> None:
        self._by_topic.pop(topic, None)

    def text(self) -> str | None:
        return "; ".join(self._by_topic.values()) or None


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
        # A source face chosen at run time (`--face`, `vcamd set-face`, the tray) outlives edits of
        # other keys in the file; it gives way only when the file's own source_face is edited.
        self._file_cfg = file_cfg
        self._face_override: Path | None = cfg.swap.source_face if cfg.swap.source_face != file_cfg.swap.source_face else None
        # Models chosen at run time (the page, the tray: `set_model`): [models] key → value, each
        # kept over edits of other keys until the file's own value of that key changes.
        self._model_override: dict[str, str] = {}
        self._model_choices: dict[str, list[dict[str, Any]]] | None = None  # read from the models dir on first ask
        self._pipeline_cfg = cfg  # what the running face pipeline was built from (at start-up: is being)
        self.replaced_captured = 0  # frames captured by readers replaced on a camera change
        self.replaced_skipped = 0  # frames skipped by sources replaced on a camera change (dropped)
        self.consent_withdrawn = False  # [swap] source_consent went from true to false while running
        self._no_consent_yet = not consent_given  # not given at start: the same refusals, worded as never given
        # The model files, while no face pipeline is installed: what was seen last, whether a load
        # is under way, and why the last one failed (tried again when the files or the config change).
        self._look_at_models = look_at_models
        self._models_seen: ModelFilesSeen | None = look_at_models(cfg) if look_at_models is not None else None
        self._loading = False
        self._load_failed: Need | None = None
        self._model_watch = ModelWatch(lambda: look_at_models(self.cfg), self._tell_models_seen) if look_at_models is not None else None
        # Who applies each live key (`reconfigure.Owner`): the parts their own settings, the rest here.
        self._appliers: dict[Owner, Callable[[Config], None]] = {
            Owner.camera: self._restart_camera,
            Owner.watchdog: lambda new: parts.watchdog.configure(new),
            Owner.tracker: lambda new: parts.tracker.configure(new),
            Owner.frames: frames.configure,
            Owner.swapping: self._apply_enabled,
            Owner.consent: lambda new: self._consent_changed(new.swap.source_consent),
            Owner.source_face: self._apply_source_face,
            Owner.enhancer: self._apply_enhancer,
            Owner.logging: self._apply_log_level,
            Owner.publisher: self._apply_publisher,
        }

    def stop(self) -> None:
        self.face_loader.stop()
        self.int8.stop()
        if self._model_watch is not None:
            self._model_watch.stop()

    # -- what swapping needs ----------------------------------------------------------------------
    def swap_needs(self) -> list[Need]:
        """What swapping needs and does not have (empty: it may go on). Loop thread; no disk."""
        needs: list[Need] = []
        if self._parts.faces is None:
            if self._models_seen is not None and self._models_seen.error is not None:
                needs.append(models_missing(self._models_seen.error))
            elif self._load_failed is not None and not self._loading:
                needs.append(self._load_failed)
        if self.consent_withdrawn or self._no_consent_yet:
            needs.append(consent_missing(withdrawn=self.consent_withdrawn))
        if self._face_missing():
            needs.append(FACE_MISSING)
        return needs

    def _face_missing(self) -> bool:
        """No source face, and the swapper needs one (a DeepFaceLab model swaps in its own trained
        face: told from the config's swapper before the models load, from the model after)."""
        faces = self._parts.faces
        if faces is None:
            from vcamd.models.pipeline import has_own_identity

            return self.cfg.swap.source_face is None and not has_own_identity(self.cfg)
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
        before, self._models_seen = self._models_seen, seen
        if seen.error is not None or self._loading:
            return
        changed = before is None or before.fingerprint != seen.fingerprint
        if self._load_failed is None and not changed and before is not None and before.error is None:
            return  # loaded or loading from these files already
        if self._load_failed is not None and not changed:
            return  # failed from exactly these files: wait for a change
        log.info("the face model files are there now")
        self.load_pipeline(self.cfg)

    def _tell_models_seen(self, seen: ModelFilesSeen) -> None:
        """From the watch's thread: handled by the loop."""
        self._tell(lambda: self.models_seen(seen), "model files")

    def watch_models(self) -> None:
        """Until a face pipeline is installed, look at the model files every two seconds."""
        if self._model_watch is not None and self._parts.faces is None:
            self._model_watch.start(self._models_seen)

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
        new = self._with_runtime_choices(file_cfg)
        if new == self.cfg and not reconfigure.needs_rebuild(self._pipeline_cfg, new):
            log.info("config file is valid; running settings unchanged")
            return
        self.apply(new)

    def reload_file(self) -> None:
        """Re-read the file on the loop (SIGHUP): a broken one is reported, a valid one applied."""
        try:
            new, _ = load_config(self.config_path)
        except VcamdError as err:
            self.file_broken(err)
            return
        log.info("reloading the config (SIGHUP)")
        self.file_valid(new)

    def _with_runtime_choices(self, file_cfg: Config) -> Config:
        """The file's new config, with a source face chosen at run time kept unless the file's own
        source_face was edited (then the file wins)."""
        previous, self._file_cfg = self._file_cfg, file_cfg
        if file_cfg.swap.source_face != previous.swap.source_face:
            self._face_override = None
        for key in list(self._model_override):
            if getattr(file_cfg.models, key) != getattr(previous.models, key):
                del self._model_override[key]
        new = file_cfg
        if self._model_override:
            new = new.model_copy(update={"models": new.models.model_copy(update=self._model_override)})
        if self._face_override is None:
            return new
        return new.model_copy(update={"swap": new.swap.model_copy(update={"source_face": self._face_override})})

    # -- applying a config --------------------------------------------------------------------------
    def apply(self, new: Config) -> None:
        """Apply a changed config between two frames (the loop's thread): one diff
        (`reconfigure.plan`), then each owner of a changed live key applies the new config, in
        `reconfigure.APPLY_ORDER`."""
        plan = reconfigure.plan(self.cfg, new)
        # Against what the running pipeline was built from: after a failed load, every later edit
        # tries again (and keeps reporting the error) until the models load.
        rebuild = reconfigure.needs_rebuild(self._pipeline_cfg, new)
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
                self._appliers[owner](new)
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
            seen = self._models_seen
            if seen is not None and (seen.models != models_key(cfg) or seen.error is not None):
                self._build.cancel()  # a load for other files is out of date
                self._loading = False
                self._models_seen = None if seen.models != models_key(cfg) else seen
                log.info("waiting for the face model files (looked at every few seconds); they load once they are there")
                self.watch_models()  # looks at the files `cfg` names; loads when they are there
                return
            self._loading, self._load_failed = True, None
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
            self._loading = False
            self._load_failed = models_not_loaded(exc)
            log.error("%s — %s", self._load_failed.what, self._load_failed.fix)
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
        self._model_choices = None  # a file pulled meanwhile shows up
        first = parts.faces is None
        parts.install_pipeline(loaded.faces, loaded.providers, self.cfg)
        self._loading, self._load_failed = False, None
        if self._model_watch is not None:
            self._model_watch.stop()  # from now on a models edit is a rebuild
        self.problems.clear("models")
        # The last swap stays on screen until the new pipeline's first swap lands (no leak: compose covers).
        parts.watchdog.enhancer_enabled = self.cfg.enhancer.enabled
        self.int8.start(loaded.faces, loaded.built_from)  # the swapper's int8 copy, when this pipeline wants one
        if first:
            self._on_first_pipeline()
        log.info("face pipeline installed; providers: %s", loaded.providers)

    # -- consent ----------------------------------------------------------------------------------
    def _consent_changed(self, given: bool) -> None:
        """[swap] source_consent edited while running: false withdraws it — swapping goes off from
        the next frame and stays off (on, toggle and set-face are refused) until it is true again.
        True gives it (also when it was never given at start); swapping is not switched on by it."""
        self.consent_withdrawn = not given
        self._no_consent_yet = False
        if given:
            self.problems.clear("consent")
            log.info("[swap] source_consent = true: consent given; swapping can be switched on")
            return
        self._parts.enabled = False
        withdrawn = consent_missing(withdrawn=True)
        self.problems.report("consent", withdrawn.what)
        log.warning("%s", withdrawn.what)

    def require_consent(self) -> None:
        """Refuse what would swap a face in while consent is withdrawn or not given yet."""
        if self.consent_withdrawn or self._no_consent_yet:
            raise VcamdError(consent_missing(withdrawn=self.consent_withdrawn).what, fix=CONSENT_FIX)

    def switch_swapping(self, on: bool) -> None:
        """Swapping on or off (the loop's thread). On is refused with what swapping still needs
        (`SwapNotReady`) when it is off; already on (the models failed to load while it was on),
        it stays on: every frame covered, the status says why."""
        if on and not self._parts.enabled and (needs := self.swap_needs()):
            raise SwapNotReady(needs)
        self._parts.enabled = on

    # -- the source face --------------------------------------------------------------------------
    def read_source_face(self, path: Path) -> Future:
        """Read and embed `path` into the running pipeline on the face-loader thread. Once read,
        the loop records it as the user's choice (also when the caller stopped waiting)."""
        faces = self._parts.faces
        if faces is None:
            if not self._loading and (needs := [n for n in self.swap_needs() if n.topic == "models"]):
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
        self.require_consent()  # withdrawn while the photo was read: it is not used
        self._face_override = path
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

        def loaded(f: Future) -> None:
            error = f.exception()
            if error is None:
                self._tell(lambda: self.problems.clear("source_face"), "source face")
                if faces is not self._parts.faces:
                    self._tell(lambda: self.load_source_face(path), "source face")
            else:
                self._tell(lambda: self.problems.report("source_face", f"[swap] source_face: {error}"), "source face")

        loading.add_done_callback(loaded)

    # -- the enhancer, the output, the camera -----------------------------------------------------
    def _apply_enhancer(self, new: Config) -> None:
        """Enhancer on/off/strength takes effect on the next frame (the model loads on first use)."""
        parts, faces = self._parts, self._parts.faces
        self.problems.clear("enhancer")
        if faces is None:
            return  # the pipeline being loaded is built with [enhancer] as the config says by then
        try:
            faces.set_enhancer(new.enhancer.enabled, new.enhancer.strength, new.enhancer.weight)
        except VcamdError as err:
            self.problems.report("enhancer", message := f"[enhancer]: {err}; keeping the enhancer off")
            log.error(message)
            faces.set_enhancer(False, new.enhancer.strength)
            parts.watchdog.enhancer_enabled = False
            return
        parts.watchdog.enhancer_enabled = new.enhancer.enabled

    def _apply_enabled(self, new: Config) -> None:
        """[swap] enabled edited: on only while swapping has what it needs (consent included: it
        stays off until source_consent is true again, whichever way swapping is asked to go on)."""
        self._parts.enabled = new.swap.enabled and not self.swap_needs()

    def _apply_source_face(self, new: Config) -> None:
        if new.swap.source_face is not None:
            self.load_source_face(new.swap.source_face)

    def _apply_log_level(self, new: Config) -> None:
        if not self._log_level_pinned:
            logging.getLogger().setLevel(new.runtime.log_level.upper())

    # -- the models chosen at run time ------------------------------------------------------------
    def set_model(self, role: str, name: str) -> None:
        """Use the manifest's model `name` for `role` ("swapper" or "enhancer") from now on: the new
        face pipeline loads in the background while the running one keeps swapping, and is
        installed between two frames (no frame shows a raw face meanwhile). Kept over edits of
        other keys until the file's own value changes. VcamdError (with the pull to run) for a
        model that is not there; nothing changes then."""
        from vcamd.modelstore.store import ModelStore

        if role not in MODEL_CHOICE_ROLES:
            raise VcamdError(f"models can be switched here for {' and '.join(MODEL_CHOICE_ROLES)}, not {role!r}",
                             fix="edit [models] in the config file for the others")
        served = self.cfg.models.server and self.cfg.models.fallback != "local"
        if served and getattr(self.cfg.models, role):  # (a local fallback has the files here: it switches as without a server)
            raise VcamdError(
                f"the {role} runs on the Triton server at {self.cfg.models.server}, which serves the one it was started with, "
                f"not one chosen here",
                fix=f"serve {name} there (`vcamd serve` with [models] {role} = \"{name}\"), then set [models] {role} = \"{name}\" "
                    "in this config (or [models] server = \"\" to run it here)",
            )
        store = ModelStore.from_config(self.cfg.models)
        entry = store.manifest.get(name)  # an unknown name: ModelError with the closest names
        if role not in entry.roles:
            raise VcamdError(f"{name} is not a {role} (it is a {entry.role})", fix=f"choose a {role} from `vcamd models list`")
        update = {role: name}
        if role == "swapper":  # the model's name says its family and converter
            update |= {"swapper_family": "", "converter": ""}
        new = self.cfg.model_copy(update={"models": self.cfg.models.model_copy(update=update)})
        store.paths_in_use(new)  # a file (or its converter) not downloaded: said now, with its pull
        self._model_override |= update
        self._model_choices = None
        log.info("%s %s chosen at run time; loading it in the background", role, name)
        self.apply(new)

    def models_status(self) -> dict[str, Any]:
        """What the status says of the models: the ones running, the one loading (None when none
        is), and the manifest's choices per role with licence and whether the file is there."""
        running = self._pipeline_cfg.models
        wanted = self.cfg.models
        loading = [getattr(wanted, role) for role in MODEL_CHOICE_ROLES if getattr(wanted, role) != getattr(running, role)]
        if self._model_choices is None:
            self._model_choices = _model_choices(wanted)
        return {
            "models": {**{role: getattr(running, role) for role in MODEL_CHOICE_ROLES},
                       "loading": ", ".join(loading) if loading and reconfigure.needs_rebuild(self._pipeline_cfg, self.cfg) else None},
            "model_choices": self._model_choices,
        }

    def set_badge(self, on: bool) -> None:
        """Show or hide the "AI-altered" badge from the next frame on (the tray, the control page)."""
        self.apply(self.cfg.model_copy(update={"disclosure": self.cfg.disclosure.model_copy(update={"badge": on})}))

    def _apply_publisher(self, new: Config) -> None:
        """[disclosure] and the output sections (`sinks.registry.OUTPUT_SECTIONS`: [virtual_camera],
        [preview], …): the publisher applies them. If a new output cannot open, go back to the old
        output settings so the output never vanishes."""
        publisher = self._parts.publisher
        self.problems.clear("output")
        old = publisher.applied
        problem = publisher.configure(new)
        if problem is None or old is None:
            return
        self.problems.report("output", message := f"output settings: {problem}; keeping the previous output")
        log.error(message)
        self.cfg = self.cfg.model_copy(update={section: getattr(old, section) for section in OUTPUT_SECTIONS})
        if (again := publisher.configure(self.cfg)) is not None:
            log.error("the previous output does not open either: %s", again)

    def _restart_camera(self, new: Config) -> None:
        """Reopen the camera with the new [camera] settings; if it cannot be opened now, the
        reader keeps retrying every reopen_interval_s and the offline frame is published meanwhile."""
        if self._source_factory is None:
            return  # said in `_report_waiting`: [camera] takes effect after a restart
        self.problems.clear("camera")
        try:
            source = self._source_factory(new.camera)
        except VcamdError as err:
            self.problems.report("camera", message := f"[camera]: {err}; keeping the current camera")
            log.error(message)
            return
        parts = self._parts
        skipped = parts.source.skipped
        self.replaced_captured += parts.reader.captured + skipped
        self.replaced_skipped += skipped
        parts.replace_camera(source, new.camera)
        try:
            parts.reader.open_first()
        except VcamdError as err:
            log.warning("new camera not available yet (%s); retrying every %.1f s", err, new.camera.reopen_interval_s)
        parts.reader.start()
        log.info("camera reopened: %s", source.description)


def _model_choices(models: Any) -> dict[str, list[dict[str, Any]]]:
    """role → the manifest's models of that role: name, licence, whether the file is in the models
    dir (a broken models dir or manifest: no choices, the running models stay)."""
    from vcamd.modelstore.store import ModelStore

    try:
        rows = ModelStore.from_config(models).list()
    except VcamdError as err:
        log.warning("the models to choose from could not be listed: %s", err)
        return {role: [] for role in MODEL_CHOICE_ROLES}
    return {role: [{"name": row.name, "license": row.license, "present": row.status in ("present", "verified")}
                   for row in rows if row.role == role] for role in MODEL_CHOICE_ROLES}

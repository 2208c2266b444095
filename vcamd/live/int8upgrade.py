"""The int8 copies an installed pipeline wants (the swapper's, the enhancer's, the parser's, the detector's:
`vcamd.inference.precision`), built in the background and switched to.

`Int8Upgrade` runs on an `int8-build` thread: it waits for calibration faces (the source photo, faces the
camera shows), builds and checks each copy in turn in a child process at a lower priority
(`python -m vcamd.models.quantize`: the quantiser's gigabytes are returned when it exits), loads the copy's
session, and hands it to the loop through `tell`, which switches that model over between two frames. The
float model serves all along; nothing is reset, so the faces on screen stay swapped (or held) across the
switch. A copy that fails the check leaves the float model, and the reason in status.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vcamd.common.errors import VcamdError
from vcamd.common.types import Frame
from vcamd.config.schema import Config
from vcamd.inference.fidelity import Verdict
from vcamd.inference.precision import Choice
from vcamd.live.loading import Tell

if TYPE_CHECKING:
    from vcamd.models.quantize import Job

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Int8Built:
    """A build's verdict, and the checked copy when it passed."""

    verdict: Verdict
    copy: Path | None


Int8Builder = Callable[["Job", threading.Event], Int8Built]
"""Builds and checks a copy (the real one: `build_in_child`); returns early, with whatever it has,
once the event is set (the daemon stops)."""


def build_in_child(request: Job, stop: threading.Event) -> Int8Built:
    """`python -m vcamd.models.quantize` in a child process at a lower priority: the quantiser's gigabytes
    are returned when it exits, and the live loop and swap outrank its minute of CPU. Killed when
    `stop` is set. Raises VcamdError when it fails."""
    with tempfile.TemporaryDirectory(prefix="vcamd-int8-job-") as tmp:
        request.write(Path(tmp))
        child = subprocess.Popen([sys.executable, "-m", "vcamd.models.quantize", tmp], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        threading.Thread(target=_kill_on_stop, args=(child, stop), name="int8-build-stop", daemon=True).start()
        out, err = child.communicate()
    if stop.is_set():
        raise VcamdError("the int8 build was stopped")
    lines = out.strip().splitlines()
    if child.returncode != 0 or not lines:
        last = (err.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
        raise VcamdError(f"the int8 copy of {request.model.name} could not be built: {last}",
                         fix="`vcamd models quantize` builds it by hand and shows why; the float model serves")
    result = json.loads(lines[-1])
    return Int8Built(Verdict(bool(result["passed"]), str(result["summary"])), Path(result["copy"]) if result["copy"] else None)


def _copy_session(faces: Any, role: str, model: Path, copy: Path) -> Any:
    """The session(s) `role` switches to (made on the build's thread): the detector's, one per input shape it runs."""
    if role == "detector":
        return faces.detector.copy_sessions(copy)
    return faces.sessions.copy_session(model, copy, background=True)


def _kill_on_stop(child: subprocess.Popen[str], stop: threading.Event) -> None:
    while child.poll() is None:
        if stop.wait(0.5):
            child.kill()
            return


class Int8Upgrade:
    """Builds the running pipeline's int8 copies in the background and switches each model to its copy on
    the loop (the module doc). One build at a time: a newer pipeline's request makes an older
    build's result stale (it is still kept in the cache for the next start)."""

    def __init__(self, tell: Tell, *, builder: Int8Builder | None = None, seen_wait_s: float | None = None,
                 since_start: Callable[[], float] = lambda: 0.0) -> None:
        """`builder`: builds and checks a copy (default: `build_in_child`, looked up when a build starts)."""
        from vcamd.faces.calibration import SEEN_WAIT_S

        self._tell = tell
        self._builder = builder
        self._seen_wait_s = SEEN_WAIT_S if seen_wait_s is None else seen_wait_s
        self._since_start = since_start
        self._generation = 0
        self._stop = threading.Event()
        self.changes: list[dict[str, Any]] = []
        """Each precision change, as the stats JSON shows it (the loop's thread)."""

    def start(self, faces: Any, cfg: Config) -> None:
        """For a pipeline just installed (the loop's thread): build each copy its `precisions` want (`Choice.build`). Never waits."""
        self._generation += 1
        choices: dict[str, Choice] = getattr(faces, "precisions", None) or {}
        models = {role: getattr(faces, role).path for role, choice in choices.items() if choice.build and getattr(faces, role, None)}
        if not models:
            return
        from vcamd.faces.calibration import CALIBRATION_FACES, SeenFaces
        from vcamd.inference.precision import int8_units, needs_reduced_range

        seen = faces.seen = SeenFaces()
        generation, stop = self._generation, self._stop
        from vcamd.models.int8detector import looks_for

        settings = {"recognizer": faces.recognizer.path, "providers": list(cfg.models.providers), "threads": cfg.models.threads,
                    "reduce_range": needs_reduced_range(int8_units()), "looks": looks_for(cfg)}
        log.info("%s: building int8 copies in the background (the float models serve meanwhile)", ", ".join(p.name for p in models.values()))

        def build() -> None:
            crops = seen.wait(CALIBRATION_FACES - 1, self._seen_wait_s, stop)
            while faces.source is None and not stop.wait(1.0):  # calibrated on the source face: wait for one
                pass
            for role, model in models.items():  # the swapper first (`precisions`' order)
                if not stop.is_set():
                    self._build(generation, faces, role, model, settings, crops, seen.frames, stop)

        threading.Thread(target=build, name="int8-build", daemon=True).start()

    def _build(self, generation: int, faces: Any, role: str, model: Path, settings: dict[str, Any], crops: list[Frame], frames: list[Frame],
               stop: Any) -> None:
        """One model's copy: built, checked, its session loaded and handed to the loop (or why it stays float).
        The detector's is calibrated on whole images (the source photo and the camera `frames` kept,
        `SeenFaces.frames`) and gets a session for each input shape it runs."""
        try:
            from vcamd.faces.calibration import frames_for
            from vcamd.models.int8roles import calibration_crop
            from vcamd.models.quantize import Job
            calibration = (frames_for(faces.source, frames) if role == "detector" else
                           faces.calibration_faces(crops, calibration_crop(role, model)))
            request = Job(model, faces=calibration, role=role, **settings)
            built = (self._builder or build_in_child)(request, stop)
            session = _copy_session(faces, role, model, built.copy) if built.copy else None
        except Exception as exc:  # the float model serves on; said in status
            if not stop.is_set():
                if not isinstance(exc, VcamdError):
                    log.exception("int8 build failed")
                why = f"its int8 copy could not be built ({exc}): the float model serves"
                self._tell(lambda: self._stays_float(generation, faces, role, why), "int8")
            return
        if session is None:
            why = f"its int8 copy failed the fidelity check ({built.verdict.summary}): float stays"
            self._tell(lambda: self._stays_float(generation, faces, role, why, built.verdict), "int8")
        else:
            assert built.copy is not None
            upgraded = faces.precisions[role].now_int8(built.copy, built.verdict)
            self._tell(lambda: self._install(generation, faces, session, upgraded, role), "int8")

    def _install(self, generation: int, faces: Any, session: Any, precision: Choice, role: str) -> None:
        if generation != self._generation:
            return  # another pipeline runs now (its own start decided its precision)
        faces.use_int8(session, precision, role)
        self.changes.append({"model": role, "to": "int8", "after_ms": round(self._since_start() * 1000.0)})
        log.info("%s: now on its int8 copy (%s)", role, precision.why)

    def _stays_float(self, generation: int, faces: Any, role: str, why: str, verdict: Verdict | None = None) -> None:
        faces.seen = None
        if generation != self._generation:
            return
        faces.precisions[role] = faces.precisions[role].stays_float(why, verdict)
        log.warning("%s: %s", role, why)

    def stop(self) -> None:
        """The daemon stops: a build in progress is ended (its child killed)."""
        self._stop.set()

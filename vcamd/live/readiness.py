"""What swapping needs before it can go on — the face models, consent, a source face — as one list.

The daemon starts whatever of them is missing: the camera goes to the output with swapping off
(frames pass as they do whenever swapping is off), so a newcomer sees the plumbing work before
~470 MB of models are in place. The list (`Need`s, each with its fix) is what `vcamd status`
(`swap_needs`), the control page and the tray show, and what `vcamd on`, toggle, the page's and
the tray's Swap on are refused with (`SwapNotReady`). Nothing here switches swapping on: once the
last piece arrives, the user does.

The model files are looked at off the loop (`look_at_model_files`: a few `stat`s and the
manifest), by the control thread that asks for `on` and, while no face pipeline is installed, by
`ModelWatch` every two seconds — so a `vcamd models pull` (or a copy by hand) finishing while the
daemon runs is seen, and the models load in the background as at start-up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vcamd.common.errors import VcamdError
from vcamd.config.schema import Config
from vcamd.modelstore.wayout import ways_out

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Need:
    """One thing swapping needs and does not have: what, and how to get it."""

    topic: str
    """"models", "consent" or "face"."""
    label: str
    """A few words for a menu or a headline ("the face models")."""
    what: str
    fix: str

    def to_json(self) -> dict[str, str]:
        return {"topic": self.topic, "label": self.label, "what": self.what, "fix": self.fix}


def models_missing(error: VcamdError) -> Need:
    """The model files are not all there (the store's error names each)."""
    return Need("models", "the face models", error.message, error.fix or ways_out())


def models_not_loaded(error: BaseException) -> Need:
    """The files are there, but the face pipeline did not load from them (a damaged file, a
    source photo without a face): tried again when a file or the config changes."""
    fix = error.fix if isinstance(error, VcamdError) and error.fix else ways_out(pull_note=" to download them again", files=2)
    message = error.message if isinstance(error, VcamdError) else f"{type(error).__name__}: {error}"
    return Need("models", "the face models", f"the face models did not load: {message}", fix)


CONSENT_NOT_GIVEN = "no consent for the source face yet ([swap] source_consent = false)"
CONSENT_WITHDRAWN = "consent withdrawn ([swap] source_consent = false): swapping is off"
CONSENT_FIX = ("set source_consent = true under [swap] once you have the consent of the person in the source photo "
               "(applied when the file is saved, or at `vcamd reload`; `vcamd run --i-have-consent` at start)")


def consent_missing(withdrawn: bool) -> Need:
    """No consent: never given since the start, or withdrawn by a config edit while running."""
    return Need("consent", "consent", CONSENT_WITHDRAWN if withdrawn else CONSENT_NOT_GIVEN, CONSENT_FIX)


class Consent:
    """[swap] source_consent while the daemon runs: given at start or not, withdrawn by an edit
    (swapping goes off and stays off until it is given again), given again. Loop thread."""

    def __init__(self, given: bool) -> None:
        self.withdrawn = False
        """It went from true to false while running."""
        self._not_yet = not given  # not given at start: the same refusals, worded as never given

    def need(self) -> Need | None:
        """The missing consent, or None when it is given."""
        return consent_missing(withdrawn=self.withdrawn) if self.withdrawn or self._not_yet else None

    def edited(self, given: bool) -> None:
        """The file's source_consent, edited while running (also giving it when never given at start)."""
        self.withdrawn = not given
        self._not_yet = False

    def require(self) -> None:
        """Refuse what would swap a face in while consent is withdrawn or not given yet."""
        if (need := self.need()) is not None:
            raise VcamdError(need.what, fix=need.fix)


FACE_MISSING = Need(
    "face", "a source face", "no source face is set",
    "choose a photo with one clear face: `vcamd set-face PHOTO`, the tray's Source face menu, the control page, "
    "or [swap] source_face in the config",
)


class SwapNotReady(VcamdError):
    """`on` refused: what swapping still needs, each with its fix."""

    def __init__(self, needs: list[Need]) -> None:
        self.needs = list(needs)
        if len(needs) == 1:
            super().__init__(f"swapping stays off: {needs[0].what}", fix=needs[0].fix)
        else:
            listed = "; ".join(f"({n}) {need.what} — {need.fix}" for n, need in enumerate(needs, 1))
            super().__init__(f"swapping stays off: it needs {len(needs)} things first: {listed}")


def log_needs(needs: list[Need]) -> None:
    """Say in the log (the terminal of `vcamd run`) why swapping is off, one line per need."""
    if not needs:
        return
    log.warning("swapping is off (the camera goes out as it is); to switch it on, it needs:")
    for need in needs:
        log.warning("  %s — %s", need.what, need.fix)


# -- the model files ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFilesSeen:
    """What a look at the model files `cfg` names found."""

    models: Any
    """Which models were looked for (`[models]` and the roles in use): a look for another config
    is not used."""
    error: VcamdError | None
    """Why they cannot be used (missing, incomplete), or None when they are all there."""
    stamps: tuple[Any, ...] = ()
    """Size and modification time of each file (when all are there): a file replaced is a change."""

    @property
    def fingerprint(self) -> tuple[Any, ...]:
        """What tells two looks apart (errors are compared by their text)."""
        return (self.models, None if self.error is None else str(self.error), self.stamps)


def models_key(cfg: Config) -> Any:
    """The part of a config that decides which model files it needs."""
    from vcamd.modelstore.roles import configured_models

    return (cfg.models, tuple(configured_models(cfg)))


def look_at_model_files(cfg: Config) -> ModelFilesSeen:
    """Whether every model file `cfg` loads on this machine is there (`vcamd.models.pipeline`: every
    missing one named in one error, with both ways to get it; a model run on the `[models] server`
    needs no file here). Touches the disk: never on the loop."""
    from vcamd.models.pipeline import local_model_paths

    key = models_key(cfg)
    try:
        paths = local_model_paths(cfg)
        stamps = tuple((str(path), st.st_size, st.st_mtime_ns) for path in paths for st in (path.stat(),))
    except VcamdError as err:
        return ModelFilesSeen(key, err)
    except OSError as exc:  # removed between the two looks
        return ModelFilesSeen(key, VcamdError(f"a model file cannot be read: {exc}", fix=ways_out(files=2)))
    return ModelFilesSeen(key, None, stamps)


class ModelWatch:
    """While no face pipeline is installed, looks at the model files every `period_s` on the
    `model-watch` thread and hands each change (`look()` answering something new) to `seen`."""

    def __init__(self, look: Callable[[], ModelFilesSeen], seen: Callable[[ModelFilesSeen], None], period_s: float = 2.0) -> None:
        self._look = look
        self._seen = seen
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, first: ModelFilesSeen | None) -> None:
        """Watch from `first` (what was seen last) on; a second start while watching does nothing."""
        if self._thread is not None and self._thread.is_alive() and not self._stop.is_set():
            return
        self._stop = threading.Event()  # each thread its own: one stopped earlier never wakes up again
        self._thread = threading.Thread(target=self._run, args=(first, self._stop), name="model-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self, last: ModelFilesSeen | None, stop: threading.Event) -> None:
        while not stop.wait(self._period_s):
            try:
                now = self._look()
            except Exception:  # noqa: BLE001 — a look that fails is tried again next period, never ends the daemon
                log.exception("looking at the model files failed")
                continue
            if last is None or now.fingerprint != last.fingerprint:
                last = now
                self._seen(now)

"""Until the first face pipeline is installed: the model files as last seen, whether a load is under
way, why the last one failed, and the watch that looks at the files every two seconds meanwhile.

The engine's settings (`engine_settings.Settings`) start the load when `saw` says the files are
there and new; the failure stays said (`need`) until a load succeeds or the files or the config
change. Once a pipeline is installed, every models edit is a rebuild and none of this is asked.
Loop thread, but the watch's own.
"""

from __future__ import annotations

from collections.abc import Callable

from vcamd.live.readiness import ModelFilesSeen, ModelWatch, Need, models_missing, models_not_loaded


class FirstLoad:
    """The state of the first load of the face models."""

    def __init__(self, seen: ModelFilesSeen | None, watch: ModelWatch | None) -> None:
        """`seen`: the first look at the files (None: not looked at, a pipeline given ready-made);
        `watch`: what looks again (None: nothing does)."""
        self.seen = seen
        self.loading = False
        self.failed: Need | None = None
        """Why the last load failed (tried again when the files or the config change)."""
        self._watch = watch

    @classmethod
    def watching(cls, look: Callable[[], ModelFilesSeen] | None, seen: Callable[[ModelFilesSeen], None]) -> FirstLoad:
        """Looked at once now and by a `ModelWatch` later (handing each change to `seen`), or never
        when there is no `look`."""
        if look is None:
            return cls(None, None)
        return cls(look(), ModelWatch(look, seen))

    def need(self) -> Need | None:
        """What swapping lacks of the models, while none is installed (None: nothing known missing)."""
        if self.seen is not None and self.seen.error is not None:
            return models_missing(self.seen.error)
        if self.failed is not None and not self.loading:
            return self.failed
        return None

    def saw(self, seen: ModelFilesSeen) -> bool:
        """A look at the files for the running config: remember it; True when a load should start
        (all there, nothing loading, and not loaded or failed from exactly these files)."""
        before, self.seen = self.seen, seen
        if seen.error is not None or self.loading:
            return False
        changed = before is None or before.fingerprint != seen.fingerprint
        if self.failed is None and not changed and before is not None and before.error is None:
            return False  # loaded or loading from these files already
        if self.failed is not None and not changed:
            return False  # failed from exactly these files: wait for a change
        return True

    def load_failed(self, error: Exception) -> Need:
        self.loading = False
        self.failed = models_not_loaded(error)
        return self.failed

    def watch(self) -> None:
        """Look at the files every two seconds (from what was seen last) until `stop`."""
        if self._watch is not None:
            self._watch.start(self.seen)

    def installed(self) -> None:
        """A pipeline is installed: from now on a models edit is a rebuild."""
        self.loading, self.failed = False, None
        self.stop()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

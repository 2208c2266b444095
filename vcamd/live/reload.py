"""Hot reload: watch the config file and hand each valid change to the engine, per section.

A thread polls the file's content (a hash of its bytes: file timestamps are too coarse to tell two
quick same-size saves apart, and a config file is a few KB). A change is loaded once it has
settled — an editor saving in several steps, or fifty saves in a second, give one load — or after
`max_delay_s` of continuous change at the latest. A valid file that differs from the last good config
is handed to `on_change(new)` (the engine diffs it, once: `live.reconfigure.plan`); an invalid one calls `on_error(err)` and the
last good config stays in force. The first valid load after an error calls `on_change` even when
nothing differs (an empty set), so the engine clears its `config_error` in one place.

A file deleted or renamed away (an editor's atomic save replaces it by rename) is just another
content state: the new file is picked up by its content; a file that stays missing is an error
(or, with `missing_ok`, the defaults — for the optional user config file).

An edit that empties the file, drops whole sections (a section that differed from its defaults is
back at them) or drops `[swap] source_face` is what a file cut short looks like — an editor or sync
tool writing in place, caught between truncating and writing. It is held, not applied: reported
through `on_error` (the last good config stays) until the file has stayed exactly so for
`confirm_s` (3 s: far longer than such a write), then applied as the user meant it, with
`on_note(message)` saying what went back to the defaults (the daemon shows it in `config_error` until
the next edit). A complete file written meanwhile is applied at once, as any edit. `vcamd reload`
and SIGHUP read the file themselves: an explicit reload applies such an edit at once.

Every read goes through `config.read_config_bytes` (regular files only, at most 1 MiB, never
blocking), so a FIFO, a symlink to /dev/zero or a huge file is an error in `config_error`, not a
hung or dead watcher. Whatever goes wrong inside one poll is reported through `on_error` and the
watcher keeps polling: a later valid edit still applies.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from vcamd.common.errors import ConfigError
from vcamd.config.reading import load_config, read_config_bytes
from vcamd.config.schema import Config

log = logging.getLogger(__name__)

Signature = str | None
"""sha256 of the file's bytes; "unreadable:<why>" when it cannot be read; None when missing."""

_NEVER = "<never loaded>"  # a signature no file has: forces the first poll to load and compare


def file_signature(path: Path) -> Signature:
    try:
        data = read_config_bytes(path)
    except FileNotFoundError:
        return None
    except ConfigError as err:  # a FIFO, a device, a folder, too big, no permission: load_config says which
        return f"unreadable:{err}"
    return hashlib.sha256(data).hexdigest()


def dropped_settings(old: Config, new: Config) -> list[str]:
    """What an edit removed that a file cut short would also lose: each section that differed from
    its defaults and is back at them (all its lines gone), and `[swap] source_face`."""
    defaults = Config()
    dropped = [f"[{name}]" for name in type(old).model_fields
               if getattr(old, name) != getattr(defaults, name) and getattr(new, name) == getattr(defaults, name)]
    if old.swap.source_face is not None and new.swap.source_face is None and "[swap]" not in dropped:
        dropped.append("[swap] source_face")
    return dropped


class ConfigWatcher:
    """Watch `path`; call `on_change(config)` or `on_error(ConfigError)`.

    Callbacks run on the watcher's thread, one at a time.
    `current` is the config the daemon runs with; when None, `start()` loads the file and raises
    ConfigError if it is invalid (the daemon should not start on a broken file).
    """

    def __init__(
        self,
        path: Path,
        on_change: Callable[[Config], None],
        on_error: Callable[[ConfigError], None],
        interval: float = 0.5,
        *,
        current: Config | None = None,
        missing_ok: bool = False,
        settle_s: float = 0.25,
        max_delay_s: float = 1.5,
        confirm_s: float = 3.0,
        on_note: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path).expanduser()
        self.on_change = on_change
        self.on_error = on_error
        self.interval = interval
        self.missing_ok = missing_ok
        self.settle_s = settle_s
        self.max_delay_s = max_delay_s
        self.confirm_s = confirm_s
        self.on_note = on_note
        self._held: Signature = _NEVER  # a dropping edit waiting for confirm_s, and since when
        self._held_since = 0.0
        self._last_good = current
        self._error: ConfigError | None = None
        self._applied: Signature = _NEVER  # the content state last loaded (good or bad)
        self._apply_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state_lock = threading.Lock()
        self.loads = 0
        """How many times the file was loaded and validated (for tests and the debug log), counted
        once the outcome is in place (`config`, `error`): a caller that sees the count go up sees
        what that load did."""

    @property
    def config(self) -> Config | None:
        """The last good config."""
        return self._last_good

    @property
    def error(self) -> ConfigError | None:
        """The problem with the file as it is now; None when it is valid."""
        return self._error

    def start(self) -> "ConfigWatcher":
        with self._state_lock:
            if self._thread is not None or self._stop.is_set():
                return self
            if self._last_good is None:
                signature = file_signature(self.path)
                self._last_good = self._load(signature)  # raises ConfigError: refuse to start broken
                self._applied = signature
                self.loads += 1
            self._thread = threading.Thread(target=self._run, name="vcamd-config-watch", daemon=True)
            self._thread.start()
            return self

    def close(self) -> None:
        with self._state_lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def __enter__(self) -> "ConfigWatcher":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ----------------------------------------------------------------------------

    def _run(self) -> None:
        pending: Signature = _NEVER
        pending_since = 0.0
        wait = 0.0  # the first look is immediate: `current` may already differ from the file
        while not self._stop.wait(wait):
            signature: Signature = _NEVER
            try:
                signature = file_signature(self.path)
                now = time.monotonic()
                if signature == self._applied:
                    pending, wait = _NEVER, self.interval
                    continue
                if signature != pending:
                    # Still changing (or a first sight of a change): wait until it settles.
                    if pending == _NEVER:
                        pending_since = now
                    pending = signature
                    if now - pending_since < self.max_delay_s:
                        wait = self.settle_s
                        continue
                self._apply(signature)
            except Exception as exc:  # noqa: BLE001 — the watcher must outlive any one bad poll (MemoryError included)
                self._report(self._unexpected(exc), signature)
            pending, wait = _NEVER, self.interval

    def _load(self, signature: Signature) -> Config:
        if signature is None and self.missing_ok:
            return Config()
        config, _ = load_config(self.path)
        return config

    def _apply(self, signature: Signature) -> ConfigError | None:
        with self._apply_lock:
            try:
                return self._load_and_keep(signature)
            finally:
                self.loads += 1

    def _load_and_keep(self, signature: Signature) -> ConfigError | None:
        """Load the file as it is now: keep it as the last good config (telling `on_change` what
        differs), or report why it cannot be applied; returns that error, or None."""
        try:
            new = self._load(signature)
        except ConfigError as err:
            self._report(err, signature)
            return err
        except Exception as exc:  # noqa: BLE001 — e.g. MemoryError under max_memory_gb: still a config_error
            unexpected = self._unexpected(exc)
            self._report(unexpected, signature)
            return unexpected
        dropped = dropped_settings(self._last_good, new) if self._last_good is not None else []
        if dropped:
            now, first_sight = time.monotonic(), signature != self._held
            if first_sight:
                self._held, self._held_since = signature, now
            if now - self._held_since < self.confirm_s:
                if first_sight:
                    self._report(ConfigError(str(self.path), [
                        f"the edit removes {', '.join(dropped)} (a file still being written looks like this) — not applied yet; "
                        f"applied as it is once it has stayed unchanged for {self.confirm_s:g} s, or at once by `vcamd reload`"]), _NEVER)
                self._applied = _NEVER  # the next poll looks again
                return self._error
        self._held = _NEVER
        changed = self._last_good is None or new != self._last_good
        recovered = self._error is not None
        self._applied = signature
        self._error = None
        self._last_good = new
        if changed or recovered:
            log.info("config %s reloaded%s", self.path, "" if changed else ": no change (error cleared)")
            self._call(self.on_change, new)
        if dropped:
            note = f"{self.path}: the edit removed {', '.join(dropped)}: the defaults apply there now"
            log.warning("%s", note)
            if self.on_note is not None:
                self._call(self.on_note, note)
        return None

    def _report(self, err: ConfigError, signature: Signature) -> None:
        """The file as it is now cannot be applied: say so in `error` / on_error; the last good
        config stays. `signature` _NEVER makes the next poll look again."""
        self._applied = signature
        if self._error is None or str(self._error) != str(err):  # the same problem is logged once
            log.warning("config not applied, still running on the last good one: %s", err)
        self._error = err
        self._call(self.on_error, err)

    def _unexpected(self, exc: BaseException) -> ConfigError:
        return ConfigError(str(self.path), [f"cannot be loaded ({type(exc).__name__}: {' '.join(str(exc).split())[:200] or 'no detail'}) — the last good config stays in force"])

    @staticmethod
    def _call(callback: Callable[..., None], *args: object) -> None:
        try:
            callback(*args)
        except Exception:  # an engine bug while applying must not stop the watching
            log.exception("config reload callback %s failed", getattr(callback, "__name__", callback))

"""The loop's command queue: every change to the running engine is applied on the loop's thread.

The control socket, the tray, the config watcher, SIGHUP and the background loaders never touch the
engine's state themselves: they hand the loop a command, which it applies between two frames.
`ask` waits for it and answers with the state right after it applied (so `vcamd set-face NEW`
prints NEW); `tell` does not wait. Before the loop runs and after it ended nothing else touches the
state, so a command is applied at once on the caller's thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vcamd.common.errors import VcamdError

log = logging.getLogger(__name__)

COMMAND_WAIT_S = 8.0
"""How long a control request waits for the loop to apply it (the CLI gives up after 10 s)."""


@dataclass
class Command:
    """A change for the loop to apply between two frames; `done` is set once it ran."""

    apply: Callable[[], None]
    what: str
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    state: dict[str, Any] = field(default_factory=dict)  # the status right after it applied


class CommandQueue:
    """Commands for the loop. `state_after()` gives the status once a command applied;
    `unexpected(message)` records a command that failed for a reason that is not the user's."""

    def __init__(self, state_after: Callable[[], dict[str, Any]], unexpected: Callable[[str], None]) -> None:
        self._state_after = state_after
        self._unexpected = unexpected
        self._pending: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _looping
        self._looping = False  # the loop runs: commands wait for it

    def ask(self, apply: Callable[[], None], what: str) -> dict[str, Any]:
        """Apply on the loop and wait for it; the state after it applied. Raises what applying
        raised (a VcamdError for the user's problems)."""
        command = Command(apply, what)
        with self._lock:
            if not self._looping:
                self._execute(command)
            else:
                self._pending.put(command)
        if not command.done.wait(COMMAND_WAIT_S):
            raise VcamdError(f"the camera loop did not apply {what} within {COMMAND_WAIT_S:g} s",
                             fix="it applies when the loop catches up; check `vcamd status`")
        if command.error is not None:
            raise command.error
        return dict(command.state)

    def tell(self, apply: Callable[[], None], what: str) -> None:
        """Queue a change for the loop without waiting (watcher, SIGHUP, background threads)."""
        self._pending.put(Command(apply, what))

    def start_looping(self) -> None:
        """From now on changes queue up for the loop (applied once it runs)."""
        with self._lock:
            self._looping = True

    def stop_looping(self) -> None:
        """Stop queueing: answer whatever is still queued, then apply later changes at once."""
        with self._lock:
            self._looping = False
            self.run_pending()

    def run_pending(self) -> None:
        """Apply everything queued so far (the loop's thread)."""
        while True:
            try:
                command = self._pending.get_nowait()
            except queue.Empty:
                return
            self._execute(command)

    def _execute(self, command: Command) -> None:
        try:
            command.apply()
        except VcamdError as err:  # the user's problem: answered to whoever asked
            command.error = err
        except Exception as exc:  # a failed request must never end the stream
            message = f"could not apply {command.what}: {exc}"
            log.exception("applying %s failed; running on", command.what)
            self._unexpected(message)
            command.error = VcamdError(message)
        finally:
            command.state = self._state_after()
            command.done.set()

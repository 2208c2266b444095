"""The one place the tray reaches into pystray's private state, and why.

`Icon.run(setup=...)` starts a setup thread (not a daemon thread) that waits on a queue for the
backend's "ready" (`Icon._mark_ready`, called by the backend's event loop once it runs). When the
backend fails before that (no X server, a tray host gone, pystray's dummy backend), the thread
waits for good and keeps the process from exiting. pystray (0.19.5, read in its `_base.py`) has no
public way to end it: `stop()` does nothing on an icon that never ran, and `_mark_ready` would
first ask the failed backend to rebuild its menu. So the queue itself (the name-mangled
`Icon.__queue`) gets the "ready" the backend never sent; the caller's setup then sees the failure
and returns. tests/tray/test_tray_lifecycle.py holds it on pystray's dummy backend: a pystray that
renames the queue fails that test rather than leaving daemons that never exit.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

_READY_QUEUE = "_Icon__queue"
"""`Icon.__queue` as Python stores it (pystray._base.Icon: the setup thread's "ready" queue)."""


def release_setup_thread(icon: Any) -> bool:
    """Let the setup thread of an icon whose event loop failed to start run (and return).

    Its setup function must check that the loop failed and start nothing. False when this pystray
    has no such queue (the thread may then keep the process alive; logged)."""
    ready_queue = getattr(icon, _READY_QUEUE, None)
    if ready_queue is None:
        log.warning("tray: cannot release pystray's setup thread (no %s in this pystray)", _READY_QUEUE)
        return False
    ready_queue.put(False)
    return True

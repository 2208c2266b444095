"""One user photo read at a time, whichever surface asks (control socket, control page, tray).

Reading a source-face photo decodes it: up to `vcamd.files.images.MAX_PIXELS` (64 MP × 3 bytes, plus
what the decoder holds) is hundreds of MB. Sixteen uploads at once through the page took the
daemon from 0.5 GB to 4.5–5.9 GB, while the socket served one at a time. So the daemon has one
lane: a request that finds it taken is answered "busy, try again" at once — never queued with
its photo in memory.
"""

from __future__ import annotations

import threading

from vcamd.common.errors import VcamdError

PHOTO_BUSY = "busy: another source face photo is being loaded — try again in a moment"


class PhotoLaneBusy(VcamdError):
    def __init__(self) -> None:
        super().__init__(PHOTO_BUSY)


class PhotoLane:
    """Held from the moment a photo is taken until its read ends (not until a caller stops waiting)."""

    def __init__(self) -> None:
        self._held = threading.Lock()

    def enter(self) -> None:
        """Take the lane, or raise PhotoLaneBusy at once."""
        if not self._held.acquire(blocking=False):
            raise PhotoLaneBusy()

    def leave(self) -> None:
        self._held.release()

    @property
    def busy(self) -> bool:
        return self._held.locked()

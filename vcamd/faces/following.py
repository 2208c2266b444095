"""Which face is swapped, frame after frame: the face chosen keeps the swap while its track lives.

`face_selection = "largest"` picks the largest face once; from then on `FollowedFace` follows that
face — by its place from one frame to the next and, where places cannot say (a face appearing at
once, faces crossing, a face of another size where it was), by who it is (the recogniser's
embedding, taken when it was chosen). A larger face coming into view never takes the swap: without
this, a person leaning in closer than the user (or a poster, a face on a screen behind) took it,
and the user's own face was published raw. Faces the selection does not swap are obscured unless
`[swap] others = "show"` (`vcamd.live.frames`, `FaceEngine.process_frame`).

When the lock ends: when the followed face has been missing (no face at its place, none recognised
as it) for RELEASE_FRAMES frames — the user left — the largest face is chosen anew; also when the
recogniser model changed (a face pipeline rebuilt for another key keeps the lock). While it is missing nothing is swapped, and every
face in view is looked at by identity every IDENTITY_RETRY_FRAMES frames: the user coming back is
found again. "all" swaps every face and "reference" already picks by identity in every frame:
`FollowedFace` leaves them to `FaceEngine.select`. With `[[swap.map]]` the faces are chosen by who
they are (`vcamd.faces.mapping.WhoIsWho`): `pick` says, per face chosen, which source it must show.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from vcamd.common.types import Face, Frame
from vcamd.config.schema import FaceSelection
from vcamd.faces.identity import SAME_PERSON_COSINE
from vcamd.faces.mapping import STRANGER, FaceMap, WhoIsWho
from vcamd.privacy.geometry import at_place_of

Embed = Callable[[Frame, Face], np.ndarray]
"""The recogniser's embedding of a face (L2-normalised)."""

RELEASE_FRAMES = 90
"""The lock ends when the followed face has been missing this many frames (3 s at 30 fps)."""

IDENTITY_RETRY_FRAMES = 5
"""While the followed face is missing, the faces in view are compared with it at most this often:
one embedding per face, on the loop's thread."""


@dataclass(frozen=True, slots=True)
class Picked:
    """The faces to swap in a frame and, with a face map, the source key each must show (None:
    any; `rule.UNKNOWN_SOURCE`: none — who it is is not known, so it is covered)."""

    targets: list[Face]
    sources: list[str | None]


@dataclass
class _Lock:
    face: Face  # where it was last seen
    identity: np.ndarray
    seen_at: int  # frame index it was last seen at
    called_at: int  # frame index of the last selection
    checked_at: int  # frame index of the last identity comparison
    recognizer: Path  # the recogniser model the identity came from (another one ends the lock)


class Recognizing(Protocol):
    """The recogniser the lock compares faces with (`faces.identity.Recognizer`)."""

    @property
    def path(self) -> Path: ...

    def embed(self, frame: Frame, face: Face) -> np.ndarray: ...


class Selecting(Protocol):
    """What `FollowedFace` needs of the face engine (`faces.engine.FaceEngine`): its selection rule,
    its recogniser and its face map."""

    @property
    def selection(self) -> FaceSelection: ...

    @property
    def face_map(self) -> FaceMap | None:
        """`[[swap.map]]`: who gets which source; None: `selection` and the one source face."""
        ...

    @property
    def recognizer(self) -> Recognizing: ...

    def select(self, faces: list[Face], frame: Frame) -> list[Face]: ...


class FollowedFace:
    """The face being swapped under face_selection = "largest", kept while its track lives."""

    def __init__(self) -> None:
        self._lock: _Lock | None = None
        self._who: WhoIsWho | None = None

    def pick(self, engine: Selecting, faces: list[Face], frame: Frame, index: int) -> Picked:
        """`select`, or with a face map every face but the strangers, each with its source key."""
        face_map = engine.face_map
        if face_map is None:
            self._who = None
            targets = self.select(engine, faces, frame, index)
            return Picked(targets, [None] * len(targets))
        self._lock, self._who = None, self._who or WhoIsWho()
        who = self._who.who(face_map, faces, frame, index, engine.recognizer.embed)
        chosen = [(f, face_map.key_of(w)) for f, w in zip(faces, who) if w != STRANGER]
        return Picked([f for f, _ in chosen], [k for _, k in chosen])

    def select(self, engine: Selecting, faces: list[Face], frame: Frame, index: int) -> list[Face]:
        """The faces to swap in frame `index` (`engine`: the `FaceEngine`, whose selection and
        recogniser apply). Raises what the recogniser raises (the caller covers the frame)."""
        if engine.selection is not FaceSelection.largest:
            self._lock = None
            return engine.select(faces, frame)
        lock = self._lock
        if lock is not None and (lock.recognizer != engine.recognizer.path or index - lock.seen_at > RELEASE_FRAMES):
            lock = self._lock = None
        if not faces:
            if lock is not None:
                lock.called_at = index
            return []
        if lock is None:
            picked = engine.select(faces, frame)  # the engine's rule chooses (the largest); this keeps it
            if not picked:
                return []
            chosen = picked[0]
            self._lock = _Lock(chosen, engine.recognizer.embed(frame, chosen), index, index, index, engine.recognizer.path)
            return [chosen]
        found = self._find(lock, faces, frame, index, engine.recognizer.embed)
        if found is None:
            return []
        lock.face, lock.seen_at = found, index
        return [found]

    def _find(self, lock: _Lock, faces: list[Face], frame: Frame, index: int, embed: Embed) -> Face | None:
        """The followed face among `faces`: the one face where it was at the last selection (at
        about its size), else the face recognised as it; None: not in view, or not looked for by
        identity on this frame (IDENTITY_RETRY_FRAMES)."""
        moved = [f for f in faces if at_place_of(lock.face, f)]
        seen_last_time, lock.called_at = lock.seen_at == lock.called_at, index
        if seen_last_time and len(moved) == 1:
            return moved[0]
        # Faces crossing where it was: compare those. Gone from there, or back after a while
        # (someone else may stand where it was): compare every face in view, not on every frame.
        crossing = seen_last_time and len(moved) > 1
        if not crossing and not seen_last_time and index - lock.checked_at < IDENTITY_RETRY_FRAMES:
            return None
        lock.checked_at = index
        candidates = moved if crossing else faces
        scores = [float(embed(frame, f) @ lock.identity) for f in candidates]
        best = int(np.argmax(scores))
        return candidates[best] if scores[best] >= SAME_PERSON_COSINE else None

"""A look that came in after the loop stopped waiting, used when what it says still holds.

The loop waits for the tracker's crop re-detection at most a deadline (`frames.TRACK_DEADLINE_FRAMES`);
a look that takes longer leaves its frame late (covered whole). Dropped, such a look is wasted: the
next frame starts another one, just as slow — a crowd of 146 faces on a busy machine was late on
every frame and never swapped. So a late look is kept (`LateLook`, with each face's grey square cut
from the frame it looked at, before anything was drawn on it), and when it lands a later frame
uses it where the pixels say it still holds: each face it found is taken where `motion.follow`
finds those pixels now — only when every block of the face only moved since the look's frame, the
same test that lets a face be followed without a detector run. A face whose pixels changed since
is none of its business (looked for again); a face it did not find, whose square only moved, is
lost, as an on-time miss would be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from vcamd.common.types import Face, Frame
from vcamd.live.tracking.motion import KeyPatch, follow, key_patch
from vcamd.privacy.geometry import same_face_pairs


@dataclass(frozen=True, slots=True)
class Landed:
    """What a late look says of one face now: `face` where it is in the current frame (None: the
    look did not find it, and its square only moved since — a miss), with the key patch it may be
    followed by from now on (None for a miss), and whether its pixels only moved before the look too."""

    face: Face | None
    key: KeyPatch | None
    unchanged: bool


@dataclass(frozen=True)
class LateLook:
    """A re-detection that ran past the loop's deadline: the faces it looked for where they were in
    frame `frame_index`, each one's square cut from that frame, and how to read the call's value."""

    frame_index: int
    faces: list[Face]
    keys: list[KeyPatch | None]
    unchanged: list[bool]
    """Per face: its pixels only moved since its previous key, up to the look's frame."""
    decode: Callable[[Any], list[Face | None]]
    """The call's value → per face, its detection in the look's frame (None: not found)."""

    @classmethod
    def cut(cls, frame: Frame, frame_index: int, faces: list[Face], unchanged: list[bool],
            decode: Callable[[Any], list[Face | None]]) -> LateLook:
        """Keep a late look, with the squares of `faces` cut from `frame` now (before the loop draws on it)."""
        return cls(frame_index, list(faces), [key_patch(frame, f, frame_index) for f in faces], list(unchanged), decode)

    def holds_now(self, frame: Frame, frame_index: int, value: Any) -> list[Landed | None]:
        """Per face looked for: what the look's `value` says of it in `frame` (see `Landed`), or
        None where the face's pixels changed since the look's frame (or cannot be compared)."""
        out: list[Landed | None] = []
        for face, key, unchanged, found in zip(self.faces, self.keys, self.unchanged, self.decode(value), strict=True):
            if key is None:
                out.append(None)
            elif found is None:  # a miss, if nothing there changed since
                out.append(Landed(None, None, False) if follow(frame, key, face, frame_index, backstop=False) is not None else None)
            else:
                # The same square, with the face the look found in it: followed to this frame.
                found_key = replace(key, face=found)
                moved = follow(frame, found_key, found, frame_index, backstop=False)
                out.append(None if moved is None else Landed(moved, found_key, unchanged))
        return out


def nearest_each(faces: list[Face], dets: list[Face]) -> list[Face | None]:
    """Per face (in order), the detection nearest its centre among those `near` it and not taken
    by an earlier face; None when there is none. One array of pairs, however many faces."""
    return [None if j is None else dets[j] for j in same_face_pairs(faces, dets)]

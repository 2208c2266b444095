"""Face mapping (`[[swap.map]]`): several people in the frame, each given their own source face,
told apart by the recogniser — person A becomes X, person B becomes Y; everyone else follows
`[swap] others`.

`load_face_map` reads each entry's reference photo and source once (exactly one face in each
photo, or a ConfigError naming the entry and the fix) and computes each source photo's swapper
input once, cached by the source file (`FaceMap.latents`); a source may instead be a DeepFaceLab
`.dfm` model (its own trained face: `FaceMap.models`, that person's faces swapped by it). A swap
made for a person is labelled with their source's `key`, and the privacy rule
(`vcamd.privacy.rule.compose`) shows a swap only on a face that wants that key.

`WhoIsWho` decides who each face of a frame is and keeps it: a face that continues a face of the
last frames (at about its place and size, and no other face could be it) keeps its identity and is
re-checked every RECHECK_FRAMES frames; a new face, or two faces close enough to be confused, is
recognised at once. A check is three-way (`FaceMap.decide`): a mapped person (clearly closer to one
reference than to any other), a stranger (far from every reference), or unsure — covered, never
given a source, and checked again soon. A mapped face keeps its person over a re-check that is
unsure or says stranger (a turned head scores low); only a confident check for another mapped
person moves it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from vcamd.common.errors import ConfigError, FaceError
from vcamd.common.types import Face, Frame
from vcamd.faces.identity import SAME_PERSON_COSINE, SourceFace, file_stamp
from vcamd.privacy.geometry import at_place_of
from vcamd.privacy.rule import UNKNOWN_SOURCE

if TYPE_CHECKING:
    from vcamd.common.quality import Level
    from vcamd.config.schema import FaceMapEntry
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Embedding, Recognizer, SourceIdentity
    from vcamd.faces.results import StageTimer, SwappedFace
    from vcamd.faces.swap import Latent, Swapper
    from vcamd.inference.runtime import Sessions

class SwapsWith(Protocol):
    """What a face map asks of the face engine (`FaceEngine`): its swapper, and a swap with any swapper."""

    swapper: Swapper

    def swap_with(self, swapper: Swapper, frame: Frame, faces: list[Face], level: Level, timer: StageTimer | None,
                  latent: Latent | None) -> list[SwappedFace]: ...


STRANGER = -1
"""`decide`: none of the mapped people (follows `[swap] others`)."""
UNSURE = 0
"""`decide`: cannot say who — covered, never given a source. Mapped people are numbered from 1."""

MATCH_MARGIN = 0.1
"""A face is a mapped person when its cosine with their reference is at least SAME_PERSON_COSINE
and this much above its cosine with every other reference (two look-alike references: unsure)."""

STRANGER_COSINE = 0.4
"""... and a stranger when its cosine with every reference is below this (ArcFace strangers
≤ 0.3, the same person ≥ 0.7; MobileFaceNet ≈ 0.2 and ≈ 0.95). Between the two: unsure."""

RECHECK_FRAMES = 15
"""A face that keeps its identity is recognised again this often (one embedding per face)."""

UNSURE_RETRY_FRAMES = 2
"""An unsure face is recognised again this often until it is decided."""

KEEP_TRACK_FRAMES = 10
"""A face not seen for this many frames is forgotten: seen again, it is recognised anew."""


@dataclass(frozen=True, slots=True)
class MappedPerson:
    """One `[[swap.map]]` entry, loaded: who (the reference face's embedding) gets which face."""

    number: int  # the entry's place in the config, from 1
    reference: Path
    embedding: Embedding
    source: Path  # the source photo, or `.dfm` model
    key: str  # the source file as a stamp: what the swaps made for this person are labelled with


@dataclass(frozen=True, slots=True)
class FaceMap:
    """The mapped people, and each source's swapper input (computed once per source photo)."""

    people: tuple[MappedPerson, ...]
    latents: dict[str, Latent | None]
    models: dict[str, Swapper] = field(default_factory=dict)
    """A `.dfm` source's own model, by its key (the engine's swapper swaps the photo sources)."""

    def swap(self, engine: SwapsWith, frame: Frame, faces: list[Face], level: Level, timer: StageTimer,
             keys: list[str]) -> list[SwappedFace]:
        """Each face swapped to its source (`keys`): the photo sources in one batch of the engine's
        swapper, each `.dfm` person's faces by their model; every result labelled with its key."""
        out: list[SwappedFace | None] = [None] * len(faces)
        groups = [(engine.swapper, [i for i, k in enumerate(keys) if k not in self.models])]
        groups += [(model, [i for i, k in enumerate(keys) if k == key]) for key, model in self.models.items()]
        for swapper, picked in groups:
            if not picked:
                continue
            rows = self.rows([keys[i] for i in picked]) if swapper is engine.swapper and swapper.needs_source else None
            for i, made in zip(picked, engine.swap_with(swapper, frame, [faces[i] for i in picked], level, timer, rows)):
                out[i] = replace(made, source=keys[i])
        return [sw for sw in out if sw is not None]

    def decide(self, embedding: Embedding) -> int:
        """A mapped person's number, STRANGER or UNSURE for a face's embedding (module doc)."""
        scores = np.array([float(embedding @ p.embedding) for p in self.people])
        best = int(np.argmax(scores))
        second = float(np.max(np.delete(scores, best))) if len(scores) > 1 else -1.0
        if scores[best] >= SAME_PERSON_COSINE and scores[best] - second >= MATCH_MARGIN:
            return self.people[best].number
        return STRANGER if scores[best] < STRANGER_COSINE else UNSURE

    def rows(self, keys: list[str]) -> Latent:
        """One source row per face, for these keys (each a key of this map)."""
        missing = [k for k in keys if self.latents.get(k) is None]
        if missing:
            raise FaceError(f"a face was sent to swap with a source this map has not got ({missing[0]})", fix="it is swapped again from the next frame")
        return np.concatenate([self.latents[k] for k in keys])

    def key_of(self, who: int) -> str | None:
        """The source key a face of identity `who` wants; None for a stranger (not swapped)."""
        if who == STRANGER:
            return None
        return self.people[who - 1].key if who > 0 else UNKNOWN_SOURCE

    def status(self) -> list[dict[str, str]]:
        return [{"reference": str(p.reference), "source": str(p.source)} for p in self.people]


def load_face_map(entries: Sequence[FaceMapEntry], detector: FaceDetector, recognizer: Recognizer, swapper: Swapper,
                  cache: dict[tuple[Path, int, int], SourceFace], sessions: Sessions | None = None) -> FaceMap:
    """Every entry's reference embedded and source made into the swapper's input (a photo already
    in `cache`, by its file stamp, is not read again) or loaded (a `.dfm`, on `sessions`).
    ConfigError naming the entry."""
    people: list[MappedPerson] = []
    latents: dict[str, Latent | None] = {}
    models: dict[str, Swapper] = {}
    for number, entry in enumerate(entries, 1):
        reference = _one_face(entry.reference, number, "reference", detector, recognizer)
        source_stamp = file_stamp(Path(entry.source))
        key = f"{source_stamp[0]}:{source_stamp[1]}:{source_stamp[2]}"
        if Path(entry.source).suffix.lower() == ".dfm":
            models[key] = _own_model(Path(entry.source), number, sessions)
        else:
            if not swapper.needs_source:  # a .dfm as [models] swapper would put its own face on them
                raise ConfigError(f"[[swap.map]] entry {number}", [f"source = {str(entry.source)!r}: [models] swapper swaps in its own "
                                                                "trained face, not a photo's — set a swapper that takes a source face"])
            if source_stamp[1] < 0 or source_stamp not in cache:
                identity = _one_face(entry.source, number, "source", detector, recognizer)
                cache[source_stamp] = SourceFace(identity, swapper.source_for(identity), source_stamp)
            latents[key] = cache[source_stamp].latent
        people.append(MappedPerson(number, Path(entry.reference), reference.embedding, Path(entry.source), key))
    return FaceMap(tuple(people), latents, models)


def _own_model(path: Path, number: int, sessions: Sessions | None) -> Swapper:
    """A mapped person's DeepFaceLab model (its own trained face). ConfigError naming the entry."""
    from vcamd.common.errors import VcamdError
    from vcamd.faces.swap import Swapper

    where, what = f"[[swap.map]] entry {number}", f"source = {str(path)!r}"
    if sessions is None:
        raise ConfigError(where, [f"{what}: a .dfm source needs the engine's sessions — build it with FaceEngine.from_config"])
    try:
        model = Swapper(path, sessions)
    except VcamdError as exc:
        raise ConfigError(where, [f"{what}: {exc}"]) from None
    if model.needs_source:
        raise ConfigError(where, [f"{what}: not a DeepFaceLab model — give a photo of the face, or a .dfm"])
    return model


def _one_face(path: Path, number: int, key: str, detector: FaceDetector, recognizer: Recognizer) -> SourceIdentity:
    from vcamd.faces.identity import load_source_identity

    where = f"[[swap.map]] entry {number}"
    try:
        identity = load_source_identity(path, detector, recognizer, f"{key} photo")
    except FaceError as exc:
        raise ConfigError(where, [f"{key} = {str(path)!r}: {exc}"]) from None
    if identity.faces_in_photo > 1:
        raise ConfigError(where, [f"{key} = {str(path)!r}: {identity.faces_in_photo} faces found, so it cannot say who is meant — "
                                  "crop the photo to the one person's face"])
    return identity


@dataclass(slots=True)
class _Track:
    face: Face  # where it was last seen
    who: int
    checked_at: int  # frame index of its last recognition
    seen_at: int


class WhoIsWho:
    """Who each face is, frame after frame (module doc). One per stream (a camera, a video)."""

    def __init__(self) -> None:
        self._tracks: list[_Track] = []
        self._map: FaceMap | None = None

    def who(self, face_map: FaceMap, faces: list[Face], frame: Frame, index: int, embed: Callable[[Frame, Face], Embedding]) -> list[int]:
        """Per face: a mapped person's number, STRANGER or UNSURE. Raises what `embed` raises."""
        if face_map is not self._map:  # another map (an edit): everyone is recognised anew
            self._map, self._tracks = face_map, []
        tracks = [t for t in self._tracks if index - t.seen_at <= KEEP_TRACK_FRAMES]
        near = [[t for t in tracks if at_place_of(t.face, f)] for f in faces]
        out: list[_Track] = []
        for face, candidates in zip(faces, near):
            track = candidates[0] if len(candidates) == 1 and sum(candidates[0] in n for n in near) == 1 else None
            if track is None:
                track = _Track(face, face_map.decide(embed(frame, face)), index, index)
            elif index - track.checked_at >= (UNSURE_RETRY_FRAMES if track.who == UNSURE else RECHECK_FRAMES):
                track.who, track.checked_at = _after_recheck(track.who, face_map.decide(embed(frame, face))), index
            track.face, track.seen_at = face, index
            out.append(track)
        self._tracks = out + [t for t in tracks if all(t is not o for o in out)]
        return [t.who for t in out]


def _after_recheck(before: int, now: int) -> int:
    """A mapped face keeps its person unless a check is sure of another; the rest take the check."""
    if before > 0 and now <= 0:
        return before
    return now

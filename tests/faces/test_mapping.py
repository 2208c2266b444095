"""Who is who under a face map (`vcamd.faces.mapping`), on the real MobileFaceNet's embeddings of
five real people (`support.mapping`): the three-way decision, and `WhoIsWho` keeping a face's
identity along its track — recognised when it appears, re-checked every RECHECK_FRAMES, an unsure
face every UNSURE_RETRY_FRAMES, faces that could be confused recognised anew."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.mapping import make_case

from vcamd.bench import leaks
from vcamd.common.types import Face
from vcamd.faces.mapping import (
    RECHECK_FRAMES,
    STRANGER,
    STRANGER_COSINE,
    UNSURE,
    UNSURE_RETRY_FRAMES,
    FaceMap,
    MappedPerson,
    WhoIsWho,
)


@pytest.fixture(scope="module")
def people(tmp_path_factory, assets: Path) -> np.ndarray:
    both, recognizer = leaks.load_checkers(assets / "models")
    return make_case(tmp_path_factory.mktemp("who"), assets, both[1], recognizer).people


@pytest.fixture(scope="module")
def face_map(people: np.ndarray) -> FaceMap:
    """Person 0 → source 3, person 1 → source 4."""
    mapped = tuple(MappedPerson(n, Path(f"person{n - 1}.png"), people[n - 1], Path(f"person{s}.png"), f"key{s}") for n, s in ((1, 3), (2, 4)))
    return FaceMap(mapped, {p.key: np.zeros((1, 4), np.float32) for p in mapped})


def face_at(x: float, width: float = 100.0) -> Face:
    return Face(box=(x, 100.0, x + width, 100.0 + width), score=0.9, kps=np.zeros((5, 2), np.float32))


class Embeds:
    """A recogniser whose answer for a face is chosen by where the face is; counts its calls."""

    def __init__(self, by_place) -> None:  # type: ignore[no-untyped-def]
        self.by_place, self.calls = by_place, 0

    def __call__(self, frame, face: Face) -> np.ndarray:  # type: ignore[no-untyped-def]
        self.calls += 1
        return self.by_place(face.box[0])


def test_the_decision_is_a_person_a_stranger_or_unsure(face_map: FaceMap, people: np.ndarray) -> None:
    assert [face_map.decide(people[k]) for k in range(2)] == [1, 2]
    # The others are no mapped person: strangers, or unsure where they look a little like one
    # (person 4 scores 0.42 against person 1 with MobileFaceNet) — covered, never given a source.
    for k in range(2, 5):
        closest = float(np.max(people[:2] @ people[k]))
        assert face_map.decide(people[k]) == (STRANGER if closest < STRANGER_COSINE else UNSURE), (k, closest)
    between = people[0] + people[1]
    assert face_map.decide(between / np.linalg.norm(between)) == UNSURE  # like both: never given either source
    assert face_map.key_of(1) == "key3" and face_map.key_of(2) == "key4" and face_map.key_of(STRANGER) is None
    assert face_map.key_of(UNSURE) == "?"


def test_a_track_keeps_its_identity_and_is_rechecked(face_map: FaceMap, people: np.ndarray) -> None:
    embeds = Embeds(lambda x: people[int(x // 300)])
    who = WhoIsWho()
    frames = 2 * RECHECK_FRAMES
    for i in range(frames):
        faces = [face_at(300 * k + 20 + 2 * i % 30) for k in range(3)]
        assert who.who(face_map, faces, None, i, embeds) == [1, 2, STRANGER]
    assert embeds.calls == 3 * 2  # each face recognised when it appeared, and once after RECHECK_FRAMES


def test_a_mapped_face_keeps_its_person_until_a_check_is_sure_of_another(face_map: FaceMap, people: np.ndarray) -> None:
    answers = {0: people[0], RECHECK_FRAMES: people[2], 2 * RECHECK_FRAMES: people[1]}  # a low-scoring view, then person 1
    current = [people[0]]
    embeds = Embeds(lambda x: current[0])
    who = WhoIsWho()
    seen = []
    for i in range(2 * RECHECK_FRAMES + 1):
        current[0] = answers.get(i, current[0])
        seen.append(who.who(face_map, [face_at(100)], None, i, embeds)[0])
    assert seen[: 2 * RECHECK_FRAMES] == [1] * (2 * RECHECK_FRAMES)
    assert seen[-1] == 2


def test_an_unsure_face_is_covered_and_checked_again_soon(face_map: FaceMap, people: np.ndarray) -> None:
    between = (people[0] + people[1]) / np.linalg.norm(people[0] + people[1])
    current = [between]
    embeds = Embeds(lambda x: current[0])
    who = WhoIsWho()
    assert who.who(face_map, [face_at(100)], None, 0, embeds) == [UNSURE]
    assert who.who(face_map, [face_at(100)], None, 1, embeds) == [UNSURE] and embeds.calls == 1
    current[0] = people[1]
    assert who.who(face_map, [face_at(100)], None, UNSURE_RETRY_FRAMES, embeds) == [2] and embeds.calls == 2


def test_faces_that_could_be_confused_are_recognised_anew(face_map: FaceMap, people: np.ndarray) -> None:
    """Two faces closer than a face width: which track each continues is not known, so both are
    recognised again on that frame (and keep what they are, each by its own face)."""
    embeds = Embeds(lambda x: people[0] if x < 150 else people[1])
    who = WhoIsWho()
    assert who.who(face_map, [face_at(0), face_at(300)], None, 0, embeds) == [1, 2]
    assert who.who(face_map, [face_at(100), face_at(180)], None, 1, embeds) == [1, 2]
    assert embeds.calls == 4

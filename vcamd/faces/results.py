"""What the face path hands on: a swapped face as an aligned crop (`SwappedFace`), one processed
frame (`FrameResult`), the per-stage timer both paths fill (`StageTimer`), and one frame of
`vcamd swap` as the privacy rule takes it (`frame_scene`)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vcamd.common.types import Face, Frame, Points
from vcamd.config.schema import OnMiss, Others
from vcamd.faces.align import Template
from vcamd.privacy.rule import Scene

if TYPE_CHECKING:
    from vcamd.faces.parse import FloatMask


@dataclass(frozen=True, slots=True)
class SwappedFace:
    """A swapped face as an aligned crop, ready to be composited at any position of that face.

    `template`/`crop` size say how the crop is aligned: the swapper's crop (inswapper: "arcface"
    128²) or the enhancer's (GFPGAN: "ffhq" 512², restored). `kps` are the keypoints it was made from.
    """

    crop: Frame
    template: Template
    kps: Points
    keep: FloatMask | None = None
    """Where the swap may show (crop-sized, [0, 1]): the face parser's regions; None: everywhere."""
    shown: bool = True
    """False: the face parser saw too little of the face (a hand over it, a turned head): not to be
    pasted at all — the face is held or obscured like a face that could not be swapped."""
    enhanced: bool = False
    """Restored by the enhancer (its colours were matched before restoring)."""
    source: str = ""
    """Which source face it shows: a face map's key for that source (`vcamd.faces.mapping`); "": the engine's source face."""

    @property
    def size(self) -> int:
        return int(self.crop.shape[0])


@dataclass(frozen=True, slots=True)
class FrameResult:
    """One processed frame: the output image, the faces detected, how many were swapped, and the
    milliseconds each stage took (detect, select, align, swap, enhance, blend)."""

    frame: Frame
    faces: list[Face]
    swapped: int
    stage_ms: dict[str, float]


@dataclass
class StageTimer:
    """Accumulates wall-clock milliseconds per named stage."""

    ms: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.ms[stage] = self.ms.get(stage, 0.0) + (time.perf_counter() - start) * 1000.0


def frame_scene(frame: Frame, faces: list[Face], targets: list[Face], swapped: Sequence[SwappedFace | None], others: Others,
                sources: list[str | None] | None = None) -> Scene:
    """One frame of `vcamd swap` as the privacy rule takes it (`vcamd.privacy.rule.Scene`): every
    position is known (the faces were just detected at this frame); each target gets its swap, or
    none where the face parser saw too little of the face (covered, never left raw) or no swap came
    back; the faces not chosen are obscured unless `[swap] others = "show"`. A photo has no last good
    output to hold, so a face that cannot be swapped is obscured. `sources`: a face map's per target
    (`FollowedFace.pick`)."""
    swaps: list[SwappedFace | None] = [s if s is not None and s.shown else None for s in swapped[: len(targets)]]
    swaps += [None] * (len(targets) - len(swaps))
    not_chosen = [f for f in faces if not any(f is t for t in targets)] if others is Others.obscure else []
    return Scene(frame=frame, enabled=True, on_miss=OnMiss.blur, known=True, targets=list(targets), swaps=list(swaps),
                 others=not_chosen, sources=list(sources) if sources and any(k is not None for k in sources) else [])

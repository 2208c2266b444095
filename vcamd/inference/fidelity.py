"""The fidelity check of an int8 copy against its float model, on the user's own weights and faces.

Each calibration face is swapped by both models with the same source; the two swapped crops (as
shown: BGR uint8) are compared two ways:

* **PSNR** of the int8 crop against the float crop: at least `Thresholds.psnr_db` on *every* face;
* **identity**, by the user's own recogniser: the int8 face's cosine to the source may fall at most
  `Thresholds.identity_drop` below the float face's, and the int8 face must be the float face to the
  recogniser (cosine at least `Thresholds.same_face`).

Why these numbers (`benchmarks/int8_thresholds.py`: the real faces of `../shared/assets`, 30
aligned face crops, and the real MobileFaceNet; docs/performance.md, "int8 on the CPU"):

* 35 dB is what a face crop already loses on its way to the other side of a call: a 720p H.264
  stream at 0.8 Mbps (the low end of a video call) leaves the worst crop at 35.6 dB (37.0 median),
  at 1.5 Mbps 37.8 dB; the camera's own MJPG at quality 75, 39.0 dB. An int8 copy held to 35 dB on
  its worst face changes the face no more than the call's encoder does anyway (the two together:
  at most ~3 dB below the encoder alone).
* 0.02 of cosine: those transports move the recogniser's view of the same face by at most 0.007
  (0.9930 at 0.8 Mbps, 0.9934 for JPEG at quality 75), while another person sits about 0.75 away
  (the same face ≈ 0.95, different people ≈ 0.2: `../shared/assets/SOURCES.md`). A drop of 0.02
  is three times the transport's own wobble and under a thirtieth of the way to someone else.
  0.95 between the int8 and the float face: the transports keep ≥ 0.993, and 0.95 is where
  SOURCES.md puts the same person.

A copy that misses any threshold on any face never runs: the float model stays and the reason is
shown (`vcamd.inference.precision`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Crop = npt.NDArray[np.uint8]
Embedding = npt.NDArray[np.float32]

PSNR_CAP_DB = 99.0
"""PSNR of identical crops (infinite) as a number JSON can hold."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    psnr_db: float = 35.0
    """Worst face's PSNR of the int8 swap against the float swap, in dB."""
    identity_drop: float = 0.02
    """Most the int8 face's cosine to the source may fall below the float face's."""
    same_face: float = 0.95
    """Least cosine between the int8 face and the float face."""


THRESHOLDS = Thresholds()


@dataclass(frozen=True, slots=True)
class FaceFigures:
    """One calibration face: its two swaps compared."""

    psnr_db: float
    float_to_source: float
    int8_to_source: float
    int8_to_float: float

    @property
    def identity_drop(self) -> float:
        return self.float_to_source - self.int8_to_source


@dataclass(frozen=True)
class FidelityReport:
    faces: list[FaceFigures]
    thresholds: Thresholds = field(default=THRESHOLDS)

    @property
    def worst_psnr_db(self) -> float:
        return min(f.psnr_db for f in self.faces)

    @property
    def worst_identity_drop(self) -> float:
        return max(f.identity_drop for f in self.faces)

    @property
    def worst_same_face(self) -> float:
        return min(f.int8_to_float for f in self.faces)

    def failures(self) -> list[str]:
        """Each threshold missed, in words (empty: the copy passed)."""
        if not self.faces:
            return ["no face to compare on"]
        t, out = self.thresholds, []
        if self.worst_psnr_db < t.psnr_db:
            out.append(f"PSNR {self.worst_psnr_db:.1f} dB < {t.psnr_db:g} dB")
        if self.worst_identity_drop > t.identity_drop:
            out.append(f"identity to the source falls {self.worst_identity_drop:.3f} > {t.identity_drop:g}")
        if self.worst_same_face < t.same_face:
            out.append(f"int8 face vs float face cosine {self.worst_same_face:.3f} < {t.same_face:g}")
        return out

    @property
    def passed(self) -> bool:
        return not self.failures()

    def summary(self) -> str:
        """One line: the thresholds missed, or the worst figures against their thresholds."""
        failures = self.failures()
        if failures:
            return f"failed on {_faces(len(self.faces))}: {'; '.join(failures)}"
        t = self.thresholds
        return (f"{_faces(len(self.faces))}: PSNR ≥ {self.worst_psnr_db:.1f} dB (needs {t.psnr_db:g}), "
                f"identity drop ≤ {self.worst_identity_drop:.3f} (at most {t.identity_drop:g}), "
                f"int8 vs float face ≥ {self.worst_same_face:.3f} (needs {t.same_face:g})")

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary(), "thresholds": asdict(self.thresholds),
                "faces": [asdict(f) | {"identity_drop": round(f.identity_drop, 5)} for f in self.faces]}


def _faces(n: int) -> str:
    return f"{n} face" if n == 1 else f"{n} faces"


def psnr_db(a: Crop, b: Crop) -> float:
    """Peak signal-to-noise ratio of two uint8 images, in dB (capped at PSNR_CAP_DB when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return PSNR_CAP_DB if mse == 0.0 else min(PSNR_CAP_DB, 10.0 * math.log10(255.0**2 / mse))


def compare(float_crops: Sequence[Crop], int8_crops: Sequence[Crop], embed: Callable[[Crop], Embedding],
            source: Embedding, thresholds: Thresholds = THRESHOLDS) -> FidelityReport:
    """The report for pairs of swapped crops (the same face and source through each model);
    `embed` is the user's recogniser on a swapped crop, `source` the source face's embedding."""
    if len(float_crops) != len(int8_crops):
        raise ValueError(f"{len(float_crops)} float crops against {len(int8_crops)} int8 crops")
    source = np.asarray(source, np.float32).reshape(-1)
    faces = []
    for f, q in zip(float_crops, int8_crops):
        ef, eq = embed(f), embed(q)
        faces.append(FaceFigures(psnr_db=round(psnr_db(f, q), 3), float_to_source=round(float(ef @ source), 5),
                                 int8_to_source=round(float(eq @ source), 5), int8_to_float=round(float(eq @ ef), 5)))
    return FidelityReport(faces, thresholds)

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

The enhancer's copy is held to the same three (`compare` on the restored crops, float against
int8): what it hands on to the call is a face crop like the swapper's, and an int8 enhancer must
never change who the face looks like any more than the swapper's copy may.

The face parser's copy (`compare_parses`) is held to its class maps on the face's area — the pixels
either model calls one of the face's regions (`vcamd.faces.parse.FACE_CLASSES`: what any `[mask]
regions` choice can paste over). Its boundaries may move a little; its classes elsewhere may not:

* **off the edges** — the share of the face's area farther than `ParserThresholds.edge_px` (2 px, at
  512²) from the float map's edge pixels whose int8 class differs: at most `off_edge` (0.5 %) on every
  face. A boundary moved by up to 3 px changes nothing off the edges; one moved by 4 px (half of BiSeNet's
  own 8-px cell: it predicts at 64² and upsamples) changes 1.5 % of the median face, 4.9 % of the worst;
* **visible** — the share of the face's core (eyes, nose, mouth) seen as face, which decides whether
  a face is pasted at all (`[mask] min_visible`, failing closed): the int8 copy's may differ from the
  float one's by at most `visible` (0.02), so it cannot tip a face the float model would hold into
  being pasted, except within 0.02 of the setting.

Why these numbers (`benchmarks/int8_thresholds.py --parser`: the FFHQ 512² crops of the 30 real faces
of `../shared/assets`, class maps drawn at BiSeNet's resolution by the convolutional stand-in, each
map moved by k px four ways): the camera's own MJPG (JPEG q75) moves the detector's keypoints, and so
the crop and its mask, by up to 1.5 px (median 0.8) every frame, and changes 0.05 % of the map off
the edges; the paste softens the mask over σ = 5 px anyway (`parse.EDGE_SIGMA`). Moving every
boundary by 2 / 3 / 4 px changes the core's share by at most 0.014 / 0.022 / 0.029. So an int8 parser
held to these moves the mask by at most ~3 px: twice what the camera's JPEG moves it anyway, under
half the parser's own cell, inside the paste's soft edge; the share of the whole face with the same class (reported, not
held: a small face has more edge for its area — 93.6 % after a 1-px move on the worst face here,
97.9 % on the median) is printed beside.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
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


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the fidelity check said of a model's int8 copy (`vcamd.inference.int8cache` keeps it)."""

    passed: bool
    summary: str
    """One line: the figures against their thresholds (`FidelityReport.summary`)."""


class CopyReport(ABC):
    """What every role's report says the same way (`FidelityReport`, `ParserReport`): a copy passes
    when no threshold is missed on any calibration face; the summary, JSON and table are built
    from each report's own figures."""

    faces: Sequence[Any]
    thresholds: Any

    @abstractmethod
    def _missed(self) -> list[str]:
        """Each threshold missed, in words (there are faces)."""

    @abstractmethod
    def _met(self) -> str:
        """The worst figures against their thresholds, in words (the copy passed)."""

    @abstractmethod
    def _face_json(self, face: Any) -> dict[str, Any]:
        """One face's figures as the JSON shows them."""

    @abstractmethod
    def _table(self) -> tuple[str, list[str], str]:
        """The table's heading, a line a face and the thresholds' line."""

    def failures(self) -> list[str]:
        """Each threshold missed, in words (empty: the copy passed)."""
        return self._missed() if self.faces else ["no face to compare on"]

    @property
    def passed(self) -> bool:
        return not self.failures()

    def summary(self) -> str:
        """One line: the thresholds missed, or the worst figures against their thresholds."""
        failures = self.failures()
        if failures:
            return f"failed on {_faces(len(self.faces))}: {'; '.join(failures)}"
        return f"{_faces(len(self.faces))}: {self._met()}"

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary(), "thresholds": asdict(self.thresholds),
                "faces": [self._face_json(f) for f in self.faces]}

    def table(self) -> list[str]:
        """The figures face by face and the thresholds, as `vcamd models quantize` prints them."""
        heading, rows, needs = self._table()
        return [heading, *rows, needs]


@dataclass(frozen=True)
class FidelityReport(CopyReport):
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

    def _missed(self) -> list[str]:
        t, out = self.thresholds, []
        if self.worst_psnr_db < t.psnr_db:
            out.append(f"PSNR {self.worst_psnr_db:.1f} dB < {t.psnr_db:g} dB")
        if self.worst_identity_drop > t.identity_drop:
            out.append(f"identity to the source falls {self.worst_identity_drop:.3f} > {t.identity_drop:g}")
        if self.worst_same_face < t.same_face:
            out.append(f"int8 face vs float face cosine {self.worst_same_face:.3f} < {t.same_face:g}")
        return out

    def _met(self) -> str:
        t = self.thresholds
        return (f"PSNR ≥ {self.worst_psnr_db:.1f} dB (needs {t.psnr_db:g}), "
                f"identity drop ≤ {self.worst_identity_drop:.3f} (at most {t.identity_drop:g}), "
                f"int8 vs float face ≥ {self.worst_same_face:.3f} (needs {t.same_face:g})")

    def _face_json(self, face: FaceFigures) -> dict[str, Any]:
        return asdict(face) | {"identity_drop": round(face.identity_drop, 5)}

    def _table(self) -> tuple[str, list[str], str]:
        t = self.thresholds
        return ("face   PSNR dB   to source float / int8 (drop)   int8 vs float",
                [f"{i:>4}   {f.psnr_db:7.1f}   {f.float_to_source:.3f} / {f.int8_to_source:.3f} ({f.identity_drop:+.3f})      {f.int8_to_float:.3f}"
                 for i, f in enumerate(self.faces, 1)],
                f"needs: PSNR ≥ {t.psnr_db:g} dB on every face, a drop of at most {t.identity_drop:g}, int8 vs float ≥ {t.same_face:g}")


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


# -- the face parser's copy --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParserThresholds:
    edge_px: float = 2.0
    """How far (px at 512²) from the float parser's class boundaries a class may differ: a boundary may move this much."""
    off_edge: float = 0.005
    """Most share of the face's area farther than `edge_px` from those boundaries whose class differs (every face)."""
    visible: float = 0.02
    """Most the share of the face's core seen as face may change (what `[mask] min_visible` reads)."""


PARSER_THRESHOLDS = ParserThresholds()


@dataclass(frozen=True, slots=True)
class ParsedFigures:
    """One calibration face: its two class maps compared."""

    agreement: float
    """Share of the face's area (pixels either parser calls one of the face's regions) with the same class."""
    off_edge: float
    """Share of the face's area away from the float map's boundaries (`ParserThresholds.edge_px`) with another class."""
    face_pixels: int
    float_visible: float
    int8_visible: float

    @property
    def visible_change(self) -> float:
        return abs(self.int8_visible - self.float_visible)


@dataclass(frozen=True)
class ParserReport(CopyReport):
    """`FidelityReport`'s counterpart for the face parser (`compare_parses`)."""

    faces: list[ParsedFigures]
    thresholds: ParserThresholds = field(default=PARSER_THRESHOLDS)

    @property
    def worst_off_edge(self) -> float:
        return max(f.off_edge for f in self.faces)

    @property
    def worst_agreement(self) -> float:
        return min(f.agreement for f in self.faces)

    @property
    def worst_visible_change(self) -> float:
        return max(f.visible_change for f in self.faces)

    def _missed(self) -> list[str]:
        t, out = self.thresholds, []
        if self.worst_off_edge > t.off_edge:
            out.append(f"{100 * self.worst_off_edge:.1f} % of the face changes class over {t.edge_px:g} px from an edge > {100 * t.off_edge:g} %")
        if self.worst_visible_change > t.visible:
            out.append(f"the face's core seen as face changes by {self.worst_visible_change:.3f} > {t.visible:g}")
        return out

    def _met(self) -> str:
        t = self.thresholds
        return (f"≤ {100 * self.worst_off_edge:.2f} % of the face changes class over {t.edge_px:g} px from an edge "
                f"(at most {100 * t.off_edge:g} %; the same class on ≥ {100 * self.worst_agreement:.1f} % of it), "
                f"its core seen as face changes ≤ {self.worst_visible_change:.3f} (at most {t.visible:g})")

    def _face_json(self, face: ParsedFigures) -> dict[str, Any]:
        return asdict(face) | {"visible_change": round(face.visible_change, 5)}

    def _table(self) -> tuple[str, list[str], str]:
        t = self.thresholds
        return ("face   same class / other class off the edges (% of the face, pixels)   core seen as face float / int8",
                [f"{i:>4}   {100 * f.agreement:6.2f} / {100 * f.off_edge:5.2f} % ({f.face_pixels:>6})                   "
                 f"{f.float_visible:.3f} / {f.int8_visible:.3f}" for i, f in enumerate(self.faces, 1)],
                f"needs: at most {100 * t.off_edge:g} % of the face in another class over {t.edge_px:g} px from the float map's "
                f"edges, on every face; its core changing by at most {t.visible:g}")


def boundary_distance(classes: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """Each pixel's distance (px) to the nearest pixel with a 4-neighbour of another class."""
    import cv2

    edge = np.zeros(classes.shape, bool)
    edge[:, 1:] |= classes[:, 1:] != classes[:, :-1]
    edge[:, :-1] |= classes[:, :-1] != classes[:, 1:]
    edge[1:, :] |= classes[1:, :] != classes[:-1, :]
    edge[:-1, :] |= classes[:-1, :] != classes[1:, :]
    if not edge.any():
        return np.full(classes.shape, np.inf, np.float32)
    return np.asarray(cv2.distanceTransform((~edge).astype(np.uint8), cv2.DIST_L2, 3), np.float32)


def compare_parses(float_maps: Sequence[npt.NDArray[np.uint8]], int8_maps: Sequence[npt.NDArray[np.uint8]], face_classes: Sequence[int],
                   core: npt.NDArray[np.bool_], thresholds: ParserThresholds = PARSER_THRESHOLDS) -> ParserReport:
    """The report for pairs of class maps (the same face through each parser): `face_classes` are
    the classes any `[mask] regions` can paste over, `core` the face's core at the maps' size."""
    if len(float_maps) != len(int8_maps):
        raise ValueError(f"{len(float_maps)} float class maps against {len(int8_maps)} int8 ones")
    classes = list(face_classes)
    faces = []
    for f, q in zip(float_maps, int8_maps):
        in_f, in_q = np.isin(f, classes), np.isin(q, classes)
        area = in_f | in_q
        pixels = int(area.sum())
        differs = (f != q) & area
        off_edge = differs & (boundary_distance(f) > thresholds.edge_px)
        faces.append(ParsedFigures(agreement=round(1.0 - differs.sum() / pixels, 5) if pixels else 1.0,
                                   off_edge=round(float(off_edge.sum()) / pixels, 5) if pixels else 0.0, face_pixels=pixels,
                                   float_visible=round(float(in_f[core].mean()), 5), int8_visible=round(float(in_q[core].mean()), 5)))
    return ParserReport(faces, thresholds)

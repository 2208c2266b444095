"""How a face model's tensors cross the network: one definition for the client and the server.

A served model keeps its own signature (names, shapes) so the client checks it with the very
contract code a local file is checked with (`Swapper`, `Enhancer`, `FaceParser` on the session's
`get_inputs()`); only the wire type of its image tensors differs. An image input or output travels
as the uint8 RGB pixels it was made from or is turned into — 49 KB for inswapper's 128² crop instead
of 196 KB of float32 — and each end turns pixels into the model's float values with the role's own
function (`CropSpec.to_blob`, `parse.to_blob`), so the model sees exactly the values it sees locally
and the face that comes back is the one a local swap gives, to the bit. The parser's 19×512²
logits come back as the class of each pixel (256 KB, not 20 MB). The source latent is sent as the
float32 it is (2 KB; fp16 would change the swap). A model served as it is (Triton's onnxruntime
backend: `vcamd serve --write-repository`) has float tensors on the wire: they travel as they are.

Which tensor is an image is the role's business (`ROLE_CODECS`), decided from the model's
signature alone by the same contract code (`swapper_spec_for`, `enhancer_spec_for`), so both ends
decide alike; a signature several swapper families share travels as the floats it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from vcamd.common.errors import ModelError
from vcamd.faces.specs import CropSpec, enhancer_spec_for, swapper_spec_for

Dim = int | str | None
"""A tensor dimension as ONNX Runtime shows it: a size, or a name / None where it is free."""

BATCH = "batch"
"""How a served model's free batch dimension (Triton's -1) is shown."""

ORT_TYPES = {"FP32": "tensor(float)", "FP16": "tensor(float16)", "UINT8": "tensor(uint8)", "INT64": "tensor(int64)",
             "FP64": "tensor(double)"}
"""Triton's datatype names → ONNX Runtime's type strings."""

NUMPY_TYPES: dict[str, type[np.generic]] = {"FP32": np.float32, "FP16": np.float16, "UINT8": np.uint8, "INT64": np.int64,
                                         "FP64": np.float64}  # CodeFormer's fidelity `weight`
TRITON_TYPES = {np.dtype(t).str: name for name, t in NUMPY_TYPES.items()}

EMAP_SUFFIX = ".emap"
"""The companion model that serves a swapper's `emap` rows (model data, never a user's)."""


@dataclass(frozen=True, slots=True)
class Arg:
    """One input or output of a model as ONNX Runtime's `NodeArg` shows it: name, shape, type."""

    name: str
    shape: list[Dim]
    type: str


@dataclass(frozen=True, slots=True)
class WireArg:
    """One tensor as Triton's model metadata shows it: name, datatype ("FP32", "UINT8"), shape (-1: free)."""

    name: str
    datatype: str
    shape: list[int]

    @classmethod
    def from_metadata(cls, entry: dict[str, Any]) -> WireArg:
        return cls(str(entry["name"]), str(entry["datatype"]), [int(d) for d in entry["shape"]])


def served_name(value: str) -> str:
    """The name a model is served under: its manifest name, or its file's name without `.onnx`,
    in the characters Triton allows in a model name. Client and server derive it from their own
    `[models]` value, so both name the same model the same way."""
    stem = value.replace("\\", "/").rsplit("/", 1)[-1]
    stem = stem[: -len(".onnx")] if stem.endswith(".onnx") else stem
    return re.sub(r"[^A-Za-z0-9_-]", "_", stem) or "model"


@runtime_checkable
class ServedElsewhere(Protocol):
    """A session whose model file is on the server: what the code would read from the graph (the
    swapper's `emap`) it asks the server for (`vcamd.remote.sessions.RemoteSession`)."""

    def initializer(self, name: str, shape: tuple[int, ...]) -> np.ndarray: ...


# ---- codecs --------------------------------------------------------------------------------------


class Codec(Protocol):
    """How one tensor travels: `to_wire` on the sending end, `from_wire` on the receiving end."""

    @property
    def datatype(self) -> str:
        """Triton's name of its type on the wire ("UINT8", "FP32")."""
        ...

    def to_wire(self, value: np.ndarray) -> np.ndarray: ...

    def from_wire(self, value: np.ndarray) -> np.ndarray: ...

    def shown(self, wire_shape: Sequence[Dim]) -> list[Dim]:
        """The model's shape of a tensor that has `wire_shape` on the wire."""
        ...

    def wire_shape(self, shape: Sequence[Dim]) -> list[Dim]:
        """The wire's shape of a tensor whose model shape is `shape`."""
        ...


class _SameShape:
    """A codec that keeps the tensor's shape (only its type changes on the wire)."""

    __slots__ = ()

    def shown(self, wire_shape: Sequence[Dim]) -> list[Dim]:
        return list(wire_shape)

    def wire_shape(self, shape: Sequence[Dim]) -> list[Dim]:
        return list(shape)


@dataclass(frozen=True, slots=True)
class AsIs(_SameShape):
    """A tensor sent as it is (the source latent; any float tensor of a model served as it is)."""

    datatype: str

    def to_wire(self, value: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(value, dtype=NUMPY_TYPES[self.datatype])

    def from_wire(self, value: np.ndarray) -> np.ndarray:
        return value


def _pixels_out(crops: Sequence[np.ndarray]) -> np.ndarray:
    """BGR HWC uint8 crops → one RGB NCHW uint8 batch (the model's layout, so its shape is the model's)."""
    return np.ascontiguousarray(np.stack(crops)[..., ::-1].transpose(0, 3, 1, 2))


def _pixels_in(batch: np.ndarray) -> list[np.ndarray]:
    """The inverse of `_pixels_out`: BGR HWC uint8 crops."""
    return [np.ascontiguousarray(item.transpose(1, 2, 0)[..., ::-1]) for item in np.asarray(batch, np.uint8)]


def _finite(value: np.ndarray) -> np.ndarray:
    # NaN/Inf would saturate to arbitrary pixels on the way out: the receiving end must see an error, as locally.
    if not np.isfinite(value).all():
        raise ModelError("the model returned NaN/Inf values", fix="check the model file on the server and its execution provider")
    return value


@dataclass(frozen=True, slots=True)
class CropPixels(_SameShape):
    """An image tensor of a `CropSpec` (N×3×S×S, RGB, (x − mean) / std) as its uint8 pixels."""

    spec: CropSpec
    datatype: str = "UINT8"

    def to_wire(self, value: np.ndarray) -> np.ndarray:
        return _pixels_out(self.spec.to_crops(_finite(np.asarray(value, np.float32))))

    def from_wire(self, value: np.ndarray) -> np.ndarray:
        return self.spec.to_blob(_pixels_in(value))


@dataclass(frozen=True, slots=True)
class ParserPixels(_SameShape):
    """The face parser's input (N×3×512², ImageNet normalisation) as its uint8 RGB pixels."""

    datatype: str = "UINT8"

    def to_wire(self, value: np.ndarray) -> np.ndarray:
        from vcamd.faces.parse import MEAN, STD

        rgb = (np.asarray(value, np.float32).transpose(0, 2, 3, 1) * STD + MEAN) * 255.0
        return np.ascontiguousarray(np.clip(np.rint(rgb), 0, 255).astype(np.uint8).transpose(0, 3, 1, 2))

    def from_wire(self, value: np.ndarray) -> np.ndarray:
        from vcamd.faces.parse import to_blob

        return np.concatenate([to_blob(np.ascontiguousarray(item.transpose(1, 2, 0))) for item in np.asarray(value, np.uint8)])


@dataclass(frozen=True, slots=True)
class Classes:
    """Per-pixel class logits (N×C×H×W) as the class of each pixel (N×H×W uint8): what the parser
    reads of them (its argmax). The receiving end shows them as one-hot scores of the same shape."""

    classes: int
    datatype: str = "UINT8"

    def to_wire(self, value: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(_finite(np.asarray(value)).argmax(axis=1).astype(np.uint8))

    def from_wire(self, value: np.ndarray) -> np.ndarray:
        labels = np.asarray(value, np.uint8)
        if labels.size and int(labels.max()) >= self.classes:
            raise ModelError(f"the served parser sent class {int(labels.max())}, beyond its {self.classes}",
                             fix="check the parser model on the server")
        onehot = np.zeros((labels.shape[0], self.classes, *labels.shape[1:]), np.uint8)
        np.put_along_axis(onehot, labels[:, None].astype(np.intp), 1, axis=1)
        return onehot

    def shown(self, wire_shape: Sequence[Dim]) -> list[Dim]:
        return [wire_shape[0], self.classes, *wire_shape[1:]]

    def wire_shape(self, shape: Sequence[Dim]) -> list[Dim]:
        return [shape[0], *shape[2:]]


# ---- which tensor of a role travels how ---------------------------------------------------------

Names = dict[str, Sequence[Dim]]
CodecRule = Callable[[Names, Names], dict[str, Codec]]
"""(input name → model shape, output name → model shape) → the codec of each image tensor (the
others travel as they are)."""


def _swapper_codecs(inputs: Names, outputs: Names) -> dict[str, Codec]:
    # Only a family its signature alone names: both ends must pick the same codec from what both
    # see, and a shared signature (the 256² embedding families: hyperswap, ghost, simswap, hififace)
    # is told apart by the client's config, which the server does not have. Those, a DeepFaceLab
    # model (NHWC BGR, three outputs) and an image source travel as the floats they are.
    spec = swapper_spec_for(dict(inputs))
    if spec is None or spec.layout != "nchw" or len(outputs) != 1:
        return {}  # not a swapper (its own check says so, with the fix), or one that travels as floats
    return {spec.target_input: CropPixels(spec.crop), next(iter(outputs)): CropPixels(spec.out_crop)}


def _enhancer_codecs(inputs: Names, outputs: Names) -> dict[str, Codec]:
    images = [name for name in inputs if name != "weight"]  # CodeFormer's fidelity weight travels as it is
    if len(images) != 1 or len(outputs) != 1:
        return {}
    side = list(inputs[images[0]])[2:3]
    if not side or not isinstance(side[0], int) or side[0] <= 0:
        return {}  # a free side: which family (and so which side) only its name says, which the ends may name apart
    spec = enhancer_spec_for(side[0], set(inputs))
    if spec is None:
        return {}  # not an enhancer vcamd knows: Enhancer's own check says so, with the fix
    pixels = CropPixels(spec.crop)  # the family's own side: GPEN-BFR 256 to 2048
    return {images[0]: pixels, next(iter(outputs)): pixels}


def _parser_codecs(inputs: Names, outputs: Names) -> dict[str, Codec]:
    from vcamd.faces.parse import CLASSES, INPUT_NAME

    if list(inputs) != [INPUT_NAME] or len(outputs) != 1:
        return {}
    return {INPUT_NAME: ParserPixels(), next(iter(outputs)): Classes(CLASSES)}


ROLE_CODECS: dict[str, CodecRule] = {"swapper": _swapper_codecs, "enhancer": _enhancer_codecs, "parser": _parser_codecs}
"""The roles a server runs, and which of their tensors are images. The detector and recognizer
stay with the camera: they see whole frames."""
SERVED_ROLES = tuple(ROLE_CODECS)


@dataclass(frozen=True, slots=True)
class Signature:
    """A model's inputs and outputs as the code sees them (`Arg`, like ONNX Runtime's), and how each travels."""

    inputs: list[Arg]
    outputs: list[Arg]
    codecs: dict[str, Codec]

    def codec(self, name: str) -> Codec:
        return self.codecs[name]

    @classmethod
    def of_wire(cls, role: str, inputs: Sequence[WireArg], outputs: Sequence[WireArg]) -> Signature:
        """What a served model is, from Triton's metadata: its image tensors (uint8 on the wire) shown
        as the float tensors the model takes, its batch dimension (-1) as free."""

        def shape(arg: WireArg) -> list[Dim]:
            return [BATCH if d < 0 and i == 0 else (None if d < 0 else d) for i, d in enumerate(arg.shape)]

        guessed = ROLE_CODECS[role]({a.name: shape(a) for a in inputs}, {a.name: shape(a) for a in outputs})
        codecs: dict[str, Codec] = {}
        shown: dict[str, Arg] = {}
        for arg in [*inputs, *outputs]:
            codec = guessed.get(arg.name)
            if codec is None or arg.datatype != codec.datatype:
                codec = AsIs(arg.datatype) if arg.datatype in NUMPY_TYPES else AsIs("FP32")
            codecs[arg.name] = codec
            kind = "tensor(float)" if not isinstance(codec, AsIs) else ORT_TYPES.get(arg.datatype, f"tensor({arg.datatype.lower()})")
            shown[arg.name] = Arg(arg.name, codec.shown(shape(arg)), kind)
        return cls([shown[a.name] for a in inputs], [shown[a.name] for a in outputs], codecs)

    @classmethod
    def to_serve(cls, role: str, inputs: Sequence[Arg], outputs: Sequence[Arg]) -> Signature:
        """How a local model (its session's args) is served: image tensors as uint8, the rest as they are."""
        codecs = ROLE_CODECS[role]({a.name: a.shape for a in inputs}, {a.name: a.shape for a in outputs})
        for arg in [*inputs, *outputs]:
            codecs.setdefault(arg.name, AsIs(_triton_type(arg.type)))
        return cls(list(inputs), list(outputs), codecs)


def _triton_type(ort_type: str) -> str:
    for name, ort in ORT_TYPES.items():
        if ort == ort_type:
            return name
    raise ModelError(f"a tensor of type {ort_type} cannot be served", fix="serve a model with float inputs and outputs")


def wire_dtype(codec: Codec) -> type[np.generic]:
    return NUMPY_TYPES[codec.datatype]


def emap_rows(count: int) -> npt.NDArray[np.int64]:
    """The rows the client asks the `.emap` companion for: all of them, in order."""
    return np.arange(count, dtype=np.int64)

"""What the daemon reads from ONNX files itself, straight from the protobuf wire format.

ONNX Runtime loads the models; a few small things are read here instead: a swapper's last
initializer (`emap`, `last_initializer`), the first node names of a recognizer (`node_names`), a
detector's bytes with another input size (`with_input_size`), and a graph's input and output
shapes without a session (`signature`: whether the configured models fit each other).

Why not the `onnx` package: `import onnx` holds the interpreter lock for about 0.6 s (its
`ml_dtypes` extension), and `onnx.load_model` parses the whole file — 554 MB for inswapper_128,
0.7 s or more with the lock held and as much memory again. Models load on a background thread
while the live loop publishes covered frames; with the lock held that long the loop and the camera
reader starve ("camera stalled" at start-up). Here only the tags and lengths on the way to the
wanted field are read from the file (`FileBuffer`), the rest skipped: milliseconds, no copy.

The field numbers are ONNX's `onnx.proto` (stable: the format never renumbers a field). A singular
field given twice keeps its last value, repeated fields keep every occurrence in file order, as
protobuf parsers do. Anything malformed raises `WireError` (callers turn it into a `ModelError`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, overload

import numpy as np
import numpy.typing as npt

# ModelProto
MODEL_GRAPH = 7
# GraphProto
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_OUTPUT, GRAPH_VALUE_INFO = 1, 5, 11, 12, 13
# NodeProto
NODE_NAME = 3
# TensorProto
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_FLOAT_DATA, TENSOR_INT32_DATA, TENSOR_NAME = 1, 2, 4, 5, 8
TENSOR_RAW_DATA, TENSOR_DOUBLE_DATA, TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION = 9, 10, 13, 14
EXTERNAL = 1  # TensorProto.DataLocation
# StringStringEntryProto
ENTRY_KEY, ENTRY_VALUE = 1, 2
# ValueInfoProto
VALUE_NAME = 1
# ValueInfoProto → TypeProto → TypeProto.Tensor → TensorShapeProto → Dimension
VALUE_TYPE, TYPE_TENSOR, TENSOR_TYPE_SHAPE, SHAPE_DIM, DIM_VALUE, DIM_PARAM = 2, 1, 2, 1, 1, 2

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5  # wire types

FLOAT_TYPES: dict[int, np.dtype] = {1: np.dtype("<f4"), 10: np.dtype("<f2"), 11: np.dtype("<f8")}
"""ONNX data types a float initializer can have (FLOAT, FLOAT16, DOUBLE) → their little-endian dtype."""


class WireError(ValueError):
    """Not a well-formed ONNX protobuf (truncated, corrupt), or a tensor this reader cannot decode."""


class Buffer(Protocol):
    """bytes or a `FileBuffer`: an int at an index, bytes for a slice."""

    @overload
    def __getitem__(self, index: int, /) -> int: ...

    @overload
    def __getitem__(self, index: slice, /) -> bytes: ...

    def __len__(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Field:
    number: int
    wire_type: int
    start: int  # where its value starts (after the tag; for LENGTH, after the length)
    end: int  # where its value ends
    tag_start: int  # where the whole field starts, tag included
    value: int = 0  # VARINT: the number

    def payload(self, buf: Buffer) -> bytes:
        return bytes(buf[self.start:self.end])

    def whole(self, buf: Buffer) -> bytes:
        """The field as it is encoded, tag included."""
        return bytes(buf[self.tag_start:self.end])


def _varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("truncated or malformed varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[Field]:
    """The fields of the message in `buf[start:end]`, in file order; values are skipped, not read."""
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        tag_start = pos
        tag, pos = _varint(buf, pos, end)
        number, wire_type = tag >> 3, tag & 7
        value = 0
        if number == 0:
            raise WireError("field number 0")
        if wire_type == VARINT:
            value, after = _varint(buf, pos, end)
        elif wire_type == FIXED64:
            after = pos + 8
        elif wire_type == FIXED32:
            after = pos + 4
        elif wire_type == LENGTH:
            length, pos = _varint(buf, pos, end)
            after = pos + length
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        if after > end:
            raise WireError("truncated field")
        yield Field(number, wire_type, pos, after, tag_start, value)
        pos = after


def _messages(buf: Buffer, parent: Field | None, number: int) -> Iterator[Field]:
    """The `number` sub-messages of `parent` (the whole buffer when None)."""
    start, end = (0, len(buf)) if parent is None else (parent.start, parent.end)
    for f in fields(buf, start, end):
        if f.number == number:
            if f.wire_type != LENGTH:
                raise WireError(f"field {number} is not a message")
            yield f


def _graphs(buf: Buffer) -> Iterator[Field]:
    return _messages(buf, None, MODEL_GRAPH)


class FileBuffer:
    """A file as a `Buffer`, read on demand: an int at an index from the block around it (one block
    kept: the fields are walked forwards), bytes for a slice. Plain reads, not an mmap: a read
    releases the interpreter lock while the disk works, a page fault of an mmap would not — on a
    cold page cache, walking a 554 MB model's fields held the lock for hundreds of ms at a time."""

    BLOCK = 8192

    def __init__(self, path: Path) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 — closed by close(), or on leaving a with-block
        self._size = self._file.seek(0, os.SEEK_END)
        self._block_start, self._block = -1, b""

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> FileBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._size

    def _read(self, start: int, size: int) -> bytes:
        self._file.seek(start)
        return self._file.read(size)

    @overload
    def __getitem__(self, index: int, /) -> int: ...

    @overload
    def __getitem__(self, index: slice, /) -> bytes: ...

    def __getitem__(self, index: int | slice, /) -> int | bytes:
        if isinstance(index, slice):
            start, stop, _ = index.indices(self._size)
            return self._read(start, stop - start) if stop > start else b""
        if not 0 <= index < self._size:
            raise IndexError(index)
        if not self._block_start <= index < self._block_start + len(self._block):
            self._block_start = index - index % self.BLOCK
            self._block = self._read(self._block_start, self.BLOCK)
        return self._block[index - self._block_start]


def _opened(path: Path) -> FileBuffer:
    buf = FileBuffer(path)
    if len(buf) == 0:
        buf.close()
        raise WireError("empty file")
    return buf


# -- a tensor -----------------------------------------------------------------------------------------


def _packed(buf: Buffer, found: list[Field], dtype: str, varints: bool = False) -> np.ndarray:
    """A repeated numeric field's values (packed or not), all occurrences in order."""
    parts: list[np.ndarray] = []
    for f in found:
        if varints:
            if f.wire_type == VARINT:
                parts.append(np.array([f.value], np.uint64).view(np.int64).astype(dtype))
                continue
            values, pos = [], f.start
            while pos < f.end:
                value, pos = _varint(buf, pos, f.end)
                values.append(value)
            parts.append(np.array(values, np.uint64).view(np.int64).astype(dtype))  # two's complement
        else:
            raw = f.payload(buf)
            if len(raw) % np.dtype(dtype).itemsize:
                raise WireError("packed values of the wrong length")
            parts.append(np.frombuffer(raw, dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def read_tensor(buf: Buffer, tensor: Field, base_dir: Path) -> npt.NDArray[Any]:
    """A float TensorProto as an array: raw data, the typed fields, or external data in a file
    inside `base_dir` (a location outside it is refused, never followed)."""
    found: dict[int, list[Field]] = {}
    for f in fields(buf, tensor.start, tensor.end):
        found.setdefault(f.number, []).append(f)
    last = {number: occurrences[-1] for number, occurrences in found.items()}
    dims = _packed(buf, found.get(TENSOR_DIMS, []), "<i8", varints=True)
    data_type = last[TENSOR_DATA_TYPE].value if TENSOR_DATA_TYPE in last else 0
    if data_type not in FLOAT_TYPES:
        raise WireError(f"data type {data_type} is not a float type")
    dtype = FLOAT_TYPES[data_type]
    count = int(np.prod(dims)) if len(dims) else 1
    if TENSOR_DATA_LOCATION in last and last[TENSOR_DATA_LOCATION].value == EXTERNAL:
        values = np.frombuffer(_external(buf, found.get(TENSOR_EXTERNAL_DATA, []), base_dir, count * dtype.itemsize), dtype)
    elif TENSOR_RAW_DATA in last:
        raw = last[TENSOR_RAW_DATA].payload(buf)
        if len(raw) != count * dtype.itemsize:
            raise WireError(f"raw data of {len(raw)} bytes for {count} values")
        values = np.frombuffer(raw, dtype)
    elif data_type == 1:
        values = _packed(buf, found.get(TENSOR_FLOAT_DATA, []), "<f4")
    elif data_type == 11:
        values = _packed(buf, found.get(TENSOR_DOUBLE_DATA, []), "<f8")
    else:  # FLOAT16 without raw data: the bit patterns in int32_data
        values = _packed(buf, found.get(TENSOR_INT32_DATA, []), "<u2", varints=True).view("<f2")
    if values.size != count:
        raise WireError(f"{values.size} values for shape {tuple(dims)}")
    return values.reshape(tuple(int(d) for d in dims))


def _external(buf: Buffer, entries: list[Field], base_dir: Path, size: int) -> bytes:
    info: dict[str, str] = {}
    for entry in entries:
        kv = {f.number: f.payload(buf).decode("utf-8", "replace") for f in fields(buf, entry.start, entry.end)}
        info[kv.get(ENTRY_KEY, "")] = kv.get(ENTRY_VALUE, "")
    location = info.get("location", "")
    base = base_dir.resolve()
    target = (base / location).resolve()
    if not location or Path(location).is_absolute() or not target.is_relative_to(base):
        raise WireError(f"external data {location!r} is outside the model's folder; not read")
    try:
        offset, length = int(info.get("offset", "0")), int(info.get("length", str(size)))
    except ValueError:
        raise WireError("external data with a malformed offset or length") from None
    if length != size:
        raise WireError(f"external data of {length} bytes for {size} expected")
    try:
        with open(target, "rb") as f:
            f.seek(offset)
            data = f.read(length)
    except OSError as exc:
        raise WireError(f"external data {location!r}: {exc.strerror or exc}") from None
    if len(data) != length:
        raise WireError(f"external data {location!r} is truncated")
    return data


# -- what vcamd reads ---------------------------------------------------------------------------------


def last_initializer(path: Path) -> npt.NDArray[Any] | None:
    """The graph's last initializer (a float tensor), read without parsing the rest of the file;
    None when the graph has none."""
    try:
        with _opened(path) as buf:
            last = None
            for graph in _graphs(buf):
                for last in _messages(buf, graph, GRAPH_INITIALIZER):
                    pass
            return None if last is None else read_tensor(buf, last, path.parent).copy()
    except (ValueError, OverflowError) as exc:  # numpy shape errors
        raise WireError(str(exc)) from None


def node_names(path: Path, count: int) -> list[str]:
    """The names of the graph's first `count` nodes."""
    names: list[str] = []
    try:
        with _opened(path) as buf:
            for graph in _graphs(buf):
                for node in _messages(buf, graph, GRAPH_NODE):
                    if len(names) == count:
                        return names
                    name = ""
                    for f in _messages(buf, node, NODE_NAME):
                        name = f.payload(buf).decode("utf-8", "replace")
                    names.append(name)
    except (ValueError, OverflowError) as exc:
        raise WireError(str(exc)) from None
    return names


Dim = int | str | None
"""A dimension as the graph states it: a size, a symbolic name, or None when unset."""


def signature(path: Path) -> tuple[dict[str, list[Dim]], dict[str, list[Dim]]]:
    """The graph's inputs (those that are not initializers) and outputs: name → dimensions, in
    file order. Only the tags on the way are read: the weights are skipped, not loaded."""
    inputs: dict[str, list[Dim]] = {}
    outputs: dict[str, list[Dim]] = {}
    initializers: set[str] = set()
    try:
        with _opened(path) as buf:
            for graph in _graphs(buf):
                for f in fields(buf, graph.start, graph.end):
                    if f.number == GRAPH_INITIALIZER and f.wire_type == LENGTH:
                        initializers.add(_last_string(buf, f, TENSOR_NAME))
                    elif f.number in (GRAPH_INPUT, GRAPH_OUTPUT) and f.wire_type == LENGTH:
                        dims = [_dimension(buf, d) for d in _shape_path(buf, f)]
                        (inputs if f.number == GRAPH_INPUT else outputs)[_last_string(buf, f, VALUE_NAME)] = dims
    except (ValueError, OverflowError) as exc:
        raise WireError(str(exc)) from None
    return {name: dims for name, dims in inputs.items() if name not in initializers}, outputs


def _last_string(buf: Buffer, message: Field, number: int) -> str:
    value = ""
    for f in _messages(buf, message, number):
        value = f.payload(buf).decode("utf-8", "replace")
    return value


def _dimension(buf: Buffer, dim: Field) -> Dim:
    """A Dimension's value or param: whichever of the two (a oneof) comes last."""
    value: Dim = None
    for f in fields(buf, dim.start, dim.end):
        if f.number == DIM_VALUE and f.wire_type == VARINT:
            value = f.value
        elif f.number == DIM_PARAM and f.wire_type == LENGTH:
            value = f.payload(buf).decode("utf-8", "replace")
    return value


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _encode_varint(number << 3 | wire_type)


def _message(number: int, payload: bytes) -> bytes:
    return _key(number, LENGTH) + _encode_varint(len(payload)) + payload


Change = Callable[[Field], bytes]
"""A field's new encoding (tag included); b"" drops it."""


def _rewrite(buf: Buffer, parent: Field, changes: dict[int, Change]) -> bytes:
    """`parent`'s payload with each field numbered in `changes` re-encoded by it; the others copied."""
    return b"".join(changes[f.number](f) if f.number in changes else f.whole(buf)
                    for f in fields(buf, parent.start, parent.end))


def _drop(_: Field) -> bytes:
    return b""


def _shape_path(buf: Buffer, value_info: Field) -> Iterator[Field]:
    """A ValueInfoProto's dimensions (type → tensor_type → shape → dim), every occurrence in order:
    what a protobuf parser merges them into."""
    for typ in _messages(buf, value_info, VALUE_TYPE):
        for tensor in _messages(buf, typ, TYPE_TENSOR):
            for shape in _messages(buf, tensor, TENSOR_TYPE_SHAPE):
                yield from _messages(buf, shape, SHAPE_DIM)


def _with_dims(buf: Buffer, value_info: Field, number: int, new_dim: Callable[[int, Field], bytes]) -> bytes:
    """The ValueInfoProto (field `number` of its graph) with dimension i re-encoded as new_dim(i, dim)."""
    index = itertools.count()

    def dim(f: Field) -> bytes:
        return new_dim(next(index), f)

    def shape(f: Field) -> bytes:
        return _message(TENSOR_TYPE_SHAPE, _rewrite(buf, f, {SHAPE_DIM: dim}))

    def tensor(f: Field) -> bytes:
        return _message(TYPE_TENSOR, _rewrite(buf, f, {TENSOR_TYPE_SHAPE: shape}))

    def typ(f: Field) -> bytes:
        return _message(VALUE_TYPE, _rewrite(buf, f, {TYPE_TENSOR: tensor}))

    return _message(number, _rewrite(buf, value_info, {VALUE_TYPE: typ}))


def _dim(buf: Buffer, dim: Field, value: int | None) -> bytes:
    """A Dimension set to `value` (None: unknown, "?"); its denotation kept."""
    kept = _rewrite(buf, dim, {DIM_VALUE: _drop, DIM_PARAM: _drop})
    new = _message(DIM_PARAM, b"?") if value is None else _key(DIM_VALUE, VARINT) + _encode_varint(value)
    return _message(SHAPE_DIM, kept + new)


def with_input_size(data: bytes, input_hw: tuple[int, int]) -> bytes:
    """The model's bytes with its first input's H, W fixed to `input_hw`, every output dimension
    left to shape inference and the recorded intermediate shapes (value_info) dropped."""
    height, width = input_hw
    inputs = 0

    def first_input(f: Field) -> bytes:
        nonlocal inputs
        inputs += 1
        if inputs > 1:
            return f.whole(data)
        rank = len(list(_shape_path(data, f)))
        if rank != 4:
            raise WireError(f"expected an NCHW image input, got rank {rank}")
        sizes = {2: height, 3: width}
        return _with_dims(data, f, GRAPH_INPUT,
                          lambda i, d: _dim(data, d, sizes[i]) if i in sizes else d.whole(data))

    def output(f: Field) -> bytes:
        return _with_dims(data, f, GRAPH_OUTPUT, lambda _, d: _dim(data, d, None))

    def graph(g: Field) -> bytes:
        return _message(MODEL_GRAPH, _rewrite(data, g, {GRAPH_INPUT: first_input, GRAPH_OUTPUT: output, GRAPH_VALUE_INFO: _drop}))

    out = _rewrite(data, Field(0, LENGTH, 0, len(data), 0), {MODEL_GRAPH: graph})
    if not inputs:
        raise WireError("the graph has no input")
    return out

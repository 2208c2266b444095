"""Stand-ins of every swapper and enhancer family (`vcamd.faces.specs`), with each family's exact
input and output signature, built at run time like those of `vcamd.bench.standins`:

- light (`build_family_swapper`): a few cheap ops in the family's own normalisation — the face
  tinted by a colour from the source input and its centre inverted — so a test sees the model ran,
  got the source, and came back through the family's post-processing;
- stranger (`stranger=`): whatever it is given, it returns one fixed face of another person aligned
  in the family's geometry and normalisation (a perfect swapper, for the leak checkers:
  `vcamd.bench.leaks`);
- compute-equivalent (`compute_equivalent=True`): the family's published layer list with random
  weights, for `vcamd bench --swapper`. Each list says where it is an estimate
  (`vcamd.bench.layerlists.FAMILY_LAYERS`).

Embedding converters (`build_converter`) are a fixed random 512→512 map, and enhancers of every
size (`build_family_enhancer`) have the light enhancer's change or an estimate of their layers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from vcamd.bench.layerlists import ENHANCER_LAYERS, FAMILY_LAYERS, LATENT, _aei_net, _axes, _dfl_layers, _ints, ghost_blocks
from vcamd.bench.standins import _Graph, _save
from vcamd.common.types import Frame
from vcamd.faces.specs import DFM_FACE_INPUT, DFM_MORPH_INPUT, SWAPPERS, EnhancerSpec, SwapperSpec, per_channel

# ---- the family's signature ------------------------------------------------------------------


def _io(spec: SwapperSpec, batch: int | str = 1) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    s = spec.crop.size
    if spec.layout == "dfm":
        inputs = [helper.make_tensor_value_info(DFM_FACE_INPUT, TensorProto.FLOAT, [batch, s, s, 3]),
                  helper.make_tensor_value_info(DFM_MORPH_INPUT, TensorProto.FLOAT, [1])]
        outputs = [helper.make_tensor_value_info("out_face_mask", TensorProto.FLOAT, [batch, s, s, 1]),
                   helper.make_tensor_value_info("out_celeb_face", TensorProto.FLOAT, [batch, s, s, 3]),
                   helper.make_tensor_value_info("out_celeb_face_mask", TensorProto.FLOAT, [batch, s, s, 1])]
        return inputs, outputs
    if spec.source.kind == "image":
        assert spec.source.image is not None
        side = spec.source.image.size
        source = helper.make_tensor_value_info(spec.source_input, TensorProto.FLOAT, [batch, 3, side, side])
    else:
        source = helper.make_tensor_value_info(spec.source_input, TensorProto.FLOAT, [batch, spec.identity_dim])
    target = helper.make_tensor_value_info(spec.target_input, TensorProto.FLOAT, [batch, 3, s, s])
    return [target, source], [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 3, s, s])]


def _chw(values: tuple[float, float, float]) -> np.ndarray:
    return np.asarray(values, np.float32).reshape(1, 3, 1, 1)


def _to_unit(g: _Graph, spec: SwapperSpec, x: str) -> str:
    """The family's normalised target → RGB in [0, 1] (NCHW)."""
    mean, std = per_channel(spec.crop.mean), per_channel(spec.crop.std)
    return g.op("Div", [g.op("Add", [g.op("Mul", [x, g.const(_chw(std))]), g.const(_chw(mean))]), g.const(np.float32(255.0))])


def _from_unit(g: _Graph, spec: SwapperSpec, x: str) -> str:
    """RGB in [0, 1] → the family's output space."""
    out = spec.out_crop
    mean, std = per_channel(out.mean), per_channel(out.std)
    return g.op("Div", [g.op("Sub", [g.op("Mul", [x, g.const(np.float32(255.0))]), g.const(_chw(mean))]), g.const(_chw(std))])


def _centre_mask(size: int) -> np.ndarray:
    centre = np.zeros((1, 1, size, size), np.float32)
    centre[..., int(0.31 * size) : int(0.78 * size), int(0.25 * size) : int(0.75 * size)] = 1.0
    return centre


def _light(g: _Graph, spec: SwapperSpec, target: str, source: str | None) -> str:
    """Tint by a colour from the source and invert the centre, in [0, 1] RGB NCHW."""
    size = spec.crop.size
    if source is None:
        colour = g.const(np.array([[0.9, 0.2, 0.6]], np.float32))
    elif spec.source.kind == "image":
        mean = g.op("ReduceMean", [source], axes=_ints(2, 3), keepdims=0)  # [N,3]
        colour = g.op("Sigmoid", [g.op("MatMul", [g.op("Sub", [mean, g.const(np.float32(0.5))]), g.const(g.rng.standard_normal((3, 3)).astype(np.float32) * 8)])])
    else:
        colour = g.op("Sigmoid", [g.op("MatMul", [source, g.const(g.rng.standard_normal((spec.identity_dim, 3)).astype(np.float32) * 4)])])
    colour = g.op("Unsqueeze", [colour, _axes(g, 2, 3)])
    half = g.const(np.float32(0.5))
    mixed = g.op("Add", [g.op("Mul", [target, half]), g.op("Mul", [colour, half])])
    mask = g.const(_centre_mask(size))
    one = g.const(np.float32(1.0))
    return g.op("Add", [g.op("Mul", [mixed, g.op("Sub", [one, mask])]), g.op("Mul", [g.op("Sub", [one, mixed]), mask])])


def _unused(g: _Graph, names: list[str]) -> str:
    """A zero that depends on every input (no input is left out of the graph)."""
    total = g.const(np.float32(0.0))
    for name in names:
        total = g.op("Add", [total, g.op("ReduceMean", [name], keepdims=0)])
    return g.op("Mul", [total, g.const(np.float32(0.0))])


def build_family_swapper(path: Path | str, spec: SwapperSpec, *, stranger: Frame | None = None, compute_equivalent: bool = False,
                         batch: bool = False) -> Path:
    """A stand-in of `spec`'s exact signature (see the module's doc); `stranger`: the BGR face it
    always returns, aligned as `spec.crop` aligns a face (`spec.crop.align`)."""
    g = _Graph(rng=np.random.default_rng(11))
    n: int | str = "N" if batch else 1
    inputs, outputs = _io(spec, n)
    names = [i.name for i in inputs]
    if spec.layout == "dfm":
        face, morph = names
        nchw = g.op("Transpose", [face], perm=_ints(0, 3, 1, 2))  # BGR: the tint is in BGR here
        if stranger is not None:
            unit = g.op("Add", [g.const(stranger.astype(np.float32).transpose(2, 0, 1)[None] / 255.0), _unused(g, names)])
        elif compute_equivalent:
            unit = g.op("Add", [_dfl_layers(g, nchw, spec.crop.size), _unused(g, [morph])])
        else:
            unit = g.op("Add", [_light(g, spec, nchw, None), _unused(g, [morph])])
        out = g.op("Transpose", [unit], perm=_ints(0, 2, 3, 1))
        mask = g.op("Add", [g.op("ReduceMean", [out], axes=_ints(3), keepdims=1), g.const(np.float32(1.0))])
        mask = g.op("Clip", [mask, g.const(np.float32(0.0)), g.const(np.float32(1.0))])
        g.nodes += [helper.make_node("Identity", [mask], ["out_face_mask"]), helper.make_node("Identity", [out], ["out_celeb_face"]),
                    helper.make_node("Identity", [mask], ["out_celeb_face_mask"])]
        return _save(g.model(inputs, outputs, f"{spec.family}_standin"), path)
    target, source = names
    if stranger is not None:
        crop = stranger[..., ::-1].astype(np.float32).transpose(2, 0, 1)[None] / 255.0
        out = g.op("Add", [_from_unit(g, spec, g.const(crop)), _unused(g, names)])
    elif compute_equivalent:
        out = FAMILY_LAYERS[spec.family].build(g, target, source, spec)
    else:
        out = _from_unit(g, spec, _light(g, spec, _to_unit(g, spec, target), source))
    g.nodes.append(helper.make_node("Identity", [out], ["output"]))
    if spec.source.kind == "emap":  # inswapper's `emap`, the last initializer
        from vcamd.bench.standins import _emap

        g.inits.append(onnx.numpy_helper.from_array(_emap(np.random.default_rng(1234)), "emap"))
    return _save(g.model(inputs, outputs, f"{spec.family}_standin"), path)


def build_converter(path: Path | str, dim: int = LATENT) -> Path:
    """An embedding converter stand-in: `input` [1,512] → [1,dim], a fixed random linear map."""
    g = _Graph(rng=np.random.default_rng(21))
    out = g.op("MatMul", ["input", g.const(g.rng.standard_normal((LATENT, dim)).astype(np.float32) / np.sqrt(LATENT), "convert")])
    g.nodes.append(helper.make_node("Identity", [out], ["output"]))
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, LATENT])
    outp = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, dim])
    return _save(g.model([inp], [outp], "converter_standin"), path)


def build_family_enhancer(path: Path | str, spec: EnhancerSpec, *, compute_equivalent: bool = False) -> Path:
    """An enhancer stand-in of `spec`'s signature: `input` [1,3,S,S] in [-1, 1] (+ `weight` [1]
    double for CodeFormer) → the same shape and range. Light: a sharpen and a contrast boost that
    grows with the weight; compute-equivalent: `ENHANCER_LAYERS`' estimate."""
    g = _Graph(rng=np.random.default_rng(7))
    size = spec.crop.size
    shape = [1, 3, size, size]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)]
    if spec.weight_input is not None:
        inputs.append(helper.make_tensor_value_info(spec.weight_input, TensorProto.DOUBLE, [1]))
    if compute_equivalent:
        out = ENHANCER_LAYERS[spec.family].build(g, "input", size)
    else:
        sharpen = np.tile(np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)[None, None], (3, 1, 1, 1))
        out = g.op("Conv", ["input", g.const(sharpen, "sharpen")], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=3)
        out = g.op("Mul", [out, g.const(np.array(1.15, np.float32))])
    if spec.weight_input is not None:  # the fidelity weight shades the result: a test sees it arrive
        weight = g.op("Cast", [spec.weight_input], to=TensorProto.FLOAT)
        out = g.op("Add", [out, g.op("Mul", [weight, g.const(np.float32(0.2))])])
    g.nodes.append(helper.make_node("Clip", [out, g.const(np.float32(-1.0)), g.const(np.float32(1.0))], ["output"]))
    return _save(g.model(inputs, [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], f"{spec.family}_standin"), path)


# ---- compute-equivalent stand-ins (layer lists: vcamd.bench.layerlists) ------------------------


def build_model_swapper(path: Path | str, model: str, spec: SwapperSpec) -> Path:
    """The compute-equivalent stand-in of one published model (ghost_1/2/3 differ in block count)."""
    if spec.family == "ghost_256":
        g = _Graph(rng=np.random.default_rng(11))
        inputs, outputs = _io(spec)
        out = _aei_net(g, spec.target_input, spec.source_input, spec.crop.size, ghost_blocks(model))
        g.nodes.append(helper.make_node("Identity", [out], ["output"]))
        return _save(g.model(inputs, outputs, f"{model}_standin"), path)
    return build_family_swapper(path, spec, compute_equivalent=True)


def swapper_spec(family: str) -> SwapperSpec:
    return next(spec for spec in SWAPPERS if spec.family == family)

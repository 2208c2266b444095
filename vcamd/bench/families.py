"""Stand-ins of every swapper and enhancer family (`vcamd.faces.specs`), with each family's exact
input and output signature, built at run time like those of `vcamd.bench.standins`:

- light (`build_family_swapper`): a few cheap ops in the family's own normalisation — the face
  tinted by a colour from the source input and its centre inverted — so a test sees the model ran,
  got the source, and came back through the family's post-processing;
- stranger (`stranger=`): whatever it is given, it returns one fixed face of another person aligned
  in the family's geometry and normalisation (a perfect swapper, for the leak checkers:
  `vcamd.bench.leaks`);
- compute-equivalent (`compute_equivalent=True`): the family's published layer list with random
  weights, for `vcamd bench --swapper`. Each list says where it is an estimate (`FAMILY_LAYERS`).

Embedding converters (`build_converter`) are a fixed random 512→512 map, and enhancers of every
size (`build_family_enhancer`) have the light enhancer's change or an estimate of their layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from vcamd.bench.standins import _adain_block, _gfpgan_layers, _Graph, _inswapper_layers, _save
from vcamd.common.types import Frame
from vcamd.faces.specs import DFM_FACE_INPUT, DFM_MORPH_INPUT, ENHANCERS, SWAPPERS, EnhancerSpec, SwapperSpec, per_channel

LATENT = 512


def _ints(*values: int) -> list[int]:
    return list(values)


def _axes(g: _Graph, *axes: int) -> str:
    return g.const(np.array(axes, np.int64), "ax", keep_dtype=True)


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


# ---- compute-equivalent layer lists ------------------------------------------------------------


@dataclass(frozen=True)
class Layers:
    """A family's layer list: how it is built, and where it comes from."""

    build: Callable[..., str]
    source: str
    estimate: bool


def _inorm(g: _Graph, x: str, ch: int) -> str:
    return g.op("InstanceNormalization", [x, g.const(np.ones(ch, np.float32), "s"), g.const(np.zeros(ch, np.float32), "b")], epsilon=1e-5)


def _linear(g: _Graph, x: str, cin: int, cout: int) -> str:
    g.macs += cin * cout
    g.params += cout
    return g.op("Gemm", [x, g.weight((cin, cout), cin), g.const(np.zeros(cout, np.float32), "b")])


def _deconv(g: _Graph, x: str, cin: int, cout: int, hw_in: int) -> str:
    """ConvTranspose 4×4 stride 2 (hw_in → 2·hw_in)."""
    w = g.weight((cin, cout, 4, 4), fan_in=cin * 16)
    g.macs += cin * cout * 16 * hw_in * hw_in
    return g.op("ConvTranspose", [x, w], kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])


def _up_conv(g: _Graph, x: str, cin: int, cout: int, hw_out: int) -> str:
    return g.conv(g.upsample2(x), cin, cout, 3, hw_out)


def _relu(g: _Graph, x: str) -> str:
    return g.op("Relu", [x])


def _hyperswap(g: _Graph, target: str, source: str, spec: SwapperSpec) -> str:
    """Estimate (HyperSwap's architecture is not published): inswapper_128's generator at 256² in
    and out — one more stride-2 stage at each end, so its six AdaIN blocks stay at 1024 channels on
    32² — and its output in [-1, 1]."""
    s = spec.crop.size
    x = g.leaky(g.conv(g.reflect_pad(target, 3), 3, 64, 7, s, pad=0))
    x = g.leaky(g.conv(x, 64, 128, 3, s // 2, stride=2))
    x = g.leaky(g.conv(x, 128, 256, 3, s // 2))
    x = g.leaky(g.conv(x, 256, 512, 3, s // 4, stride=2))
    x = g.leaky(g.conv(x, 512, 1024, 3, s // 8, stride=2))
    for _ in range(6):
        x = _adain_block(g, x, source, 1024, s // 8)
    x = g.leaky(_up_conv(g, x, 1024, 512, s // 4))
    x = g.leaky(_up_conv(g, x, 512, 256, s // 2))
    x = g.leaky(g.conv(x, 256, 128, 3, s // 2))
    x = g.leaky(_up_conv(g, x, 128, 64, s))
    return g.op("Tanh", [g.conv(g.reflect_pad(x, 3), 64, 3, 7, s, pad=0)])


def _aad(g: _Graph, h: str, attr: str, latent: str, c_x: int, c_attr: int, hw: int) -> str:
    """FaceShifter's AAD layer: instance norm, attribute γ/β (1×1 convs), identity γ/β (linear),
    and a 1×1 mask blending the two."""
    hn = _inorm(g, h, c_x)
    a = g.op("Add", [g.op("Mul", [hn, g.conv(attr, c_attr, c_x, 1, hw, pad=0)]), g.conv(attr, c_attr, c_x, 1, hw, pad=0)])
    gamma = g.op("Unsqueeze", [_linear(g, latent, LATENT, c_x), _axes(g, 2, 3)])
    beta = g.op("Unsqueeze", [_linear(g, latent, LATENT, c_x), _axes(g, 2, 3)])
    i = g.op("Add", [g.op("Mul", [hn, gamma]), beta])
    m = g.op("Sigmoid", [g.conv(hn, c_x, 1, 1, hw, pad=0)])
    one = g.const(np.float32(1.0))
    return g.op("Add", [g.op("Mul", [g.op("Sub", [one, m]), a]), g.op("Mul", [m, i])])


def _aad_resblk(g: _Graph, h: str, attr: str, latent: str, cin: int, cout: int, c_attr: int, hw: int, blocks: int) -> str:
    x = h
    for i in range(blocks):
        out_ch = cout if i == blocks - 1 else cin
        x = g.conv(_relu(g, _aad(g, x, attr, latent, cin, c_attr, hw)), cin, out_ch, 3, hw)
    skip = h if cin == cout else g.conv(_relu(g, _aad(g, h, attr, latent, cin, c_attr, hw)), cin, cout, 3, hw)
    return g.op("Add", [x, skip])


def _aei_net(g: _Graph, target: str, latent: str, size: int, blocks: int) -> str:
    """AEI-Net (FaceShifter; GHOST's `AEI_Net(backbone="unet")`): a U-Net attribute encoder of
    4×4 stride-2 convolutions (32 … 1024 channels down to 2²) and transposed ones back up, and the
    AAD generator — eight AAD residual blocks, 2² → size², `blocks` AAD layers each."""
    ch = [3, 32, 64, 128, 256, 512, 1024, 1024]
    feats, x, hw = [], target, size
    for cin, cout in zip(ch[:-1], ch[1:]):
        hw //= 2
        x = g.op("LeakyRelu", [_inorm(g, g.conv(x, cin, cout, 4, hw, stride=2, pad=1), cout)], alpha=0.1)
        feats.append((x, cout, hw))
    attrs = [(x, 1024, hw)]
    dec = [(1024, 1024), (2048, 512), (1024, 256), (512, 128), (256, 64), (128, 32)]
    for i, (cin, cout) in enumerate(dec):
        y = g.op("LeakyRelu", [_inorm(g, _deconv(g, x, cin, cout, hw), cout)], alpha=0.1)
        hw *= 2
        skip, skip_ch, _ = feats[-(i + 2)]
        x = g.op("Concat", [y, skip], axis=1)
        attrs.append((x, cout + skip_ch, hw))
    attrs.append((g.upsample2(x), 64, hw * 2))
    w = g.weight((LATENT, 1024, 2, 2), LATENT)
    g.macs += LATENT * 1024 * 4
    h = g.op("ConvTranspose", [g.op("Unsqueeze", [latent, _axes(g, 2, 3)]), w], kernel_shape=[2, 2])
    gen = [(1024, 1024), (1024, 1024), (1024, 1024), (1024, 512), (512, 256), (256, 128), (128, 64), (64, 3)]
    for i, ((cin, cout), (attr, c_attr, hw)) in enumerate(zip(gen, attrs)):
        h = _aad_resblk(g, h, attr, latent, cin, cout, c_attr, hw, blocks)
        if i < len(gen) - 1:
            h = g.upsample2(h)
    return g.op("Tanh", [h])


def _ghost(blocks: int) -> Callable[..., str]:
    def build(g: _Graph, target: str, source: str, spec: SwapperSpec) -> str:
        return _aei_net(g, target, source, spec.crop.size, blocks)
    return build


def _simswap(g: _Graph, target: str, source: str, spec: SwapperSpec) -> str:
    """SimSwap's generator (`Generator_Adain_Upsample`; the 512 model one stage deeper): 7×7 in,
    stride-2 3×3 convolutions down to 512 channels at 32², nine AdaIN residual blocks there,
    upsample + 3×3 convolutions back, 7×7 out. Batch norms folded away (free at inference)."""
    s = spec.crop.size
    x = _relu(g, g.conv(g.reflect_pad(target, 3), 3, 64, 7, s, pad=0))
    downs = [(64, 128), (128, 256), (256, 512)] + ([(512, 512)] if s == 512 else [])
    hw = s
    for cin, cout in downs:
        hw //= 2
        x = _relu(g, g.conv(x, cin, cout, 3, hw, stride=2))
    for _ in range(9):
        x = _adain_block(g, x, source, 512, hw)
    for cin, cout in reversed([(c_out, c_in) for c_in, c_out in downs]):
        hw *= 2
        x = _relu(g, _up_conv(g, x, cin, cout, hw))
    return g.conv(g.reflect_pad(x, 3), 64, 3, 7, s, pad=0)


def _resblock_down(g: _Graph, x: str, cin: int, cout: int, hw_out: int) -> str:
    y = g.conv(g.leaky(x), cin, cout, 3, hw_out * 2)
    y = g.conv(g.leaky(y), cout, cout, 3, hw_out, stride=2)
    return g.op("Add", [y, g.conv(x, cin, cout, 1, hw_out, stride=2, pad=0)])


def _hififace(g: _Graph, target: str, source: str, spec: SwapperSpec) -> str:
    """Estimate (HifiFace's paper draws its blocks; GuijiAI's unofficial export is not described):
    an encoder of residual blocks 64 → 512 channels down to 16², two AdaIN residual blocks there,
    AdaIN residual blocks back up to 64², and the semantic facial fusion module's residual blocks
    up to 256² (with its mask head)."""
    s = spec.crop.size
    x = g.conv(target, 3, 64, 3, s)
    hw, ch = s, [(64, 128), (128, 256), (256, 512), (512, 512)]
    for cin, cout in ch:
        hw //= 2
        x = _resblock_down(g, x, cin, cout, hw)
    for _ in range(2):
        x = _adain_block(g, x, source, 512, hw)
    for cin, cout in ((512, 512), (512, 256)):
        hw *= 2
        x = g.conv(g.upsample2(x), cin, cout, 3, hw)
        x = _adain_block(g, x, source, cout, hw)
    for cin, cout in ((256, 128), (128, 64)):
        hw *= 2
        x = g.leaky(g.conv(g.upsample2(x), cin, cout, 3, hw))
        x = g.leaky(g.conv(x, cout, cout, 3, hw))
    mask = g.op("Sigmoid", [g.conv(x, 64, 1, 3, hw)])
    return g.op("Mul", [g.op("Tanh", [g.conv(x, 64, 3, 3, hw)]), mask])


def _iresnet(g: _Graph, image: str, layers: tuple[int, int, int, int]) -> str:
    """An ArcFace IResNet on a 112² face (BlendFace's identity encoder is an IResNet-100:
    layers (3, 13, 30, 3)) → a 512-d identity."""
    x = g.op("PRelu", [g.conv(image, 3, 64, 3, 112), g.const(np.full((64, 1, 1), 0.25, np.float32))])
    cin, hw = 64, 112
    for cout, n in zip((64, 128, 256, 512), layers):
        for i in range(n):
            stride = 2 if i == 0 else 1
            hw_out = hw // stride
            y = g.conv(x, cin, cout, 3, hw)
            y = g.op("PRelu", [y, g.const(np.full((cout, 1, 1), 0.25, np.float32))])
            y = g.conv(y, cout, cout, 3, hw_out, stride=stride)
            skip = x if stride == 1 and cin == cout else g.conv(x, cin, cout, 1, hw_out, stride=stride, pad=0)
            x, cin, hw = g.op("Add", [y, skip]), cout, hw_out
    return _linear(g, g.op("Flatten", [x], axis=1), 512 * hw * hw, LATENT)


def _blendswap(g: _Graph, target: str, source: str, spec: SwapperSpec) -> str:
    """BlendSwap: its identity encoder (an IResNet-100 on the 112² source face) and AEI-Net at 256²
    with two AAD layers a block (the FaceShifter generator BlendFace trains; block count an estimate)."""
    latent = _iresnet(g, source, (3, 13, 30, 3))
    return _aei_net(g, target, latent, spec.crop.size, 2)


def _stylegan2_decoder(g: _Graph, style: str, size: int, channels: dict[int, int], sft: dict[int, tuple[str, int]] | None = None) -> str:
    """StyleGAN2's synthesis network from 4² to size²: two modulated 3×3 convolutions a resolution
    (modulation as a per-channel scale from the style), 1×1 to-RGB skips."""
    hw, cin = 4, channels[4]
    y = g.const(g.rng.standard_normal((1, cin, 4, 4), dtype=np.float32), "const_input")
    rgb = None
    while True:
        cout = channels[hw]
        for _ in range(2):
            mod = _linear(g, style, LATENT, cin)
            y = g.op("Mul", [y, g.op("Unsqueeze", [mod, _axes(g, 2, 3)])])
            y = g.leaky(g.conv(y, cin, cout, 3, hw))
            cin = cout
        if sft and hw in sft:
            t, c = sft[hw]
            y = g.op("Add", [y, g.conv(t, c, cout, 1, hw, pad=0)])
        to_rgb = g.conv(y, cout, 3, 1, hw, pad=0)
        rgb = to_rgb if rgb is None else g.op("Add", [g.upsample2(rgb), to_rgb])
        if hw == size:
            return rgb
        hw *= 2
        y = g.upsample2(y)


def _stylegan_channels(multiplier: int) -> dict[int, int]:
    return {4: 512, 8: 512, 16: 512, 32: 512, 64: 256 * multiplier, 128: 128 * multiplier, 256: 64 * multiplier,
            512: 32 * multiplier, 1024: 16 * multiplier, 2048: 8 * multiplier}


def _style_encoder(g: _Graph, x: str, size: int, channels: dict[int, int]) -> tuple[str, dict[int, tuple[str, int]]]:
    """A residual encoder from size² down to 4² with the StyleGAN channel widths, and a style
    vector from its last feature; its features per resolution."""
    hw, cin = size, channels[size]
    x = g.leaky(g.conv(x, 3, cin, 1, size, pad=0))
    feats = {hw: (x, cin)}
    while hw > 4:
        cout = channels[hw // 2]
        x = _resblock_down(g, x, cin, cout, hw // 2)
        hw, cin = hw // 2, cout
        feats[hw] = (x, cin)
    return _linear(g, g.op("Flatten", [x], axis=1), cin * 16, LATENT), feats


def _uniface(g: _Graph, target: str, source: str, spec: SwapperSpec) -> str:
    """Estimate (UniFace, ECCV 2022: a StyleGAN2-based swapper): two residual encoders (target and
    source, 256² → 4²) and a StyleGAN2 256² generator (channel multiplier 2) fed the source's
    style and the target's features."""
    s, channels = spec.crop.size, _stylegan_channels(2)
    _, feats = _style_encoder(g, target, s, channels)
    style, _ = _style_encoder(g, source, s, channels)
    return g.op("Tanh", [_stylegan2_decoder(g, style, s, channels, {hw: feats[hw] for hw in feats if hw >= 8})])


def _dfl_layers(g: _Graph, x: str, size: int) -> str:
    """Estimate of a DeepFaceLive SAEHD model ("df-ud", ae 256, encoder 64, decoder 64 dims, the
    models DeepFaceLive publishes): four 5×5 stride-2 convolutions (64 … 512 channels) to
    size/16², two dense layers through a 256-d code, and a decoder of three upscales (3×3 conv →
    pixel shuffle) with residual blocks to size/2², then one more ×2 ("-d": double resolution)."""
    hw, cin, y = size, 3, x
    for cout in (64, 128, 256, 512):
        hw //= 2
        y = g.leaky(g.conv(y, cin, cout, 5, hw, stride=2))
        cin = cout
    lowest = hw
    code = _linear(g, g.op("Flatten", [y], axis=1), cin * hw * hw, 256)
    y = _linear(g, code, 256, lowest * lowest * 256)
    y = g.op("Reshape", [y, g.const(np.array([1, 256, lowest, lowest], np.int64), "shape", keep_dtype=True)])
    hw, cin = lowest, 256
    for cout in (512, 256, 128):
        y = g.leaky(g.conv(y, cin, cout * 4, 3, hw))
        y = g.op("DepthToSpace", [y], blocksize=2)
        hw, cin = hw * 2, cout
        r = g.leaky(g.conv(y, cin, cin, 3, hw))
        y = g.leaky(g.op("Add", [g.conv(r, cin, cin, 3, hw), y]))
    y = g.op("DepthToSpace", [g.conv(y, cin, 3 * 4, 1, hw, pad=0)], blocksize=2)  # the "-d" ×2: size²
    return g.op("Sigmoid", [y])


FAMILY_LAYERS: dict[str, Layers] = {
    "inswapper_128": Layers(lambda g, t, s, spec: _inswapper_layers(g, t, s), "model-contracts.md (matches insightface's 138.3 M / 174.7 GFLOPs)", False),
    "hyperswap_256": Layers(_hyperswap, "estimate: unpublished architecture (inswapper's generator at 256²)", True),
    "ghost_256": Layers(_ghost(2), "AEI-Net as GHOST (sber-swap) publishes it, 2 AAD layers a block (ghost_1/3: 1/3)", False),
    "simswap_256": Layers(_simswap, "SimSwap's published generator (fs_networks.py)", False),
    "simswap_unofficial_512": Layers(_simswap, "SimSwap's published 512 generator (fs_networks_512.py)", False),
    "hififace_unofficial_256": Layers(_hififace, "estimate: HifiFace's paper figure (no published export layout)", True),
    "blendswap_256": Layers(_blendswap, "IResNet-100 + AEI-Net (BlendFace's paper); AAD block count an estimate", True),
    "uniface_256": Layers(_uniface, "estimate: StyleGAN2-based (UniFace's paper)", True),
    "deepfacelab": Layers(lambda g, t, s, spec: _dfl_layers(g, t, spec.crop.size), "estimate: a SAEHD df-ud model, ae 256/e 64/d 64", True),
}
"""Every family's compute-equivalent layer list (`build(graph, target, source, spec) → output`)."""


def family_layer_stats(spec: SwapperSpec, blocks: int | None = None) -> tuple[int, int]:
    """(parameters, multiply-accumulates) of a family's compute-equivalent layer list (ghost: with
    `blocks` AAD layers a block)."""
    g = _Graph(count_only=True)
    if spec.family == "ghost_256" and blocks is not None:
        _aei_net(g, "target", "source", spec.crop.size, blocks)
    elif spec.layout == "dfm":
        _dfl_layers(g, "x", spec.crop.size)
    else:
        FAMILY_LAYERS[spec.family].build(g, "target", "source", spec)
    return g.params, g.macs


def ghost_blocks(model: str) -> int:
    """GHOST's AAD layers a block of a ghost model by name (ghost_1_256 → 1); 2 otherwise."""
    return int(model.split("_")[1]) if model.startswith("ghost_") and model.split("_")[1].isdigit() else 2


def build_model_swapper(path: Path | str, model: str, spec: SwapperSpec) -> Path:
    """The compute-equivalent stand-in of one published model (ghost_1/2/3 differ in block count)."""
    if spec.family == "ghost_256":
        g = _Graph(rng=np.random.default_rng(11))
        inputs, outputs = _io(spec)
        out = _aei_net(g, spec.target_input, spec.source_input, spec.crop.size, ghost_blocks(model))
        g.nodes.append(helper.make_node("Identity", [out], ["output"]))
        return _save(g.model(inputs, outputs, f"{model}_standin"), path)
    return build_family_swapper(path, spec, compute_equivalent=True)


# ---- enhancers -----------------------------------------------------------------------------


def _gpen(g: _Graph, x: str, size: int) -> str:
    """GPEN-BFR (GAN prior embedded network): a residual encoder from size² to 4² whose features
    feed a StyleGAN2 generator of that size (channel multiplier 2, narrow 1) at every resolution."""
    channels = _stylegan_channels(2)
    style, feats = _style_encoder(g, x, size, channels)
    return g.op("Tanh", [_stylegan2_decoder(g, style, size, channels, feats)])


def _vqgan_level(g: _Graph, x: str, cin: int, cout: int, hw: int, blocks: int) -> str:
    """`blocks` VQGAN residual blocks (two 3×3 convolutions, a 1×1 skip where the width changes)."""
    for _ in range(blocks):
        y = g.conv(_relu(g, x), cin, cout, 3, hw)
        y = g.conv(_relu(g, y), cout, cout, 3, hw)
        x = g.op("Add", [y, x if cin == cout else g.conv(x, cin, cout, 1, hw, pad=0)])
        cin = cout
    return x


def _vqgan_coder(g: _Graph, x: str, size: int, mults: tuple[int, ...], blocks: int) -> tuple[str, int, int]:
    """A VQGAN encoder (64 base channels × `mults`, `blocks` residual blocks a level, stride-2
    downsampling between levels): the latent, its channels and side."""
    cin, hw = 64, size
    x = g.conv(x, 3, cin, 3, hw)
    for i, m in enumerate(mults):
        x, cin = _vqgan_level(g, x, cin, 64 * m, hw, blocks), 64 * m
        if i < len(mults) - 1:
            hw //= 2
            x = g.conv(x, cin, cin, 3, hw, stride=2)
    return x, cin, hw


def _vqgan_decoder(g: _Graph, x: str, cin: int, hw: int, size: int, mults: tuple[int, ...], blocks: int) -> str:
    for i, m in enumerate(reversed(mults)):
        x, cin = _vqgan_level(g, x, cin, 64 * m, hw, blocks), 64 * m
        if i < len(mults) - 1:
            hw *= 2
            x = g.conv(g.upsample2(x), cin, cin, 3, hw)
    assert hw == size
    return g.op("Tanh", [g.conv(x, cin, 3, 3, hw)])


def _transformer(g: _Graph, x: str, ch: int, hw: int, layers: int, ffn: int) -> str:
    """`layers` transformer layers on the hw² tokens of `x` (self-attention + feed-forward)."""
    tokens = hw * hw
    t = g.op("Transpose", [g.op("Reshape", [x, g.const(np.array([1, ch, tokens], np.int64), "shape", keep_dtype=True)])], perm=_ints(0, 2, 1))
    for _ in range(layers):
        q, k, v = (g.op("MatMul", [t, g.weight((ch, ch), ch)]) for _ in range(3))
        g.macs += 3 * tokens * ch * ch
        att = g.op("Softmax", [g.op("MatMul", [q, g.op("Transpose", [k], perm=_ints(0, 2, 1))])], axis=-1)
        g.macs += 2 * tokens * tokens * ch
        t = g.op("Add", [t, g.op("MatMul", [g.op("MatMul", [att, v]), g.weight((ch, ch), ch)])])
        g.macs += tokens * ch * ch
        f = g.op("MatMul", [_relu(g, g.op("MatMul", [t, g.weight((ch, ffn), ch)])), g.weight((ffn, ch), ffn)])
        g.macs += 2 * tokens * ch * ffn
        t = g.op("Add", [t, f])
    return g.op("Reshape", [g.op("Transpose", [t], perm=_ints(0, 2, 1)), g.const(np.array([1, ch, hw, hw], np.int64), "shape", keep_dtype=True)])


def _codeformer(g: _Graph, x: str, size: int) -> str:
    """CodeFormer (its published VQGAN + transformer): encoder 64·(1,2,2,4,4,8) channels with two
    residual blocks a level, 512² → 16², nine transformer layers (512-d, feed-forward 1024) on the
    256 tokens, the decoder back (its controllable feature transformation as the skips' cost:
    an estimate)."""
    mults = (1, 2, 2, 4, 4, 8)
    z, ch, hw = _vqgan_coder(g, x, size, mults, 2)
    z = _transformer(g, z, ch, hw, 9, 1024)
    return _vqgan_decoder(g, z, ch, hw, size, mults, 2)


def _restoreformer(g: _Graph, x: str, size: int) -> str:
    """RestoreFormer++ (its VQGAN encoder/decoder, 64·(1,2,2,4,4,8) channels, two residual blocks a
    level, multi-head cross-attention at 16²: here one attention layer, an estimate)."""
    mults = (1, 2, 2, 4, 4, 8)
    z, ch, hw = _vqgan_coder(g, x, size, mults, 2)
    z = _transformer(g, z, ch, hw, 1, 2048)
    return _vqgan_decoder(g, z, ch, hw, size, mults, 2)


ENHANCER_LAYERS: dict[str, Layers] = {
    "gfpgan": Layers(lambda g, x, size: _gfpgan_layers(g, x), "model-contracts.md's GFPGAN 1.4 estimate (1.2/1.3: the same layers)", True),
    "codeformer": Layers(_codeformer, "CodeFormer's published VQGAN + transformer; its fusion layers an estimate", True),
    "restoreformer_plus_plus": Layers(_restoreformer, "estimate: RestoreFormer++'s VQGAN with one attention layer", True),
    **{spec.family: Layers(_gpen, "GPEN's published GAN prior network (StyleGAN2, multiplier 2); its encoder an estimate", True)
       for spec in ENHANCERS if spec.family.startswith("gpen_bfr")},
}
"""Every enhancer family's compute-equivalent layer list (`build(graph, input, size) → output`)."""


def enhancer_family_stats(spec: EnhancerSpec) -> tuple[int, int]:
    """(parameters, multiply-accumulates) of an enhancer family's compute-equivalent layer list."""
    g = _Graph(count_only=True)
    ENHANCER_LAYERS[spec.family].build(g, "input", spec.crop.size)
    return g.params, g.macs


def swapper_spec(family: str) -> SwapperSpec:
    return next(spec for spec in SWAPPERS if spec.family == family)

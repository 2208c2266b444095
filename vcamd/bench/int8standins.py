"""Small stand-ins for the enhancer's and the face parser's int8 copies (`vcamd.models.int8roles`), with the
production signatures (../shared/docs/model-contracts.md): an enhancer and a parser whose work is
convolutions their copies quantise (the light `standins.build_parser` has none; the light enhancer's
one convolution is both its first and its last), and an enhancer and a parser whose activations 8
bits cannot hold — their copies must fail the check, like `standins.build_unquantizable_swapper`'s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from vcamd.bench.standins import ENHANCER_SIZE, PARSER_CLASSES, PARSER_SIZE, SPIKE, _Graph, _light_enhance, _save

SKIN_LOGITS = np.zeros((PARSER_CLASSES, 3), np.float32)
"""The conv parser's 1×1 convolution, on ImageNet-normalised RGB: background 0; skin where red
leads blue (skin's hue, whatever its tone: 4·(r − b) − 1 in normalised units); the brows where the
face is dark (−4·(r + g + b) − 7); the other 16 classes never win."""
SKIN_LOGITS[1] = (4.0, 0.0, -4.0)
SKIN_LOGITS[2] = (-4.0, -4.0, -4.0)
SKIN_BIAS = np.full(PARSER_CLASSES, -20.0, np.float32)
SKIN_BIAS[:3] = (0.0, -1.0, -7.0)


def _spiked(g: _Graph, x: str, channels: int, size: int) -> str:
    """`x` through three 1×1 identity convolutions, the middle one with `SPIKE` added in one corner
    pixel (and taken off after it): float gives `x` back; 8 bits round it away (every recipe
    quantises the middle one: `vcamd.inference.int8recipes.RECIPES` may keep the first and last float)."""
    identity = np.eye(channels, dtype=np.float32).reshape(channels, channels, 1, 1)
    spike = np.zeros((1, channels, size, size), np.float32)
    spike[..., :2, :2] = SPIKE

    def same(y: str) -> str:
        return g.op("Conv", [y, g.const(identity, "identity"), g.const(np.zeros(channels, np.float32), "b")], kernel_shape=[1, 1])

    spike_name = g.const(spike, "spike")
    return same(g.op("Sub", [same(g.op("Add", [same(x), spike_name])), spike_name]))


def _parser_logits(g: _Graph, x: str) -> str:
    return g.op("Conv", [x, g.const(SKIN_LOGITS.reshape(PARSER_CLASSES, 3, 1, 1), "classes"), g.const(SKIN_BIAS, "bias")],
                kernel_shape=[1, 1])


def build_conv_parser(path: Path | str, *, unquantizable: bool = False) -> Path:
    """A BiSeNet-signature parser (`input` [1,3,512,512] → [1,19,512,512] logits) whose classes come from
    one 1×1 convolution (`SKIN_LOGITS`); `unquantizable`: its logits also pass through `_spiked`."""
    g = _Graph()
    logits = _parser_logits(g, "input")
    if unquantizable:
        logits = _spiked(g, logits, PARSER_CLASSES, PARSER_SIZE)
    g.nodes.append(helper.make_node("Identity", [logits], ["output"]))
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, PARSER_SIZE, PARSER_SIZE])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, PARSER_CLASSES, PARSER_SIZE, PARSER_SIZE])
    return _save(g.model([x], [out], "conv_parser_standin"), path)


def build_unquantizable_enhancer(path: Path | str) -> Path:
    """A GFPGAN-signature enhancer (`input` → `output`, [1,3,512,512] in [-1, 1]): the light stand-in's
    sharpening through `_spiked`, so its int8 copy cannot pass the check."""
    g = _Graph(rng=np.random.default_rng(7))
    y = _spiked(g, _light_enhance(g, "input"), 3, ENHANCER_SIZE)
    g.nodes.append(helper.make_node("Clip", [y, g.const(np.array(-1.0, np.float32), "lo"), g.const(np.array(1.0, np.float32), "hi")], ["output"]))
    shape = [1, 3, ENHANCER_SIZE, ENHANCER_SIZE]
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)
    outp = helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)
    return _save(g.model([inp], [outp], "unquantizable_enhancer_standin"), path)


def build_residual_enhancer(path: Path | str) -> Path:
    """A GFPGAN-signature enhancer that restores the way such nets do, a correction added to the input:
    `input` + 0.1·tanh(1×1 conv(ReLU(3×3 conv(input), 16 channels))), clipped to [-1, 1]. Both
    convolutions are quantised by the first recipe; rounding them moves the output a little."""
    g = _Graph(rng=np.random.default_rng(11))
    hidden = g.op("Relu", [g.conv("input", 3, 16, 3, ENHANCER_SIZE)])
    correction = g.op("Tanh", [g.conv(hidden, 16, 3, 1, ENHANCER_SIZE, pad=0)])
    y = g.op("Add", ["input", g.op("Mul", [correction, g.const(np.array(0.1, np.float32), "amount")])])
    g.nodes.append(helper.make_node("Clip", [y, g.const(np.array(-1.0, np.float32), "lo"), g.const(np.array(1.0, np.float32), "hi")], ["output"]))
    shape = [1, 3, ENHANCER_SIZE, ENHANCER_SIZE]
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)
    outp = helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)
    return _save(g.model([inp], [outp], "residual_enhancer_standin"), path)

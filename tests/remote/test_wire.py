"""What crosses the network, without a server: the codecs are exact inverses of the roles' own
normalisation, served signatures read as the model's, addresses and pairings."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vcamd.common.errors import ConfigError, VcamdError
from vcamd.config.address import ServerAddress
from vcamd.faces.parse import CLASSES, to_blob
from vcamd.faces.specs import ENHANCER_CROP, SWAPPERS, swapper_spec_for
from vcamd.remote.wire import AsIs, Classes, CropPixels, ParserPixels, Signature, WireArg, served_name


@pytest.fixture
def crops() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (128, 128, 3), dtype=np.uint8) for _ in range(3)]


@pytest.mark.parametrize("spec", [SWAPPERS[0].crop, ENHANCER_CROP], ids=["inswapper", "gfpgan"])
def test_crop_pixels_carry_the_exact_model_input_in_a_quarter_of_the_bytes(spec, crops) -> None:
    crops = [np.resize(c, (spec.size, spec.size, 3)).astype(np.uint8) for c in crops]
    blob = spec.to_blob(crops)
    codec = CropPixels(spec)
    wire = codec.to_wire(blob)
    assert wire.dtype == np.uint8 and wire.shape == blob.shape and wire.nbytes * 4 == blob.nbytes
    np.testing.assert_array_equal(wire[0], crops[0][..., ::-1].transpose(2, 0, 1))  # RGB, NCHW: the model's layout
    np.testing.assert_array_equal(codec.from_wire(wire), blob)  # to the bit: the server's model sees what ours would
    # An output on its way back: what to_crops would make of the model's floats, exactly.
    out = np.random.default_rng(1).uniform(-0.2, 1.2, blob.shape).astype(np.float32) * (1 if spec.mean == 0 else 2)
    back = codec.from_wire(codec.to_wire(out))
    for a, b in zip(spec.to_crops(back), spec.to_crops(out), strict=True):
        np.testing.assert_array_equal(a, b)


def test_nan_output_is_an_error_not_pixels(crops) -> None:
    codec = CropPixels(SWAPPERS[0].crop)
    out = SWAPPERS[0].crop.to_blob(crops)
    out[0, 0, 0, 0] = np.nan
    with pytest.raises(VcamdError, match="NaN"):
        codec.to_wire(out)


def test_parser_pixels_and_classes(crops) -> None:
    rgb = [np.resize(c, (512, 512, 3)).astype(np.uint8) for c in crops[:2]]
    blob = np.concatenate([to_blob(x) for x in rgb])
    codec = ParserPixels()
    wire = codec.to_wire(blob)
    np.testing.assert_array_equal(wire, np.stack(rgb).transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(codec.from_wire(wire), blob)
    logits = np.random.default_rng(2).standard_normal((2, CLASSES, 64, 64)).astype(np.float32)
    classes = Classes(CLASSES)
    labels = classes.to_wire(logits)
    assert labels.shape == (2, 64, 64) and labels.dtype == np.uint8
    np.testing.assert_array_equal(classes.from_wire(labels).argmax(axis=1), logits.argmax(axis=1))
    assert classes.shown([-1, 64, 64]) == [-1, CLASSES, 64, 64]
    with pytest.raises(VcamdError):
        classes.from_wire(np.full((1, 4, 4), CLASSES, np.uint8))


def test_a_served_swapper_reads_as_the_model_it_is() -> None:
    meta = [WireArg("target", "UINT8", [-1, 3, 128, 128]), WireArg("source", "FP32", [-1, 512])]
    sig = Signature.of_wire("swapper", meta, [WireArg("output", "UINT8", [-1, 3, 128, 128])])
    assert [(a.name, a.shape, a.type) for a in sig.inputs] == [("target", ["batch", 3, 128, 128], "tensor(float)"),
                                                               ("source", ["batch", 512], "tensor(float)")]
    assert swapper_spec_for({a.name: a.shape for a in sig.inputs}) is SWAPPERS[0]
    assert isinstance(sig.codec("target"), CropPixels) and isinstance(sig.codec("source"), AsIs)
    # The raw ONNX file served by Triton's onnxruntime backend: float on the wire, sent as it is.
    raw = Signature.of_wire("swapper", [WireArg("target", "FP32", [1, 3, 128, 128]), WireArg("source", "FP32", [1, 512])],
                            [WireArg("output", "FP32", [1, 3, 128, 128])])
    assert all(isinstance(raw.codec(n), AsIs) for n in ("target", "source", "output"))


@pytest.mark.parametrize(("value", "name"), [("inswapper_128_fp16", "inswapper_128_fp16"), ("/m/gfpgan 1.4.onnx", "gfpgan_1_4"),
                                             ("C:\\m\\bisenet_resnet_34.onnx", "bisenet_resnet_34")])
def test_served_names(value: str, name: str) -> None:
    assert served_name(value) == name


@pytest.mark.parametrize(("url", "target", "loopback"), [
    ("grpc://127.0.0.1:8001", "127.0.0.1:8001", True), ("grpc://127.3.4.5", "127.3.4.5:8001", True),
    ("grpc://localhost:9000", "localhost:9000", True), ("grpc://[::1]:8001", "[::1]:8001", True),
    ("grpc://gpu-box.lan:8001", "gpu-box.lan:8001", False), ("grpc://10.0.0.5:8001", "10.0.0.5:8001", False),
])
def test_server_addresses(url: str, target: str, loopback: bool) -> None:
    address = ServerAddress.parse(url)
    assert (address.target, address.loopback) == (target, loopback)


@pytest.mark.parametrize("bad", ["127.0.0.1:8001", "http://127.0.0.1:8001", "grpc://:8001", "grpc://h:99999", "grpc://h:1/x"])
def test_bad_server_urls_are_config_errors(bad: str) -> None:
    from vcamd.config.reading import config_from_dict

    with pytest.raises(ConfigError, match="server"):
        config_from_dict({"models": {"server": bad}}, "test")
    assert config_from_dict({"models": {"server": " "}}, "test").models.server == ""


def test_pairing_bundle_install(tmp_path) -> None:
    from vcamd.remote.pairing import install_bundle, pairing_for, server_credentials, write_bundle

    files, pairing = server_credentials(tmp_path / "server")
    assert all(p.stat().st_mode & 0o077 == 0 for p in (files.key, files.certificate, files.ca))
    bundle = write_bundle(pairing, ServerAddress.parse("grpc://gpu-box:8001"), tmp_path / "bundle.json")
    path, address = install_bundle(bundle)
    assert address.url == "grpc://gpu-box:8001" and path.stat().st_mode & 0o077 == 0
    kept = pairing_for(address)
    assert kept is not None and kept.certificate == pairing.certificate and kept.key == pairing.key
    again, _ = server_credentials(tmp_path / "server")  # kept, not remade: pairings stay valid across restarts
    assert again.certificate.read_bytes() == files.certificate.read_bytes()
    (tmp_path / "junk.json").write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(VcamdError, match="not a vcamd pairing bundle"):
        install_bundle(tmp_path / "junk.json")

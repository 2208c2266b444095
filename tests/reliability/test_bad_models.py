"""Bad model files are refused at load with a ModelError that names the file.

Corrupt bytes, a real model cut short, a file that is not ONNX at all, and valid ONNX models with
the wrong signature (built with onnx.helper), given to every loader: Sessions, FaceDetector,
Recognizer, Swapper, Enhancer. Nothing else may escape (no onnxruntime exception, no
IndexError from a shape check), and the message must let the user find the file.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.errors import ModelError

LOADERS = ["sessions", "detector", "recognizer", "swapper", "enhancer"]


def load(kind: str, path: Path):
    from vcamd.inference.runtime import Sessions

    sessions = Sessions(["cpu"], threads=1)
    if kind == "sessions":
        return sessions.get(path)
    if kind == "detector":
        from vcamd.faces.detect import FaceDetector

        return FaceDetector(path, sessions)
    if kind == "recognizer":
        from vcamd.faces.identity import Recognizer

        return Recognizer(path, sessions)
    if kind == "swapper":
        from vcamd.faces.swap import Swapper

        return Swapper(path, sessions)
    if kind == "enhancer":
        from vcamd.faces.enhance import Enhancer

        return Enhancer(path, sessions)
    raise AssertionError(kind)


def assert_refused(kind: str, path: Path) -> ModelError:
    with pytest.raises(ModelError) as info:
        load(kind, path)
    assert path.name in str(info.value), f"{kind}: the error does not name {path.name}: {info.value}"
    assert "\n" not in info.value.message, "a ModelError message is one line"
    return info.value


def _corrupt(tmp_path: Path, assets: Path) -> dict[str, Path]:
    real = (assets / "models" / "scrfd_500m_kps.onnx").read_bytes()
    files = {
        "zero-size": b"",
        "text": b"this is not a model\n",
        "random": bytes(range(256)) * 64,
        "truncated-half": real[: len(real) // 2],
        "truncated-header": real[:100],
        "png-renamed": (assets / "images" / "newton.png").read_bytes()[:5000],
        "flipped-bytes": real[:200] + bytes(b ^ 0xFF for b in real[200:4200]) + real[4200:],
    }
    out = {}
    for name, data in files.items():
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(data)
        out[name] = path
    return out


CORRUPT_KINDS = ["zero-size", "text", "random", "truncated-half", "truncated-header", "png-renamed", "flipped-bytes"]


@pytest.mark.parametrize("kind", LOADERS)
@pytest.mark.parametrize("corruption", CORRUPT_KINDS)
def test_corrupt_model_files(tmp_path: Path, assets: Path, kind: str, corruption: str) -> None:
    path = _corrupt(tmp_path, assets)[corruption]
    assert_refused(kind, path)


@pytest.mark.parametrize("kind", LOADERS)
def test_missing_model_file(tmp_path: Path, kind: str) -> None:
    err = assert_refused(kind, tmp_path / "nowhere.onnx")
    assert "pull" in str(err) or "path" in str(err)


@pytest.mark.parametrize("kind", LOADERS)
def test_folder_instead_of_model(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "model.onnx"
    folder.mkdir()
    assert_refused(kind, folder)


# ---- valid ONNX, wrong signature --------------------------------------------------------------

WRONG_SIGNATURES: dict[str, tuple[list, list, dict]] = {
    # name: (inputs, outputs, extra)
    "one-in-one-out-image": ([("input", [1, 3, 128, 128])], [("output", [1, 3, 128, 128])], {}),
    "swapper-names-wrong-shapes": ([("target", [1, 3, 64, 64]), ("source", [1, 256])], [("output", [1, 3, 64, 64])], {"emap_last": True}),
    "swapper-shape-no-emap": ([("target", [1, 3, 128, 128]), ("source", [1, 512])], [("output", [1, 3, 128, 128])], {}),
    "recognizer-wrong-size": ([("input.1", [1, 3, 64, 64])], [("embedding", [1, 512])], {}),
    "vector-out": ([("input.1", [1, 3, 112, 112])], [("out", [1, 512])], {}),
    "detector-three-outputs": ([("input.1", [1, 3, 640, 640])], [("a", [1, 1]), ("b", [1, 4]), ("c", [1, 10])], {}),
    "enhancer-256": ([("input", [1, 3, 256, 256])], [("output", [1, 3, 256, 256])], {}),
    "rank-2-input": ([("x", [1, 512])], [("y", [1, 512])], {}),
    # Four swapper families take exactly this (hyperswap, ghost, simswap, hififace): a file not named
    # as its model, with no [models] swapper_family, is refused rather than guessed.
    "swapper-256-no-family": ([("target", [1, 3, 256, 256]), ("source", [1, 512])], [("output", [1, 3, 256, 256])], {}),
    "dfm-one-output": ([("in_face:0", [1, 224, 224, 3])], [("out", [1, 224, 224, 3])], {}),
}

# Which loader legitimately accepts which signature (everything else must be refused).
ACCEPTED = {
    ("recognizer", "vector-out"),  # a real 112² → [1,512] net: exactly a recognizer's signature
    ("enhancer", "enhancer-256"),  # GPEN-BFR-256's signature
}


@pytest.mark.parametrize("kind", [k for k in LOADERS if k != "sessions"])
@pytest.mark.parametrize("signature", sorted(WRONG_SIGNATURES))
def test_wrong_signature(wrong_model: Callable[..., Path], kind: str, signature: str) -> None:
    inputs, outputs, extra = WRONG_SIGNATURES[signature]
    path = wrong_model(f"{signature}.onnx", inputs, outputs, **extra)
    load("sessions", path)  # the file itself is a loadable ONNX model
    if (kind, signature) in ACCEPTED:
        # Its own signature: it must load (refusing it would refuse the real models of its role).
        assert load(kind, path) is not None
        return
    err = assert_refused(kind, path)
    assert err.fix, "a wrong-signature error says what to use instead"


@pytest.mark.parametrize(
    ("kind", "asset"),
    [
        ("swapper", "scrfd_500m_kps.onnx"),
        ("recognizer", "scrfd_500m_kps.onnx"),
        ("enhancer", "scrfd_500m_kps.onnx"),
        ("detector", "mobilefacenet.onnx"),
        ("swapper", "mobilefacenet.onnx"),
        ("enhancer", "mobilefacenet.onnx"),
    ],
)
def test_real_model_in_the_wrong_role(tmp_path: Path, assets: Path, kind: str, asset: str) -> None:
    path = tmp_path / asset
    shutil.copy(assets / "models" / asset, path)
    assert_refused(kind, path)


@pytest.mark.parametrize(("kind", "standin"), [("swapper", "recognizer.onnx"), ("enhancer", "swapper.onnx"), ("detector", "enhancer.onnx"), ("recognizer", "enhancer.onnx")])
def test_standin_in_the_wrong_role(standin_dir: Path, kind: str, standin: str) -> None:
    assert_refused(kind, standin_dir / standin)


def test_right_models_load(assets: Path, standin_dir: Path, newton) -> None:
    # The refusals above must come from the signature, not from a loader that refuses everything:
    # each right model loads and does its job on a real face.
    (face,) = load("detector", assets / "models" / "scrfd_500m_kps.onnx").detect(newton)
    assert face.score > 0.5 and face.kps.shape == (5, 2)
    for recognizer in (assets / "models" / "mobilefacenet.onnx", standin_dir / "recognizer.onnx"):
        model = load("recognizer", recognizer)
        embedding = model.embed(newton, face)
        assert embedding.shape == (model.dim,) and abs(float(np.linalg.norm(embedding)) - 1.0) < 1e-4, recognizer.name
    swapper = load("swapper", standin_dir / "swapper.onnx")
    crop, _ = swapper.align(newton, face)
    identities = np.eye(swapper.spec.identity_dim, dtype=np.float32)
    (swapped,) = swapper.swap([crop], swapper.latent(identities[0]))
    (other,) = swapper.swap([crop], swapper.latent(identities[1]))
    assert swapped.shape == crop.shape and swapped.dtype == np.uint8
    # its job: the crop changed, and by the identity it was given
    assert not np.array_equal(swapped, crop) and not np.array_equal(swapped, other)
    side = 512  # GFPGAN's FFHQ crop
    face_in = cv2.resize(newton, (side, side))
    restored = load("enhancer", standin_dir / "enhancer.onnx").restore(face_in)
    assert restored.shape == (side, side, 3) and restored.dtype == np.uint8
    assert not np.array_equal(restored, face_in)  # its job: the face came back changed


def test_external_data_pointing_outside_is_refused(tmp_path: Path, standin_dir: Path) -> None:
    # An ONNX file can keep tensors in "external data" files named inside the model. One that
    # names a file outside its folder (here /etc/passwd) must not be read as weights.
    import onnx

    model = onnx.load_model(str(standin_dir / "swapper.onnx"))
    emap = model.graph.initializer[-1]
    emap.ClearField("float_data")
    emap.ClearField("raw_data")
    emap.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "../../../../../../etc/passwd"), ("offset", "0"), ("length", str(512 * 512 * 4))):
        entry = emap.external_data.add()
        entry.key, entry.value = key, value
    path = tmp_path / "models" / "swapper.onnx"
    path.parent.mkdir()
    path.write_bytes(model.SerializeToString())
    assert_refused("swapper", path)

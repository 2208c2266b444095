"""Each swapper and enhancer family's pre- and post-processing, checked numerically against the
published formulas re-derived here on their own (FaceFusion 3.8.1's face swapper, face enhancer and
deep swapper, insightface's INSwapper): the crop templates, the normalisation in and out, the source
rule (emap, normalised embedding, embedding converter, source image), the identity blend weight,
and what the model really gets and gives back through `Swapper.swap` / `Enhancer.restore` — on a
stand-in of each family's exact signature and a real face (Newton, the real SCRFD).

The re-derivations follow the published code's own steps (x[:, :, ::-1] / 255, (x - mean) / std,
transpose; x · std + mean for the de-normalising families, clip, ×255), written from the numbers
FaceFusion publishes, not from `vcamd.faces.specs`. One documented difference is kept out of the
comparison: FaceFusion cuts crops with INTER_AREA and a replicated border, vcamd with INTER_LINEAR
and a black one (`faces/align.py`); the templates, sizes and matrices are compared as they are.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnxruntime
import pytest

from vcamd.bench.families import build_converter, build_family_enhancer, build_family_swapper
from vcamd.faces.align import estimate_affine, template_points
from vcamd.faces.enhance import Enhancer
from vcamd.faces.identity import SourceIdentity
from vcamd.faces.specs import ENHANCERS, SWAPPERS, EnhancerSpec, SwapperSpec
from vcamd.faces.swap import EmbeddingConverter, Swapper

# ---- the published numbers, as FaceFusion 3.8.1 writes them (facefusion/face_helper.py, the
# processors' model sets) --------------------------------------------------------------------

PUBLISHED_TEMPLATES = {
    "arcface_112_v1": [[0.35473214, 0.45658929], [0.64526786, 0.45658929], [0.50000000, 0.61154464], [0.37913393, 0.77687500], [0.62086607, 0.77687500]],
    "arcface_112_v2": [[0.34191607, 0.46157411], [0.65653393, 0.45983393], [0.50022500, 0.64050536], [0.37097589, 0.82469196], [0.63151696, 0.82325089]],
    "arcface_128": [[0.36167656, 0.40387734], [0.63696719, 0.40235469], [0.50019687, 0.56044219], [0.38710391, 0.72160547], [0.61507734, 0.72034453]],
    "dfl_whole_face": [[0.35342266, 0.39285716], [0.62797622, 0.39285716], [0.48660713, 0.54017860], [0.38839287, 0.68750011], [0.59821427, 0.68750011]],
    "ffhq_512": [[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904], [0.39308822, 0.72541100], [0.61150205, 0.72490465]],
    "mtcnn_512": [[0.36562865, 0.46733799], [0.63305391, 0.46585885], [0.50019127, 0.61942959], [0.39032951, 0.77598822], [0.61178945, 0.77476328]],
}

PUBLISHED_SWAPPERS = {
    # model: (type, template, size, mean, std)
    "inswapper_128": ("inswapper", "arcface_128", 128, [0.0] * 3, [1.0] * 3),
    "hyperswap_1a_256": ("hyperswap", "arcface_128", 256, [0.5] * 3, [0.5] * 3),
    "ghost_2_256": ("ghost", "arcface_112_v1", 256, [0.5] * 3, [0.5] * 3),
    "simswap_256": ("simswap", "arcface_112_v1", 256, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    "simswap_unofficial_512": ("simswap", "arcface_112_v1", 512, [0.0] * 3, [1.0] * 3),
    "hififace_unofficial_256": ("hififace", "mtcnn_512", 256, [0.5] * 3, [0.5] * 3),
    "blendswap_256": ("blendswap", "ffhq_512", 256, [0.0] * 3, [1.0] * 3),
    "uniface_256": ("uniface", "ffhq_512", 256, [0.5] * 3, [0.5] * 3),
}
DENORMALISED = {"ghost", "hififace", "hyperswap", "uniface"}
TARGET_NORMALISED_IN_BLEND = {"hififace", "hyperswap", "inswapper", "simswap"}
SOURCE_IMAGE = {"blendswap": ("arcface_112_v2", 112), "uniface": ("ffhq_512", 256)}
PUBLISHED_ENHANCERS = {  # model: (template, size); all take (x/255 − 0.5)/0.5
    "gfpgan_1.4": ("ffhq_512", 512), "codeformer": ("ffhq_512", 512), "restoreformer_plus_plus": ("ffhq_512", 512),
    "gpen_bfr_256": ("arcface_128", 256), "gpen_bfr_512": ("ffhq_512", 512), "gpen_bfr_1024": ("ffhq_512", 1024),
}
DFL_TEMPLATE, DFL_SIZE = "dfl_whole_face", 224


def spec_of(model: str) -> SwapperSpec:
    return next(spec for spec in SWAPPERS if model in spec.models)


def enhancer_of(model: str) -> EnhancerSpec:
    return next(spec for spec in ENHANCERS if model in spec.models)


def facefusion_matrix(kps: np.ndarray, template: str, size: int) -> np.ndarray:
    """warp_face_by_face_landmark_5's matrix: estimateAffinePartial2D onto template × size."""
    points = np.array(PUBLISHED_TEMPLATES[template]) * size
    return cv2.estimateAffinePartial2D(kps, points, method=cv2.RANSAC, ransacReprojThreshold=100)[0]


def facefusion_crop(image: np.ndarray, kps: np.ndarray, template: str, size: int) -> np.ndarray:
    """The crop at FaceFusion's matrix, cut as vcamd cuts (INTER_LINEAR, black border)."""
    return cv2.warpAffine(image, facefusion_matrix(kps, template, size), (size, size), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def facefusion_prepare(crop: np.ndarray, mean: list[float], std: list[float]) -> np.ndarray:
    x = crop[:, :, ::-1] / 255.0
    x = (x - mean) / std
    return np.expand_dims(x.transpose(2, 0, 1), axis=0).astype(np.float32)


def facefusion_normalize(out: np.ndarray, kind: str, mean: list[float], std: list[float]) -> np.ndarray:
    x = out.transpose(1, 2, 0)
    if kind in DENORMALISED:
        x = x * std + mean
    x = x.clip(0, 1)
    return x[:, :, ::-1] * 255


def facefusion_blend(source: np.ndarray, target: np.ndarray, kind: str, weight: float) -> np.ndarray:
    w = np.interp(weight, [0, 1], [0.35, -0.35]).astype(np.float32)
    if kind in TARGET_NORMALISED_IN_BLEND:
        target = target / np.linalg.norm(target)
    return source.reshape(1, -1) * (1 - w) + target.reshape(1, -1) * w


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("families")
    for model in PUBLISHED_SWAPPERS:
        build_family_swapper(folder / f"{model}.onnx", spec_of(model))
    build_family_swapper(folder / "someone.dfm", SWAPPERS[-1].sized(DFL_SIZE))
    build_converter(folder / "converter.onnx")
    for model in PUBLISHED_ENHANCERS:
        build_family_enhancer(folder / f"{model}.onnx", enhancer_of(model))
    return folder


class Recorded:
    """Wraps a session: each run's feeds and outputs are kept."""

    def __init__(self, session) -> None:
        self.session, self.feeds, self.outputs = session, [], []

    def run(self, names, feeds):
        out = self.session.run(names, feeds)
        self.feeds.append({k: np.array(v) for k, v in feeds.items()})
        self.outputs.append([np.array(o) for o in out])
        return out

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.fixture(scope="module")
def identity(newton, newton_face) -> SourceIdentity:
    """Newton as the source: a raw embedding of norm ~20 as ArcFace gives, and the photo."""
    rng = np.random.default_rng(5)
    raw = (rng.standard_normal(512) * 0.9).astype(np.float32)
    return SourceIdentity(Path("newton.png"), raw / np.linalg.norm(raw), newton_face, raw_embedding=raw, photo=newton)


# ---- templates ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", [*PUBLISHED_SWAPPERS, *PUBLISHED_ENHANCERS, "someone.dfm"])
def test_the_crop_template_and_matrix_are_the_published_ones(model: str, newton, newton_face):
    if model.endswith(".dfm"):
        spec_crop, (template, size) = SWAPPERS[-1].sized(DFL_SIZE).crop, (DFL_TEMPLATE, DFL_SIZE)
    elif model in PUBLISHED_SWAPPERS:
        spec_crop, (_, template, size, _, _) = spec_of(model).crop, PUBLISHED_SWAPPERS[model]
    else:
        spec_crop, (template, size) = enhancer_of(model).crop, PUBLISHED_ENHANCERS[model]
    assert spec_crop.size == size
    np.testing.assert_allclose(template_points(size, spec_crop.template), np.array(PUBLISHED_TEMPLATES[template]) * size, atol=2e-3)
    ours = estimate_affine(newton_face.kps, size, spec_crop.template)
    theirs = facefusion_matrix(newton_face.kps, template, size)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-3 * max(1.0, np.abs(theirs).max()))
    crop, _ = spec_crop.align(newton, newton_face.kps)
    assert np.abs(crop.astype(int) - facefusion_crop(newton, newton_face.kps, template, size)).mean() < 0.5


# ---- swappers: what the model gets and gives back ----------------------------------------


@pytest.mark.parametrize("model", list(PUBLISHED_SWAPPERS))
def test_a_swap_feeds_and_reads_the_model_as_published(model: str, family_dir: Path, sessions, newton, newton_face, identity):
    kind, template, size, mean, std = PUBLISHED_SWAPPERS[model]
    converter = EmbeddingConverter(family_dir / "converter.onnx", sessions)
    swapper = Swapper(family_dir / f"{model}.onnx", sessions, converter=converter)
    assert swapper.spec is spec_of(model)
    swapper.session = recorded = Recorded(swapper.session)
    crop, _ = swapper.align(newton, newton_face)
    source = swapper.source_for(identity)
    (swapped,) = swapper.swap([crop], source)
    (feeds,), ((out,),) = recorded.feeds, recorded.outputs

    # the target: the crop, normalised as published
    np.testing.assert_allclose(feeds["target"], facefusion_prepare(crop, mean, std), atol=1e-5)
    # the source, by the family's published rule
    if kind in SOURCE_IMAGE:
        src_template, src_size = SOURCE_IMAGE[kind]
        face = facefusion_crop(newton, newton_face.kps, src_template, src_size)
        expected = np.expand_dims((face[:, :, ::-1] / 255.0).transpose(2, 0, 1), axis=0).astype(np.float32)
        assert np.abs(feeds["source"] - expected).mean() < 1.0 / 255
    else:
        expected = _published_source(kind, identity, swapper, family_dir)
        np.testing.assert_allclose(feeds["source"], expected, rtol=1e-4, atol=1e-5)
    # the output back to pixels, as published (rounded where FaceFusion's paste truncates)
    theirs = facefusion_normalize(out[0], kind, mean, std)
    assert np.abs(swapped.astype(float) - theirs).max() <= 1.0
    assert np.abs(swapped.astype(int) - crop).mean() > 10  # the stand-in really changed the face


def _published_source(kind: str, identity: SourceIdentity, swapper: Swapper, family_dir: Path) -> np.ndarray:
    raw = identity.raw_embedding.reshape(1, -1)
    if kind == "inswapper":  # insightface's INSwapper.get: normed_embedding @ emap, normalised
        latent = (raw / np.linalg.norm(raw)) @ swapper.emap
        return latent / np.linalg.norm(latent)
    if kind == "hyperswap":  # the face's embedding_norm
        return raw / np.linalg.norm(raw)
    converted = onnxruntime.InferenceSession(str(family_dir / "converter.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"input": raw.reshape(-1, 512)})[0].ravel()
    if kind == "ghost":  # the converter's output as it is
        return converted.reshape(1, -1)
    return (converted / np.linalg.norm(converted)).reshape(1, -1)  # simswap, hififace: normalised


@pytest.mark.parametrize("model", [m for m, (kind, *_) in PUBLISHED_SWAPPERS.items() if kind not in SOURCE_IMAGE])
@pytest.mark.parametrize("weight", [0.0, 0.2, 0.5, 1.0])
def test_the_identity_blend_weight_is_the_published_one(model: str, weight: float, family_dir: Path, sessions, identity):
    kind = PUBLISHED_SWAPPERS[model][0]
    swapper = Swapper(family_dir / f"{model}.onnx", sessions, converter=EmbeddingConverter(family_dir / "converter.onnx", sessions))
    source = swapper.source_for(identity)
    target_raw = np.random.default_rng(9).standard_normal(512).astype(np.float32) * 20
    ours = swapper.blended(source, target_raw, weight)
    np.testing.assert_allclose(ours, facefusion_blend(source, target_raw, kind, weight), rtol=1e-5, atol=1e-6)
    if weight == 0.5:
        np.testing.assert_array_equal(ours, source)


@pytest.mark.parametrize("model", [m for m, (kind, *_) in PUBLISHED_SWAPPERS.items() if kind in SOURCE_IMAGE])
def test_the_image_families_take_no_blend(model: str, family_dir: Path, sessions, identity):
    swapper = Swapper(family_dir / f"{model}.onnx", sessions)
    source = swapper.source_for(identity)
    assert swapper.blended(source, np.ones(512, np.float32), 0.0) is source


def test_a_deepfacelab_model_is_fed_and_read_as_published(family_dir: Path, sessions, newton, newton_face):
    swapper = Swapper(family_dir / "someone.dfm", sessions)
    assert swapper.spec.family == "deepfacelab" and swapper.crop.size == DFL_SIZE and not swapper.needs_source
    swapper.session = recorded = Recorded(swapper.session)
    crop, _ = swapper.align(newton, newton_face)
    (swapped,) = swapper.swap([crop], None)
    (feeds,), (outs,) = recorded.feeds, recorded.outputs
    # FaceFusion's deep swapper: 1.75·crop − 0.75·blur(σ 2) (saturated to uint8), / 255, NHWC, BGR
    sharpened = cv2.addWeighted(crop, 1.75, cv2.GaussianBlur(crop, (0, 0), 2), -0.75, 0)
    np.testing.assert_allclose(feeds["in_face:0"], np.expand_dims(sharpened / 255.0, axis=0).astype(np.float32), atol=1e-6)
    np.testing.assert_array_equal(feeds["morph_value:0"], np.array([0.75], np.float32))  # DeepFaceLive's default
    # outputs (mask, face, mask): the face, ×255 clipped
    theirs = (outs[1][0] * 255.0).clip(0, 255)
    assert np.abs(swapped.astype(float) - theirs).max() <= 1.0


# ---- enhancers -----------------------------------------------------------------------------


@pytest.mark.parametrize("model", list(PUBLISHED_ENHANCERS))
def test_an_enhancer_is_fed_and_read_as_published(model: str, family_dir: Path, sessions, newton, newton_face):
    enhancer = Enhancer(family_dir / f"{model}.onnx", sessions, strength=1.0, weight=0.3)
    assert enhancer.spec is enhancer_of(model)
    enhancer.session = recorded = Recorded(enhancer.session)
    crop, _ = enhancer.crop.align(newton, newton_face.kps)
    restored = enhancer.restore(crop)
    (feeds,), ((out,),) = recorded.feeds, recorded.outputs
    np.testing.assert_allclose(feeds["input"], facefusion_prepare(crop, [0.5] * 3, [0.5] * 3), atol=1e-5)
    if model == "codeformer":  # its fidelity weight, a double array of one
        assert feeds["weight"].dtype == np.float64 and feeds["weight"].tolist() == [0.3]
    else:
        assert set(feeds) == {"input"}
    theirs = ((np.clip(out[0], -1, 1) + 1) / 2).transpose(1, 2, 0)
    theirs = (theirs * 255.0).round().astype(np.uint8)[:, :, ::-1]
    assert np.abs(restored.astype(int) - theirs).max() <= 1

"""`vcamd swap` with a stand-in of every swapper family (exact signature, its converter where it has
one) in a models folder under its manifest name: the real face of a real photo is swapped, and
nothing but the face's region changes. A DeepFaceLab `.dfm` model swaps without `--face`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.bench.families import build_converter, build_family_swapper
from vcamd.bench.standins import build_recognizer
from vcamd.faces.specs import SWAPPERS, family_named

MODELS = ["inswapper_128_fp16", "hyperswap_1b_256", "ghost_3_256", "simswap_256", "simswap_unofficial_512",
          "hififace_unofficial_256", "blendswap_256", "uniface_256", "someone.dfm"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("swap_families")
    for model in MODELS:
        spec = family_named(model)
        assert spec is not None
        build_family_swapper(folder / (model if model.endswith(".dfm") else f"{model}.onnx"), spec.sized(256) if spec.layout == "dfm" else spec)
    for converter in {spec.converter for spec in SWAPPERS if spec.converter}:
        build_converter(folder / f"{converter}.onnx")
    build_recognizer(folder / "recognizer.onnx")
    return folder


@pytest.mark.parametrize("model", MODELS)
def test_vcamd_swap_swaps_a_real_face_with_every_family(model: str, models_dir: Path, tmp_path: Path, assets: Path, newton, newton_face):
    swapper = str(models_dir / model) if model.endswith(".dfm") else model
    config = tmp_path / "config.toml"
    config.write_text(
        f'[models]\ndir = "{models_dir}"\ndetector = "{assets / "models" / "scrfd_500m_kps.onnx"}"\n'
        f'recognizer = "{models_dir / "recognizer.onnx"}"\nswapper = "{swapper}"\nproviders = ["cpu"]\nthreads = 1\n'
        '[swap]\nsource_consent = true\n[disclosure]\nbadge = false\n',
        encoding="utf-8",
    )
    out = tmp_path / "out.png"
    face = [] if model.endswith(".dfm") else ["--face", str(assets / "images" / "newton.png")]
    done = subprocess.run([sys.executable, "-m", "vcamd", "swap", "--config", str(config), *face, "--input",
                           str(assets / "images" / "newton.png"), "--output", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "swapped 1 face(s)" in done.stdout
    result = cv2.imread(str(out))
    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    inner = (slice(y1 + (y2 - y1) // 4, y2 - (y2 - y1) // 4), slice(x1 + (x2 - x1) // 4, x2 - (x2 - x1) // 4))
    assert np.abs(result[inner].astype(int) - newton[inner]).mean() > 20  # the face itself was swapped
    assert np.array_equal(result[:40], newton[:40]) and np.array_equal(result[-40:], newton[-40:])  # far from it: untouched

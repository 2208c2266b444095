"""The family stand-ins (`vcamd.bench.families`) have each family's exact signature, their layer
lists count what the published architectures count, and `vcamd bench --swapper/--enhancer` times
them through the real classes."""

from __future__ import annotations

from pathlib import Path

import onnxruntime
import pytest
from support.cli import one_clear_line, run_vcamd

from vcamd.bench import families, layerlists, standins
from vcamd.bench.report import format_models_table
from vcamd.bench.settings import BenchSettings
from vcamd.faces.specs import ENHANCERS, SWAPPERS


def _signature(path: Path) -> tuple[list, list]:
    s = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [(i.name, i.shape, i.type) for i in s.get_inputs()], [o.shape for o in s.get_outputs()]


@pytest.mark.parametrize("spec", SWAPPERS, ids=lambda s: s.family)
def test_each_family_standin_has_its_exact_signature(spec, tmp_path: Path):
    inputs, outputs = _signature(families.build_family_swapper(tmp_path / "m.onnx", spec))
    s = spec.crop.size
    if spec.layout == "dfm":
        assert inputs == [("in_face:0", [1, s, s, 3], "tensor(float)"), ("morph_value:0", [1], "tensor(float)")]
        assert outputs == [[1, s, s, 1], [1, s, s, 3], [1, s, s, 1]]
        return
    source = [1, 3, spec.source.image.size, spec.source.image.size] if spec.source.kind == "image" else [1, 512]
    assert inputs == [("target", [1, 3, s, s], "tensor(float)"), ("source", source, "tensor(float)")]
    assert outputs == [[1, 3, s, s]]


def test_converter_and_enhancer_standins_have_their_signatures(tmp_path: Path):
    assert _signature(families.build_converter(tmp_path / "c.onnx")) == ([("input", [1, 512], "tensor(float)")], [[1, 512]])
    for spec in ENHANCERS[:4]:
        inputs, outputs = _signature(families.build_family_enhancer(tmp_path / f"{spec.family}.onnx", spec))
        side = spec.crop.size
        assert inputs[0] == ("input", [1, 3, side, side], "tensor(float)") and outputs == [[1, 3, side, side]]
        assert inputs[1:] == ([("weight", [1], "tensor(double)")] if spec.family == "codeformer" else [])


def test_the_layer_lists_count_what_the_architectures_count():
    by_family = {spec.family: layerlists.family_layer_stats(spec) for spec in SWAPPERS[:-1]}
    assert by_family["inswapper_128"] == standins.swapper_layer_stats()  # model-contracts.md: 138.3 M, 174.6 GMAC
    params, macs = by_family["simswap_256"]  # nine 512-channel AdaIN blocks at 32² dominate: 9 × 2 × 2.42 GMAC
    assert 50e6 < params < 60e6 and 55e9 < macs < 70e9
    assert by_family["simswap_unofficial_512"][1] > 2 * macs * 0.9  # one stage deeper, four times the pixels at the ends
    ghost = [layerlists.family_layer_stats(SWAPPERS[2], blocks)[1] for blocks in (1, 2, 3)]
    assert ghost == sorted(ghost) and 2 * ghost[0] < ghost[2] < 3.5 * ghost[0]  # ghost_1/2/3: 1/2/3 AAD layers a block
    dfl = [layerlists.family_layer_stats(SWAPPERS[-1].sized(side))[1] for side in (224, 320)]
    assert dfl[1] > 1.8 * dfl[0]  # a DeepFaceLab model's cost grows with its side
    gfpgan = layerlists.enhancer_family_stats(ENHANCERS[0])
    assert gfpgan == standins.enhancer_layer_stats()
    gpen = [layerlists.enhancer_family_stats(spec)[1] for spec in ENHANCERS if spec.family.startswith("gpen_bfr")]
    assert gpen == sorted(gpen)


def test_the_models_table_says_each_models_figures_and_where_its_layers_come_from():
    settings = BenchSettings(face=Path("f.png"), detector="d", width=1, height=1, fps=30, frames=30, inswapper_frames=30,
                             providers=["cpu"], threads=2, fp16=False, rounds=3, load=2)
    rows = [{"model": "ghost_2_256", "family": "ghost_256", "params_m": 184.3, "gmac": 31.0, "file_mb": 737, "quiet_ms": 480.4,
             "loaded_ms": 900.2, "layers": "AEI-Net as GHOST publishes it", "estimate": False, "build_s": 3.0},
            {"model": "uniface_256", "family": "uniface_256", "params_m": 87.6, "gmac": 238.3, "file_mb": 350, "quiet_ms": 2000.0,
             "loaded_ms": 3900.0, "layers": "estimate: StyleGAN2-based", "estimate": True, "build_s": 3.0}]
    table = format_models_table(rows, settings).splitlines()
    assert table[0].split() == ["model", "family", "params", "GMAC", "file", "ms/face", "quiet", "ms/face,", "2", "busy", "layer", "list"]
    assert table[1].split()[:7] == ["ghost_2_256", "ghost_256", "184.3", "M", "31.0", "737", "MB"] and "480  " in table[1]
    assert table[2].endswith("estimate: StyleGAN2-based") and "median of 3 runs" in table[3] and "threads 2" in table[3]


def test_bench_refuses_unknown_models_in_one_line(assets: Path):
    base = ("bench", "--face", assets / "images" / "newton.png")
    one_clear_line(run_vcamd(*base, "--swapper", "ghost_9_256", timeout=30), "--swapper ghost_9_256")
    one_clear_line(run_vcamd(*base, "--enhancer", "gfpgan_9", timeout=30), "--enhancer gfpgan_9")


def test_bench_times_a_family_through_the_real_swapper(tmp_path: Path, assets: Path, monkeypatch):
    """The timing path end to end on DeepFaceLab's smallest stand-in (its layer list at 64², so the
    test stays quick): built, loaded by its family, run on the bench photo's real face, deleted."""
    from vcamd.bench import modeltimes

    monkeypatch.setattr(modeltimes, "DFM_BENCH_SIZE", 64)
    settings = BenchSettings(face=assets / "images" / "newton.png", detector=str(assets / "models" / "scrfd_500m_kps.onnx"),
                             width=1, height=1, fps=30, frames=30, inswapper_frames=30, providers=["cpu"], threads=1, fp16=False,
                             rounds=2, load=1)
    [row] = modeltimes.time_models(settings, tmp_path, modeltimes.swapper_models(["deepfacelab"]), [])
    assert row.family == "deepfacelab" and row.estimate and row.quiet_ms > 0 and row.loaded_ms is not None and row.loaded_ms > 0
    assert row.gmac == layerlists.family_layer_stats(SWAPPERS[-1].sized(64))[1] / 1e9
    assert list(tmp_path.glob("*.dfm")) == []  # deleted once timed
    assert modeltimes.swapper_models(["all"])[:4] == ["inswapper_128", "hyperswap_1a_256", "ghost_1_256", "ghost_2_256"]

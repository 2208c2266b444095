"""`vcamd.inference.precision`: the CPU's int8 units read honestly, and the one decision of what the swapper
runs at — with the runtime seam it takes effect through (`Sessions.run_copy`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vcamd.inference.fidelity import Verdict
from vcamd.inference.precision import CPU_PROVIDER, FLOAT, Int8Units, choose, int8_units, needs_reduced_range

X86_VNNI = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n\nprocessor\t: 1\nflags\t\t: fpu\n"
X86_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"
X86_AMX = "flags\t\t: avx2 avx_vnni amx_tile amx_int8 amx_bf16\n"
ARM_DOTPROD = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes asimddp sha512\nCPU implementer\t: 0x41\n"
ARM_PLAIN = "processor\t: 0\nFeatures\t: fp asimd evtstrm\n"

PASSED = Verdict(True, "8 faces: PSNR ≥ 41.0 dB")
FAILED = Verdict(False, "failed on 8 faces: PSNR 12.0 dB < 35 dB")


def test_the_int8_units_are_read_from_cpuinfo_flags_and_features():
    assert int8_units(X86_VNNI, "x86_64", "Linux") == Int8Units(("avx512_vnni",))
    assert int8_units(X86_AMX, "x86_64", "Linux").features == ("avx_vnni", "amx_int8")
    assert int8_units(ARM_DOTPROD, "aarch64", "Linux").features == ("dotprod",)
    for none in (X86_AVX2, ARM_PLAIN):
        units = int8_units(none, "x86_64", "Linux")
        assert units.known and not units.present and units.describe().startswith("none")


def test_a_cpu_that_cannot_be_read_is_unknown_never_a_guess():
    assert not int8_units("processor\t: 0\nvendor_id\t: ?\n", "x86_64", "Linux").known  # no flags line at all
    windows = int8_units(None, "AMD64", "Windows")
    assert not windows.known and not windows.present and windows.describe().startswith("unknown")


def test_the_machine_running_the_tests_reads_as_something():
    units = int8_units()
    assert units.known or units.describe().startswith("unknown")
    if Path("/proc/cpuinfo").is_file() and "avx512_vnni" in Path("/proc/cpuinfo").read_text().split("\n\n")[0]:
        assert "avx512_vnni" in units.features


def test_float_is_float_and_a_gpu_keeps_its_float_path():
    units = Int8Units(("avx512_vnni",))
    assert choose("float", CPU_PROVIDER, units, PASSED, Path("copy.onnx")) == FLOAT
    for setting in ("auto", "int8"):
        gpu = choose(setting, "CUDAExecutionProvider", units, PASSED, Path("copy.onnx"))
        assert gpu.runs == "float" and not gpu.build and "CUDAExecutionProvider" in gpu.why


def test_a_swapper_on_the_triton_server_runs_as_served_never_an_int8_copy_here():
    units, copy = Int8Units(("avx512_vnni",)), Path("copy.onnx")
    for setting in ("auto", "int8"):
        served = choose(setting, CPU_PROVIDER, units, PASSED, copy, server="grpc://gpu-box:8001")
        assert served.runs == "float" and not served.build and served.copy is None and "grpc://gpu-box:8001" in served.why
    assert choose("float", CPU_PROVIDER, units, PASSED, copy, server="grpc://gpu-box:8001") == FLOAT


def test_auto_wants_the_int8_units_and_int8_does_not():
    copy = Path("copy.onnx")
    assert choose("auto", CPU_PROVIDER, Int8Units(("avx512_vnni",)), PASSED, copy).runs == "int8"
    without = choose("auto", CPU_PROVIDER, Int8Units(()), PASSED, copy)
    assert without.runs == "float" and not without.build and "no int8 dot-product" in without.why
    unknown = choose("auto", CPU_PROVIDER, Int8Units((), known=False), PASSED, copy)
    assert unknown.runs == "float" and "unknown" in unknown.why
    forced = choose("int8", CPU_PROVIDER, Int8Units(()), PASSED, copy)
    assert forced.runs == "int8" and forced.copy == copy and forced.verdict == PASSED


def test_not_built_yet_serves_float_and_asks_for_a_build_and_a_failed_check_never_runs_int8():
    units = Int8Units(("dotprod",))
    building = choose("auto", CPU_PROVIDER, units, None, None)
    assert building.runs == "float" and building.build and "being built" in building.why
    for setting in ("auto", "int8"):
        failed = choose(setting, CPU_PROVIDER, units, FAILED, None)
        assert failed.runs == "float" and not failed.build and failed.failed_check
        assert "failed the fidelity check" in failed.why and "PSNR 12.0 dB" in failed.why
    now = building.now_int8(Path("c.onnx"), PASSED)
    assert now.runs == "int8" and not now.build and now.copy == Path("c.onnx") and "PSNR ≥ 41.0 dB" in now.why


def test_seven_bit_weights_only_on_x86_known_to_lack_vnni(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert needs_reduced_range(Int8Units(()))
    assert not needs_reduced_range(Int8Units(("avx512_vnni",)))
    assert not needs_reduced_range(Int8Units((), known=False))
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert not needs_reduced_range(Int8Units(()))


# ---- the runtime seam: a model's sessions run its copy -------------------------------------------


def test_a_models_sessions_run_its_copy_and_a_copy_that_does_not_load_leaves_the_model(tmp_path):
    from vcamd.bench.standins import build_identity_swapper, build_swapper
    from vcamd.inference.runtime import Sessions

    model = build_swapper(tmp_path / "swapper.onnx")
    copy = build_identity_swapper(tmp_path / "copy.onnx")  # recognisably another graph
    feeds = {"target": np.full((1, 3, 128, 128), 0.25, np.float32), "source": np.full((1, 512), 1 / np.sqrt(512), np.float32)}

    sessions = Sessions(["cpu"], 1)
    sessions.run_copy(model, copy)
    out = sessions.get(model).run(None, feeds)[0]
    assert sessions.runs_copy(model) and np.allclose(out, 0.25)  # the copy ran: the identity
    assert sessions.active_providers() == {"swapper.onnx": CPU_PROVIDER}  # reported under the model's own name

    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    sessions = Sessions(["cpu"], 1)
    sessions.run_copy(model, broken)
    out = sessions.get(model).run(None, feeds)[0]
    assert not sessions.runs_copy(model) and not np.allclose(out, 0.25)  # the model itself serves

    sessions = Sessions(["cpu"], 1)
    float_session = sessions.get(model, background=True)
    switched = sessions.copy_session(model, copy, background=True)
    assert switched is not float_session and sessions.runs_copy(model)
    assert sessions.get(model, background=True) is switched  # the float session is no longer kept
    assert np.allclose(switched.run(None, feeds)[0], 0.25)
    with pytest.raises(Exception, match="broken.onnx"):
        Sessions(["cpu"], 1).copy_session(model, broken)


# ---- [models] precision ------------------------------------------------------------------------------


def test_models_precision_is_auto_float_or_int8_and_a_change_rebuilds_the_pipeline():
    from vcamd.common.errors import ConfigError
    from vcamd.config.reading import config_from_dict
    from vcamd.config.schema import Config
    from vcamd.live.reconfigure import TABLE, Apply, plan

    assert Config().models.precision == "auto"
    for value in ("auto", "float", "int8"):
        assert config_from_dict({"models": {"precision": value}}).models.precision == value
    with pytest.raises(ConfigError) as refused:
        config_from_dict({"models": {"precision": "fp16"}})
    assert "precision" in str(refused.value) and "int8" in str(refused.value)
    assert TABLE["models"]["precision"].apply is Apply.rebuild
    assert plan(Config(), config_from_dict({"models": {"precision": "float"}})).rebuild == {"models.precision"}


def test_a_swapper_family_without_an_int8_copy_runs_float_and_says_why(tmp_path, assets):
    """Only inswapper's int8 copy is calibrated and checked (`INT8_FAMILIES`): another family asked for
    int8 builds none and says why, and `vcamd models quantize` refuses it with the same reason."""
    from vcamd.bench.families import build_family_swapper
    from vcamd.bench.standins import build_recognizer
    from vcamd.common.errors import ModelError
    from vcamd.config.reading import config_from_dict
    from vcamd.faces.specs import family_named
    from vcamd.models.int8roles import swapper_spec
    from vcamd.models.pipeline import build_face_engine

    hyperswap = build_family_swapper(tmp_path / "hyperswap_1a_256.onnx", family_named("hyperswap_256"))
    cfg = config_from_dict({
        "models": {"detector": str(assets / "models" / "scrfd_500m_kps.onnx"), "recognizer": str(build_recognizer(tmp_path / "r.onnx")),
                   "swapper": str(hyperswap), "providers": ["cpu"], "threads": 1, "precision": "int8"},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
    })
    engine = build_face_engine(cfg)
    assert engine.swapper.spec.family == "hyperswap_256"
    assert engine.precision.runs == "float" and not engine.precision.build
    assert engine.precision.why == "int8 copies are made for inswapper_128 only so far: the hyperswap_256 swapper runs in float"

    blendswap = build_family_swapper(tmp_path / "blendswap_256.onnx", family_named("blendswap_256"))
    with pytest.raises(ModelError, match=r"blendswap_256\.onnx: int8 copies are made for inswapper_128 only so far"):
        swapper_spec(blendswap)

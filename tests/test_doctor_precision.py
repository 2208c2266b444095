"""`vcamd doctor`'s precision row: the CPU's int8 units, and what the swapper runs at — its checked
int8 copy, float because the copy failed its check (worth knowing), not built yet, or what a
running daemon says."""

from __future__ import annotations

from pathlib import Path

import pytest

from vcamd import doctor
from vcamd.config.schema import Config
from vcamd.doctor import Status
from vcamd.inference import modelhashes
from vcamd.inference.fidelity import Verdict


@pytest.fixture
def swapper(tmp_path, monkeypatch) -> Path:
    from vcamd.bench.standins import build_swapper

    monkeypatch.setenv("VCAMD_CACHE_DIR", str(tmp_path / "cache"))
    return build_swapper(tmp_path / "swapper.onnx")


def _config(swapper: Path, precision: str = "int8", providers: tuple[str, ...] = ("cpu",)) -> Config:
    return Config.model_validate({"models": {"swapper": str(swapper), "providers": list(providers), "precision": precision}})


def _keep(swapper: Path, passed: bool) -> Path:
    """A kept verdict (and copy) for `swapper`, as a build leaves it."""
    from vcamd.inference import int8cache
    from vcamd.inference.int8recipes import build_key
    from vcamd.inference.precision import int8_units, needs_reduced_range

    entry = int8cache.Entry(modelhashes.sha256_of(swapper), build_key(needs_reduced_range(int8_units())))
    built = swapper.with_name("built.onnx")
    built.write_bytes(swapper.read_bytes())
    summary = "8 faces: PSNR ≥ 44.0 dB (needs 35)" if passed else "failed on 8 faces: PSNR 9.0 dB < 35 dB"
    int8cache.record(entry, passed, summary, {}, built if passed else None)
    return entry.model


def test_not_built_yet_says_when_it_will_be(swapper):
    result = doctor.check_precision(_config(swapper))
    assert result.status is Status.ok and 'precision = "int8"' in result.detail and "int8 dot-product units" in result.detail
    assert "built in the background on the first `vcamd run`" in result.detail and "vcamd models quantize" in result.detail


def test_a_checked_copy_runs_and_a_failed_one_is_worth_knowing(swapper):
    _keep(swapper, passed=True)
    result = doctor.check_precision(_config(swapper))
    assert result.status is Status.ok and "runs its int8 copy" in result.detail and "PSNR ≥ 44.0 dB" in result.detail
    _keep(swapper, passed=False)
    result = doctor.check_precision(_config(swapper))
    assert result.status is Status.warn and "runs in float" in result.detail and "PSNR 9.0 dB < 35 dB" in result.detail
    assert "--again" in result.fix


def test_float_asked_for_and_the_running_daemons_word(swapper):
    result = doctor.check_precision(_config(swapper, precision="float"))
    assert result.status is Status.ok and "runs in float" in result.detail
    running = {"precision": {"swapper": "int8"}, "precision_why": {"swapper": "int8 copy checked against float: 8 faces"}}
    result = doctor.check_precision(_config(swapper), running)
    assert result.status is Status.ok and "the running daemon's swapper runs in int8" in result.detail


def test_a_missing_swapper_leaves_the_decision_for_later(tmp_path, monkeypatch):
    monkeypatch.setenv("VCAMD_CACHE_DIR", str(tmp_path / "cache"))
    result = doctor.check_precision(_config(tmp_path / "missing.onnx"))
    assert result.status is Status.ok and "decided once it can load" in result.detail


def test_a_swapper_on_the_triton_server_is_not_looked_up_here(swapper):
    """`[models] server`: the swapper runs there as served, even where a checked copy is kept here
    (for `fallback = "local"`'s file), and a swapper that exists only there is no error."""
    _keep(swapper, passed=True)
    for name in (str(swapper), "/only/on/the/server/swapper.onnx"):
        cfg = Config.model_validate({"models": {"swapper": name, "providers": ["cpu"], "precision": "int8",
                                                "server": "grpc://gpu-box:8001"}})
        result = doctor.check_precision(cfg)
        assert result.status is Status.ok and "runs in float" in result.detail and "Triton server at grpc://gpu-box:8001" in result.detail


def test_the_doctor_lists_the_precision_row(swapper, monkeypatch):
    names = [r.name for r in doctor.run_checks(None)]
    assert "precision" in names and names.index("precision") == names.index("ONNX Runtime providers") + 1


def test_a_verdict_round_trips_through_the_cache(swapper):
    from vcamd.inference import int8cache
    from vcamd.inference.int8recipes import build_key
    from vcamd.inference.precision import int8_units, needs_reduced_range

    copy = _keep(swapper, passed=True)
    kept = int8cache.lookup(swapper, build_key(needs_reduced_range(int8_units())))
    assert kept is not None and kept.verdict == Verdict(True, "8 faces: PSNR ≥ 44.0 dB (needs 35)") and kept.model == copy
    copy.write_bytes(b"cut short")  # a copy whose size no longer matches its verdict is no copy
    assert int8cache.lookup(swapper, build_key(needs_reduced_range(int8_units()))) is None


def test_the_enhancer_and_the_parser_each_get_their_words(tmp_path, swapper):
    """Per role: the enhancer's kept copy runs, the parser's failed check is worth knowing (and names it)."""
    from vcamd.bench.int8standins import build_conv_parser, build_residual_enhancer
    from vcamd.inference import int8cache
    from vcamd.inference.int8recipes import build_key
    from vcamd.inference.precision import int8_units, needs_reduced_range

    enhancer, parser = build_residual_enhancer(tmp_path / "enhancer.onnx"), build_conv_parser(tmp_path / "parser.onnx")
    for model, role, passed in ((enhancer, "enhancer", True), (parser, "parser", False)):
        entry = int8cache.Entry(modelhashes.sha256_of(model), build_key(needs_reduced_range(int8_units()), role))
        built = model.with_name(f"built-{role}.onnx")
        built.write_bytes(model.read_bytes())
        int8cache.record(entry, passed, "8 faces: PSNR ≥ 44.0 dB (needs 35)" if passed else "failed on 8 faces: 3.7 % of the face changes class",
                         {}, built if passed else None)
    cfg = Config.model_validate({"models": {"swapper": str(swapper), "enhancer": str(enhancer), "parser": str(parser), "providers": ["cpu"],
                                            "precision": "int8"}, "enhancer": {"enabled": True}})
    result = doctor.check_precision(cfg)
    assert result.status is Status.warn and "parser" in result.fix
    assert "the enhancer enhancer.onnx runs its int8 copy (int8 copy checked against float: 8 faces: PSNR ≥ 44.0 dB" in result.detail
    assert "the parser parser.onnx runs in float: its int8 copy failed the fidelity check (failed on 8 faces: 3.7 %" in result.detail
    assert "the swapper swapper.onnx: its int8 copy is built in the background" in result.detail
    running = {"precision": {"swapper": "int8", "enhancer": "int8", "parser": "float"}, "precision_why": {"parser": "its int8 copy failed"}}
    said = doctor.check_precision(cfg, running).detail
    assert "the running daemon's enhancer runs in int8" in said and "the running daemon's parser runs in float (its int8 copy failed)" in said

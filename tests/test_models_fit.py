"""Configured models that each fit their role but not each other: a 128-d recognizer
(mobilefacenet) with a swapper that starts from 512-d ArcFace. `vcamd config check` and
`vcamd doctor` say so in one line naming both models and the fix, before `vcamd swap` fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from vcamd import doctor
from vcamd.config.schema import Config
from vcamd.doctor import Status
from vcamd.models.modelcheck import identity_fit

MISFIT = ("[models] recognizer mobilefacenet.onnx gives 128-d face embeddings, but the swapper {swapper} "
          "(inswapper_128) takes 512-d ones: every swap would fail")
FIX = "set [models] recognizer to buffalo_l (ArcFace w600k_r50, 512-d; `vcamd models pull buffalo_l`, or by hand as `vcamd models list` says)"


@pytest.fixture(scope="module")
def models(models_dir: Path, standin_dir: Path) -> dict[str, Path]:
    return {"detector": models_dir / "scrfd_500m_kps.onnx", "recognizer": models_dir / "mobilefacenet.onnx",
            "arcface": standin_dir / "w600k_standin.onnx", "swapper": standin_dir / "inswapper_128.onnx"}


@pytest.mark.parametrize("swapper", ["inswapper_128.onnx", "inswapper_128_fp16.onnx", "inswapper_128_batched.onnx"])
def test_a_128d_recognizer_does_not_fit_a_512d_swapper(models, standin_dir, swapper):
    misfit = identity_fit(models["recognizer"], standin_dir / swapper)
    assert misfit is not None and (misfit.message, misfit.fix) == (MISFIT.format(swapper=swapper), FIX)
    assert identity_fit(models["arcface"], standin_dir / swapper) is None


def test_models_in_the_wrong_role_are_left_to_the_role_checks(models):
    assert identity_fit(models["detector"], models["swapper"]) is None  # not a recognizer: its own row says so
    assert identity_fit(models["recognizer"], models["detector"]) is None  # not a swapper: likewise


def _config_file(tmp_path: Path, models: dict[str, Path], recognizer: str) -> Path:
    path = tmp_path / f"{recognizer}.toml"
    chosen = {role: str(models[role]) for role in ("detector", "swapper")} | {"recognizer": str(models[recognizer])}
    path.write_text(tomli_w.dumps({"models": {**chosen, "providers": ["cpu"]}}))
    return path


def _vcamd(*args: object, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vcamd", *map(str, args)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")})


def test_config_check_says_the_recognizer_does_not_fit_the_swapper(models, tmp_path):
    misfit = _config_file(tmp_path, models, "recognizer")
    result = _vcamd("config", "check", misfit, tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout.strip().splitlines() == [f"{misfit}: {MISFIT.format(swapper='inswapper_128.onnx')} — {FIX}"]
    fine = _config_file(tmp_path, models, "arcface")
    result = _vcamd("config", "check", fine, tmp_path=tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, f"{fine}: OK"), result.stdout + result.stderr


def test_doctor_says_the_recognizer_does_not_fit_the_swapper(models, tmp_path):
    cfg = Config.model_validate({"models": {role: str(models[role]) for role in ("detector", "recognizer", "swapper")}})
    result = doctor.check_models_fit(cfg)
    assert result is not None and result.status is Status.fail
    assert (result.name, result.detail, result.fix) == ("models fit", MISFIT.format(swapper="inswapper_128.onnx"), FIX)
    assert all(r.status is Status.ok for r in doctor.check_models(cfg))  # each fits its role: only the pair does not
    fits = Config.model_validate({"models": {role: str(models[key]) for role, key in
                                             (("detector", "detector"), ("recognizer", "arcface"), ("swapper", "swapper"))}})
    assert doctor.check_models_fit(fits) is None
    # The command itself: the row, failed, and doctor's exit status 1.
    report = _vcamd("doctor", "--config", _config_file(tmp_path, models, "recognizer"), tmp_path=tmp_path)
    assert report.returncode == 1
    assert f"✗ models fit: {MISFIT.format(swapper='inswapper_128.onnx')}\n    fix: {FIX}" in report.stdout, report.stdout

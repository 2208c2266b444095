"""Bad input through the real CLI (`python -m vcamd` as a subprocess): one `vcamd: error:` line
that names the file, a non-zero exit, and never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest


def write_config(tmp_path: Path, assets: Path, extra: str = "") -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[models]\ndir = "{tmp_path / "models"}"\ndetector = "{assets / "models" / "scrfd_500m_kps.onnx"}"\n'
        'providers = ["cpu"]\nthreads = 1\n' + extra
    )
    return config


@pytest.mark.parametrize("kind", ["zero-size", "not-an-image", "huge-header", "animated", "folder", "missing"])
def test_faces_refuses_bad_photos(tmp_path: Path, assets: Path, vcamd_cli, refused, bad_images, kind: str) -> None:
    path = bad_images[kind]
    result = vcamd_cli("faces", path, "--config", write_config(tmp_path, assets))
    refused(result, str(path))


def test_faces_works_on_a_real_photo(tmp_path: Path, assets: Path, vcamd_cli) -> None:
    result = vcamd_cli("faces", assets / "images" / "newton.png", "--config", write_config(tmp_path, assets), "--json")
    assert result.returncode == 0, result.stderr
    assert '"faces"' in result.stdout
    # The provider report is the daemon's log line, not part of a one-shot command's output; -v shows it.
    assert "runs on" not in result.stderr, result.stderr
    verbose = vcamd_cli("-v", "faces", assets / "images" / "newton.png", "--config", write_config(tmp_path, assets), "--json")
    assert "scrfd_500m_kps.onnx runs on CPUExecutionProvider" in verbose.stderr


@pytest.mark.parametrize("corruption", ["truncated", "text"])
def test_faces_refuses_a_corrupt_detector(tmp_path: Path, assets: Path, vcamd_cli, refused, corruption: str) -> None:
    model = tmp_path / "det.onnx"
    real = (assets / "models" / "scrfd_500m_kps.onnx").read_bytes()
    model.write_bytes(real[: len(real) // 3] if corruption == "truncated" else b"not a model")
    config = tmp_path / "config.toml"
    config.write_text(f'[models]\ndetector = "{model}"\nproviders = ["cpu"]\n')
    result = vcamd_cli("faces", assets / "images" / "newton.png", "--config", config)
    refused(result, "det.onnx")


def test_models_verify_reports_a_hash_mismatch(tmp_path: Path, vcamd_cli, refused) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "inswapper_128_fp16.onnx").write_bytes(b"\0" * 4096)  # a file that is not the published one
    config = tmp_path / "config.toml"
    config.write_text(f'[models]\ndir = "{models}"\n')
    result = vcamd_cli("models", "verify", "inswapper_128_fp16", "--config", config)
    line = refused(result, "inswapper_128_fp16.onnx")
    assert "mismatch" in line.lower()
    assert "MISMATCH" in result.stdout


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("[camera\nfps = 30\n", "config.toml"),
        ("[camera]\nfps = -1\n", "fps"),
        ("[swap]\nsource_face = \"~nosuchuser_h8/face.png\"\n", "source_face"),
        ("a = " + "[" * 3000 + "]" * 3000 + "\n", "config.toml"),
    ],
    ids=["invalid-toml", "bad-value", "tilde-unknown-user", "deep-nesting"],
)
def test_broken_config_is_one_line(tmp_path: Path, assets: Path, vcamd_cli, refused, text: str, name: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text)
    result = vcamd_cli("faces", assets / "images" / "newton.png", "--config", config)
    refused(result, name)

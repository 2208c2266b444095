"""Config files the CLI tests run `vcamd` with: real SCRFD, stand-in models."""

from __future__ import annotations

from pathlib import Path


def daemon_config(tmp_path: Path, assets: Path, standin_dir: Path, source_face: Path | None = None, extra: str = "") -> Path:
    """A config for `vcamd run` / `swap`: the real SCRFD-500M, the stand-in models of `standin_dir`, no tray."""
    face = source_face or assets / "images" / "newton.png"
    config = tmp_path / "config.toml"
    config.write_text(
        f"""
[models]
dir = "{tmp_path / 'models'}"
detector = "{assets / 'models' / 'scrfd_500m_kps.onnx'}"
recognizer = "{standin_dir / 'recognizer.onnx'}"
swapper = "{standin_dir / 'swapper.onnx'}"
enhancer = "{standin_dir / 'enhancer.onnx'}"
providers = ["cpu"]
threads = 1

[detection]
size = 320
track_size = 128

[swap]
source_face = "{face}"
source_consent = true

[preview]
port = 0

[tray]
enabled = false
{extra}
"""
    )
    return config


def swap_config(folder: Path, standins, *, consent: bool = True, badge: bool = True) -> Path:  # type: ignore[no-untyped-def]
    """A config for `vcamd swap` with the stand-in models (`standins` fixture), in `folder`."""
    path = folder / "config.toml"
    path.write_text(
        f"""
[models]
detector = "{standins.detector}"
recognizer = "{standins.recognizer}"
swapper = "{standins.swapper}"
enhancer = "{standins.enhancer}"
providers = ["cpu"]
threads = 1

[swap]
source_consent = {str(consent).lower()}

[disclosure]
badge = {str(badge).lower()}
corner = "bottom-right"
""",
        encoding="utf-8",
    )
    return path

"""A real Triton server (`vcamd serve`, PyTriton on 127.0.0.1) serving stand-in models with the
production signatures, started once per test module (`support.triton`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from support.triton import TritonProcess

from vcamd.config.reading import config_from_dict
from vcamd.config.schema import Config


@dataclass(frozen=True)
class ServedFiles:
    swapper: Path
    enhancer: Path
    parser: Path
    detector: Path
    recognizer: Path
    folder: Path

    def config(self, **models: object) -> Config:
        """A client (or server) config naming these files, with `models` overriding [models] keys."""
        data = {"models": {"detector": str(self.detector), "recognizer": str(self.recognizer), "swapper": str(self.swapper), "enhancer": str(self.enhancer), "parser": str(self.parser),
                           "providers": ["cpu"], "threads": 1, **models},
                "enhancer": {"enabled": True}}
        return config_from_dict(data, "remote-test")


@pytest.fixture(scope="session")
def served_files(tmp_path_factory: pytest.TempPathFactory, assets: Path) -> ServedFiles:
    """Light stand-ins with the production signatures (the detector: the real small SCRFD)."""
    from vcamd.bench.standins import build_enhancer, build_parser, build_recognizer, build_swapper

    folder = tmp_path_factory.mktemp("served")
    return ServedFiles(build_swapper(folder / "swapper.onnx"), build_enhancer(folder / "enhancer.onnx"),
                       build_parser(folder / "parser.onnx"), assets / "models" / "scrfd_500m_kps.onnx",
                       build_recognizer(folder / "recognizer.onnx"), folder)


def write_server_config(files: ServedFiles, path: Path) -> Path:
    path.write_text(
        f'[models]\nswapper = "{files.swapper}"\nenhancer = "{files.enhancer}"\nparser = "{files.parser}"\n'
        'providers = ["cpu"]\nthreads = 1\n\n[enhancer]\nenabled = true\n'
    )
    return path


@pytest.fixture(scope="module")
def triton(served_files: ServedFiles, tmp_path_factory: pytest.TempPathFactory):
    """One `vcamd serve` on loopback for the module's tests (swapper, its .emap, enhancer, parser)."""
    folder = tmp_path_factory.mktemp("triton")
    server = TritonProcess(write_server_config(served_files, folder / "server.toml"), "--queue-delay-us", "2000",
                           log=folder / "serve.log").start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()

"""A real Triton Inference Server (`vcamd serve`) for the tests: `vcamd.bench.serving`'s
process, from the server's own environment (`.venv-serve`, or `$VCAMD_SERVE_VENV`). Without one
the tests that need a server skip; with `VCAMD_REQUIRE_TRITON=1` (`.ci/run`) they fail instead."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from vcamd.bench.serving import ServerProcess, free_port, serve_venv

__all__ = ["TritonProcess", "free_port"]


def require_serve_venv() -> Path:
    folder = serve_venv()
    if folder is None:
        reason = ("no environment for `vcamd serve` (.venv-serve or $VCAMD_SERVE_VENV): make it with "
                  "`python3 -m venv .venv-serve && .venv-serve/bin/pip install -e '.[serve]'`")
        if os.environ.get("VCAMD_REQUIRE_TRITON") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return folder


class TritonProcess(ServerProcess):
    """`ServerProcess`, skipping the test (or failing it under `VCAMD_REQUIRE_TRITON=1`) without the server's environment."""

    def __init__(self, config: Path, *extra: str, port: int | None = None, log: Path, prefix: Sequence[str] = ()) -> None:
        require_serve_venv()
        super().__init__(config, *extra, port=port, log=log, prefix=prefix)

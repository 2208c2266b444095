"""Files shipped inside the package under vcamd/data/service/ (symlinks to the repository's service/)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from vcamd.common.errors import VcamdError


def packaged_text(name: str) -> str:
    """The text of a file of vcamd/data/service/; a missing one is a broken install."""
    resource = resources.files("vcamd").joinpath("data", "service", name)
    try:
        return resource.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise VcamdError(
            f"packaged service file {name} is missing from vcamd/data/service",
            fix="reinstall vcamd (pip install --force-reinstall vcamd)",
        ) from None


def packaged_path(name: str) -> Path:
    """A real file path for a packaged file (what the printed `sudo cp` commands copy)."""
    resource = resources.files("vcamd").joinpath("data", "service", name)
    return Path(str(resource)).resolve()

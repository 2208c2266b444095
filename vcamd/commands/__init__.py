"""One module per group of subcommands; see vcamd.cli."""

import argparse
import os
from pathlib import Path
from typing import TypeAlias

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What `vcamd.cli` hands each module's `register` (argparse's class is generic only to the checker)."""


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="settings file (default: the user config file, e.g. ~/.config/facelive/config.toml)",
    )


def check_output_file(path: Path, flag: str) -> None:
    """Refuse, before a long run, an output file that cannot be written at its end."""
    from vcamd.common.errors import VcamdError

    if path.is_dir():
        raise VcamdError(f"{flag} {path} is a folder", fix=f"give a file name, e.g. {flag} stats.json")
    folder = next((p for p in path.absolute().parents if p.exists()), None)
    if folder is None or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise VcamdError(f"{flag} {path} cannot be written (its folder is not writable)", fix="write it into a folder you can write to")

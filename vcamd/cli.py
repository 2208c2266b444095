"""`vcamd` command line: subcommands only, each a thin call into the modules that do the work.

Each module in `vcamd.commands` adds its own subparsers with `register(subparsers)` and keeps its
top-level imports light, so `vcamd status` does not pay for loading ONNX Runtime.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from vcamd import __version__
from vcamd.errors import VcamdError

COMMAND_MODULES = (
    "models",
    "faces",
    "swap",
    "run",
    "bench",
    "config",
    "control",
    "panel",
    "service",
    "doctor",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vcamd",
        description="FaceLive Camera: swap your face live and publish it as the 'FaceLive Camera' virtual camera.",
    )
    parser.add_argument("--version", action="version", version=f"vcamd {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"vcamd.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if not logging.getLogger().handlers:
        from vcamd.logs import setup_logging

        # stderr only; `vcamd run` re-does this with the config's level and the rotating log file.
        setup_logging("debug" if args.verbose else "info", to_file=False)
    try:
        return int(args.func(args) or 0)
    except VcamdError as err:
        print(f"vcamd: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130

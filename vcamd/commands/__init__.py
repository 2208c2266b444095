"""One module per group of subcommands; see vcamd.cli."""

import argparse
from pathlib import Path


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="settings file (default: the user config file, e.g. ~/.config/facelive/config.toml)",
    )

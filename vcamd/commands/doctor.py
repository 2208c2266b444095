"""`vcamd doctor`: check packages, ONNX Runtime, models, camera, virtual camera, tray, config, daemon."""

from __future__ import annotations

import argparse
import sys

from vcamd.commands import Subcommands, add_config_option


def register(subparsers: Subcommands) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check the environment (packages, GPU, models, camera, virtual camera, tray, config) and say how to fix it",
        description="Prints each check with ✓ (ok), ! (warning) or ✗ (problem) and the fix. "
        "Exits 0 when nothing is ✗, 1 otherwise.",
    )
    add_config_option(parser)
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from vcamd.doctor import exit_code, report, run_checks

    results = run_checks(args.config)
    print(report(results, sys.stdout.encoding))
    return exit_code(results)

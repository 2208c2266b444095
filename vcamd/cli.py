"""`vcamd` command line: subcommands only, each a thin call into the modules that do the work.

Each module in `vcamd.commands` adds its own subparsers with `register(subparsers)` and keeps its
top-level imports light, so `vcamd status` does not pay for loading ONNX Runtime.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from vcamd import __version__
from vcamd.common import stopping
from vcamd.common.errors import VcamdError

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
    "serve",
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
    """Run the command line (`argv`, default: the process's own) and return its exit code.

    A command that sets `leave_process=True` (the daemon, `vcamd run`) ends the process itself when
    `main` is the process's entry point (argv None): see `leave_process`. As the entry point it
    also makes SIGTERM a clean stop from its first line (`vcamd.common.stopping`)."""
    if argv is None:
        stopping.install()
    try:
        return _main(argv)
    except stopping.Stopped:
        # SIGTERM before the command had a handler of its own (or while parsing): nothing is half
        # done that its unwinding did not remove.
        code = stopping.stopped(sys.argv[1:] if argv is None else argv)
        if argv is None:
            leave_process(code)
        return code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if not logging.getLogger().handlers:
        from vcamd.system.logs import setup_logging

        # stderr only; `vcamd run` re-does this with the config's level and the rotating log file.
        setup_logging("debug" if args.verbose else "info", to_file=False)
    _report_providers(daemon=getattr(args, "leave_process", False), verbose=args.verbose)
    try:
        code = int(args.func(args) or 0)
    except VcamdError as err:
        print(f"vcamd: error: {err}", file=sys.stderr)
        code = err.exit_code
    except KeyboardInterrupt:
        code = 130
    if argv is None and getattr(args, "leave_process", False):
        leave_process(code)
    return code


def _report_providers(*, daemon: bool, verbose: bool) -> None:
    """'<model> runs on <provider>' belongs in the daemon's log; before a one-shot command's own
    output (`doctor`, `config check`, `faces`, `swap`) it is noise, so those show it with -v only.
    Set on every call: a process may run one command after another (the tests do)."""
    from vcamd.inference.runtime import PROVIDER_REPORT_LOGGER

    logging.getLogger(PROVIDER_REPORT_LOGGER).setLevel(logging.NOTSET if daemon or verbose else logging.WARNING)


def leave_process(code: int) -> None:
    """End the process now with `code`, once logs and stdio are flushed, skipping interpreter teardown.

    Why: the daemon's helper threads may still be inside native code when it stops (a camera read
    in OpenCV that the driver holds up, a PNG encode for a control client, an ONNX Runtime run).
    CPython's teardown ends such daemon threads with pthread_exit when they try to take the GIL
    back; its forced unwind through C++ frames calls std::terminate ("terminate called without an
    active exception", SIGABRT, exit -6) and a service manager restarts a daemon the user quit.
    Everything that must be written (stats, the sink, the log) is written before this is called.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass  # a closed or broken stream: nothing more can be said there
    os._exit(code)

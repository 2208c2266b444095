"""`vcamd service install|uninstall|status`: start FaceLive Camera with the user's session."""

from __future__ import annotations

import argparse

from vcamd.commands import Subcommands


def register(subparsers: Subcommands) -> None:
    parser = subparsers.add_parser(
        "service",
        help="install, remove or show the start-up entry (systemd user unit, autostart, launchd, Startup folder)",
        description=(
            "Linux: `install` sets up the systemd user unit facelive.service (headless, no tray icon); "
            "`install --tray` sets up the desktop autostart entry instead (with the tray icon). "
            "macOS: a launch agent; Windows: a Startup-folder script. Loading v4l2loopback needs root: "
            "the command is printed, never run."
        ),
    )
    actions = parser.add_subparsers(dest="service_action", metavar="ACTION", required=True)
    install = actions.add_parser("install", help="install and start the start-up entry")
    install.add_argument(
        "--tray",
        action="store_true",
        help="Linux: start with the desktop session, with the tray icon (XDG autostart) instead of the systemd unit",
    )
    install.set_defaults(func=_install)
    uninstall = actions.add_parser("uninstall", help="stop and remove the start-up entry")
    uninstall.set_defaults(func=_uninstall)
    status = actions.add_parser("status", help="show what is installed and whether it runs; exit 1 when nothing is")
    status.set_defaults(func=_status)


def _install(args: argparse.Namespace) -> int:
    from vcamd.system import service

    mode = service.default_mode(args.tray)
    report = service.install(mode, service.ServicePaths.from_env(), service.daemon_command(tray=mode is not service.Mode.systemd))
    report.todo[:0] = _config_steps()
    print("\n".join(report.lines()))
    return 0


def _config_steps() -> list[str]:
    """What the user config must say for the started daemon to swap: the service runs `vcamd run`
    without --i-have-consent, reading only the user config file (without consent it runs with
    swapping off; with an invalid config it stops at once)."""
    from vcamd.common.errors import ConfigError
    from vcamd.config.folders import user_config_path
    from vcamd.config.reading import load_config

    path = user_config_path()
    try:
        cfg, _ = load_config()
    except ConfigError as err:
        return [f"fix {path} (the started daemon stops at once on an invalid config): {err}"]
    steps = []
    if not cfg.swap.source_consent:
        steps.append(f"set `source_consent = true` under [swap] in {path} once you have the consent of the person "
                     "in the source photo (`vcamd config init` creates the file): without it the started daemon runs with swapping off "
                     "and refuses `vcamd on`")
    return steps


def _uninstall(args: argparse.Namespace) -> int:
    from vcamd.system import service

    print("\n".join(service.uninstall(service.ServicePaths.from_env()).lines()))
    return 0


def _status(args: argparse.Namespace) -> int:
    from vcamd.system import service

    installed, lines = service.status(service.ServicePaths.from_env())
    print("\n".join(lines))
    return 0 if installed else 1

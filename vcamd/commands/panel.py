"""`vcamd panel`: open the running daemon's control page in the browser.

The browser is given a one-time login address (`?code=…`), never the page's token: a command line
(`xdg-open URL`, the browser's own) is readable by every local user. The code is asked of the
page with the token, which comes over the private control socket (`vcamd status`'s panel_token).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "panel",
        help="open the control page (live video, swap on/off, quality, source face) in the browser",
        description="Open the running daemon's control page in the web browser, with a one-time login "
        "address: it works once (and for two minutes), then it is worthless. Scripts use "
        "`Authorization: Bearer TOKEN` with the panel_token of `vcamd status --json`.",
    )
    parser.add_argument("--print", dest="print_only", action="store_true",
                        help="only print a one-time login address, do not start a browser")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import webbrowser

    from vcamd.control.client import ControlClient
    from vcamd.panel.login import one_time_url

    url = one_time_url(ControlClient().status())
    if args.print_only:
        print(url)
        return 0
    if not webbrowser.open(url):
        print(f"No web browser could be started; open this one-time address yourself:\n{url}")
        return 0
    print("Control page opened in the browser.")
    return 0

"""`vcamd panel`: open the running daemon's control page in the browser.

The browser is given a private file (0600, in the runtime folder) that moves on to a one-time login
address (`?code=…`): nothing secret is on a command line (`xdg-open FILE`, the browser's own), which
every local user can read — not the page's token, not even a one-time code, which another user
could otherwise redeem first. The code is asked of the page with the token, which comes over the
private control socket (`vcamd status`'s panel_token).
"""

from __future__ import annotations

import argparse

from vcamd.commands import Subcommands


def register(subparsers: Subcommands) -> None:
    parser = subparsers.add_parser(
        "panel",
        help="open the control page (live video, swap on/off, quality, source face) in the browser",
        description="Open the running daemon's control page in the web browser, logged in through a file only "
        "you can read that holds a one-time login address: it works once (and for two minutes), then it is "
        "worthless. Scripts use `Authorization: Bearer TOKEN` with the panel_token of `vcamd status --json`.",
    )
    parser.add_argument("--print", dest="print_only", action="store_true",
                        help="only print a one-time login address (to paste into a browser), do not start one")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import webbrowser

    from vcamd.control.client import ControlClient
    from vcamd.panel.login import login_page, one_time_url

    url = one_time_url(ControlClient().status())
    if args.print_only:
        print(url)
        return 0
    page = login_page(url)
    if not webbrowser.open(page.as_uri()):
        print(f"No web browser could be started; open this file in yours (it logs you in once, within two minutes):\n{page}")
        return 0
    print("Control page opened in the browser.")
    return 0

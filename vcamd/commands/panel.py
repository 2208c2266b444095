"""`vcamd panel`: open the running daemon's control page in the browser.

The page's address carries an access token that changes at every start, so it is asked of the
daemon (its status over the control socket gives `panel_url`) rather than bookmarked.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "panel",
        help="open the control page (live video, swap on/off, quality, source face) in the browser",
        description="Open the running daemon's control page in the web browser. The address includes "
        "an access token (new at every start): whoever has it can drive the camera, so do not share it.",
    )
    parser.add_argument("--print", dest="print_only", action="store_true",
                        help="only print the address (with its token), do not start a browser")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    import webbrowser

    from vcamd.control.client import ControlClient
    from vcamd.errors import VcamdError

    url = ControlClient().status().get("panel_url")
    if not url:
        raise VcamdError("the running daemon serves no control page ([panel] enabled = false)",
                         fix="set [panel] enabled = true in config.toml and restart `vcamd run`")
    if args.print_only:
        print(url)
        return 0
    if not webbrowser.open(url):
        print(f"No web browser could be started; open this address yourself:\n{url}")
        return 0
    print("Control page opened in the browser.")
    return 0

"""How a browser logs in to a local page (the control page, the preview) without a secret on any
command line: a one-time login address, asked of the page by a client that holds its token (`vcamd
panel`: the token travels in a request header over loopback), handed to the browser inside a page
only the user can read (`login_page`), never as an argument."""

from __future__ import annotations

import contextlib
import html
import http.client
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vcamd.common.errors import VcamdError
from vcamd.pages.security import CODE_TTL_S

ASK_TIMEOUT_S = 10.0


def one_time_url(status: dict[str, Any]) -> str:
    """From the daemon's status ("panel_url", "panel_token"): a `/?code=…` address that logs a browser in once."""
    base, token = status.get("panel_url"), status.get("panel_token")
    if not base or not token:
        raise VcamdError("the running daemon serves no control page ([panel] enabled = false)",
                         fix="set [panel] enabled = true in config.toml and restart `vcamd run`")
    where = urlsplit(str(base))
    conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port or 80, timeout=ASK_TIMEOUT_S)
    try:
        conn.request("POST", "/api/login-code", headers={"Authorization": f"Bearer {token}", "Content-Length": "0"})
        response = conn.getresponse()
        body = response.read()
    except OSError as exc:
        raise VcamdError(f"the control page at {base} does not answer ({exc})", fix="check `vcamd status`") from None
    finally:
        conn.close()
    try:
        url = json.loads(body)["url"] if response.status == 200 else None
    except (ValueError, KeyError, TypeError):
        url = None
    if not isinstance(url, str):
        raise VcamdError(f"the control page at {base} gave no login address (HTTP {response.status})",
                         fix="restart `vcamd run`")
    return url


LOGIN_PAGE_PREFIX = "login-"
LOGIN_PAGE_SUFFIX = ".html"


def login_page(url: str, folder: Path | None = None) -> Path:
    """A page only the user can read that sends the browser on to `url` (a one-time login address);
    open this file, never the address: what goes on a command line (`xdg-open FILE`, the browser's
    own) is readable by every local user in /proc/PID/cmdline, and so a code there could be used by
    them first. As Jupyter's `jpserver-PID-open.html`: the file is 0600 in the private runtime
    folder (default: `runtime_dir()`, where the control socket is); pages older than a code's life
    (worthless by then) are removed as a new one is written."""
    from vcamd.control.client import checked_runtime_dir
    from vcamd.control.protocol import runtime_dir
    from vcamd.files.private_files import write_private_atomic

    folder = checked_runtime_dir(folder if folder is not None else runtime_dir(), create=True)
    _remove_stale_login_pages(folder)
    page = folder / f"{LOGIN_PAGE_PREFIX}{os.getpid()}-{secrets.token_hex(6)}{LOGIN_PAGE_SUFFIX}"
    address = html.escape(url, quote=True)
    write_private_atomic(page, (
        '<!doctype html>\n<html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">\n'
        f'<meta http-equiv="refresh" content="0;url={address}">\n<title>FaceLive Camera</title></head>\n'
        f'<body><p><a href="{address}">Open the FaceLive Camera control page</a> (this link logs in once).</p></body></html>\n'
    ))
    return page


def _remove_stale_login_pages(folder: Path) -> None:
    now = time.time()
    for page in folder.glob(f"{LOGIN_PAGE_PREFIX}*{LOGIN_PAGE_SUFFIX}"):
        with contextlib.suppress(OSError):
            if now - page.lstat().st_mtime > CODE_TTL_S:
                page.unlink()

"""A one-time login address for the control page, asked of the page by a client that holds its
token (`vcamd panel`): the token travels in a request header over loopback, never on a command line."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

from vcamd.errors import VcamdError

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

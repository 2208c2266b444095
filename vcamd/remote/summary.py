"""The one line that says how the Triton server stands, from the status dict `ServerLink` reports
(`vcamd status`, `vcamd doctor` and the tray all show this line; the page says the same in JS).

Standard library only: the tray and the status command read it without loading tritonclient."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe_server(status: Mapping[str, Any]) -> str:
    """One line: the server, its state and round trip, the link's security, what it serves."""
    parts = [f"{status.get('url')} {status.get('state')}"]
    if isinstance(status.get("rtt_ms"), (int, float)):
        parts.append(f"{status['rtt_ms']:.1f} ms round trip")
    if isinstance(status.get("call_ms"), (int, float)):
        parts.append(f"{status['call_ms']:.1f} ms a call")
    parts.append("mutual TLS" if status.get("tls") else "loopback, plaintext")
    if status.get("serves"):
        parts.append("serves " + ", ".join(str(name) for name in status["serves"]))
    if status.get("state") != "up" and status.get("error"):
        parts.append(str(status["error"]))
    if status.get("fallback"):
        parts.append(f"fallback {status['fallback']}")
    return "; ".join(parts)

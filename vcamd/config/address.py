"""`[models] server`: where the Triton server is, and whether the way there stays on this machine.

Standard library only: `vcamd.config` validates the key with it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

SCHEME = "grpc"
DEFAULT_PORT = 8001
"""Triton's own gRPC port."""


@dataclass(frozen=True, slots=True)
class ServerAddress:
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> ServerAddress:
        """`grpc://HOST:PORT` (IPv6 in brackets); ValueError saying what is wrong."""
        text = url.strip()
        if "://" not in text:
            raise ValueError(f"{url!r} is not a server URL; write it as grpc://HOST:PORT, e.g. grpc://127.0.0.1:{DEFAULT_PORT}")
        parts = urlsplit(text)
        if parts.scheme != SCHEME:
            raise ValueError(f"{url!r}: only grpc:// (Triton's gRPC API) is supported, e.g. grpc://127.0.0.1:{DEFAULT_PORT}")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(f"{url!r}: a server URL is grpc://HOST:PORT, nothing more")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"{url!r}: the port must be a number from 1 to 65535") from None
        if not parts.hostname:
            raise ValueError(f"{url!r} names no host")
        return cls(parts.hostname, port or DEFAULT_PORT)

    @property
    def loopback(self) -> bool:
        """True when the address can only reach this machine (127.0.0.0/8, ::1, localhost)."""
        if self.host.lower() in ("localhost", "localhost.", "ip6-localhost"):
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def target(self) -> str:
        """host:port as gRPC takes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{SCHEME}://{self.target}"

    def __str__(self) -> str:
        return self.url

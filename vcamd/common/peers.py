"""Who is at the other end of a local connection, as the kernel says (never as the client says).

- A Unix socket: the peer's credentials from the kernel (`SO_PEERCRED` on Linux, `LOCAL_PEERCRED`
  on macOS and the BSDs), taken when the other end connected or listened. The control server
  asks it of every client, and the CLI asks it of the server before it sends anything.
- A loopback TCP connection (the control page, the preview): every local user can connect to
  127.0.0.1, so the owner of the client's socket is looked up in the kernel's socket table
  (`/proc/net/tcp` and `/proc/net/tcp6` on Linux) by the WHOLE connection: the client's address
  and port and ours, IPv4 and IPv6 alike (an IPv4 connection made from an IPv6 socket is listed
  there with IPv4-mapped addresses, `::ffff:127.0.0.1`). A lookup by port numbers alone took
  another user's socket bound to the owner's port on another loopback address (127.0.0.2, ::1)
  for the owner's. A connection the table does not list is nobody's: refused, not let through.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys
from collections.abc import Iterable
from typing import Any

PROC_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
TCP_TIME_WAIT = "06"
"""A closed connection's leftover in the table: owned by uid 0 whoever made it, so never matched."""
TCP_LISTEN = "0A"

_SOL_LOCAL = 0  # macOS / BSD: getsockopt level for LOCAL_PEERCRED (sys/un.h)
_LOCAL_PEERCRED = 0x001
_XUCRED = struct.Struct("=Ii")  # the start of struct xucred: cr_version, cr_uid


class PeerUnknown(OSError):
    """The kernel's socket table does not list the connection: whose it is cannot be told."""


def unix_peer_uid(conn: socket.socket) -> int | None:
    """The (effective) uid of the process at the other end of a Unix socket; None on a system
    that cannot tell (then the socket's file mode, 0600 in a private folder, is the only guard)."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return int(uid)
    if sys.platform == "darwin" or "bsd" in sys.platform:
        try:
            raw = conn.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, 256)
            _version, uid = _XUCRED.unpack_from(raw)
        except (OSError, struct.error):
            return None  # not run on these systems in CI: where it fails, the folder and file modes stand alone
        return int(uid)
    return None


Endpoint = tuple[ipaddress.IPv6Address, int]


def loopback_peer_uid(sock: socket.socket, tables: Iterable[str] = PROC_TCP_TABLES) -> int | None:
    """The uid owning the client end of an accepted TCP connection `sock`, from the kernel's socket
    table; None where this system has no such table (not Linux). Raises PeerUnknown when the
    tables exist but list no socket with exactly this connection's two ends."""
    try:
        ours = _endpoint(sock.getsockname())
        theirs = _endpoint(sock.getpeername())
    except OSError as exc:
        raise PeerUnknown(f"the connection is gone ({exc.strerror or exc})") from None
    readable = False
    for table in tables:
        try:
            with open(table, encoding="ascii") as lines:
                readable = True
                uid = _owner_in(lines, local=theirs, remote=ours)
        except (OSError, ValueError):
            continue
        if uid is not None:
            return uid
    if not readable:
        return None
    raise PeerUnknown("the kernel's socket table does not list this connection")


def _owner_in(lines: Iterable[str], *, local: Endpoint, remote: Endpoint) -> int | None:
    """The uid of the row whose local and remote ends are exactly these, in one /proc/net/tcp* table."""
    first = True
    for line in lines:
        if first:  # the header
            first = False
            continue
        # sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
        fields = line.split()
        if len(fields) < 8 or fields[3] in (TCP_TIME_WAIT, TCP_LISTEN):
            continue
        if _table_endpoint(fields[1]) == local and _table_endpoint(fields[2]) == remote:
            return int(fields[7])
    return None


def _endpoint(address: tuple[Any, ...]) -> Endpoint:
    """A socket address (IPv4 or IPv6) as an IPv6 address and port: IPv4 as ::ffff:a.b.c.d."""
    host, port = address[0], int(address[1])
    ip = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv4Address):
        ip = ipaddress.IPv6Address(f"::ffff:{ip}")
    return ip, port


def _table_endpoint(text: str) -> Endpoint:
    """`0100007F:1F90` (tcp) or 32 hex digits and a port (tcp6): each 32-bit word is printed as the
    kernel holds it in memory (host byte order), so it is packed back in native order."""
    address, _, port = text.partition(":")
    words = [int(address[i:i + 8], 16) for i in range(0, len(address), 8)]
    raw = b"".join(struct.pack("=I", word) for word in words)
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv4Address):
        ip = ipaddress.IPv6Address(f"::ffff:{ip}")
    return ip, int(port, 16)


"""Who may use the control page: the rules every request passes before it reaches the engine.

The page listens on 127.0.0.1 only, but any web page the user visits can make the browser send
requests there, and any local process can connect. So:

- **Token.** Every request carries the per-start random token: `Authorization: Bearer TOKEN`
  (scripts; they get it over the private control socket), or the HttpOnly SameSite=Strict cookie
  that holds it. The token never goes on a command line or into the environment: those are
  readable by every local user (`/proc/PID/cmdline`). The browser is given `/?code=CODE` instead,
  a one-time code (`PageAccess.one_time_code`) that the page exchanges once for the cookie and
  that is worthless afterwards (and after `CODE_TTL_S`), inside a 0600 file only the user can read
  (`vcamd.panel.login.login_page`), so no code is on a command line either. Compared in constant time.
  The exchange answers `LOGGED_IN_PAGE` (200, the cookie set) which moves on to "/" by itself:
  that visit starts on the page's own origin, so the SameSite=Strict cookie goes with it even when
  the login came from another site (the file:// page); a redirect (303) would have carried the
  login's cross-site origin along and the browser would have withheld the cookie.
- **Host.** The Host header must be `127.0.0.1:PORT` or `localhost:PORT`: a foreign name that
  resolves to 127.0.0.1 (DNS rebinding) would otherwise make our page same-origin with another site.
- **Origin (CSRF).** A change is a POST; a POST whose Origin is not this page's is refused. A POST
  without Origin is accepted only with the Bearer header (a script, not a browser form).
  Browsers send cookies to every port of 127.0.0.1 (cookies ignore ports, and "same-site" ignores
  them too), so the cookie alone proves nothing about which page sent the request.
- **Fetch metadata.** A request the browser marks `Sec-Fetch-Site: cross-site` or `same-site`
  (another page, e.g. on another local port) is refused, except a plain top-level navigation
  to the page (a link the user follows). Framing is forbidden by headers (no clickjacking).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie

LOOPBACK = "127.0.0.1"
COOKIE_PREFIX = "facelive_panel_"
CODE_TTL_S = 120.0
"""A one-time code not exchanged within this long is worthless (a browser cold start is seconds)."""
MAX_LIVE_CODES = 16
"""Codes minted and not yet used; the oldest is dropped past this (each `vcamd panel` mints one)."""

SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
}
"""Sent with every response: nothing cached, nothing framed, no token in a Referer, no inline code."""

LOGGED_IN_PAGE = (b'<!doctype html>\n<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/">'
                  b"<title>FaceLive Camera</title></head>\n"
                  b'<body><p>Logged in. <a href="/">Open the page</a>.</p></body></html>\n')
"""The answer to a redeemed one-time code, with the session cookie: a visit to "/" of its own."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is turned away: the HTTP status and a one-line message for the user."""

    status: HTTPStatus
    message: str


class PageAccess:
    """Who may use a local page (the control page, the preview): its per-start token and the
    one-time codes that let a browser in without the token ever being on a command line."""

    def __init__(self, clock=time.monotonic) -> None:
        self.token = secrets.token_urlsafe(32)
        self._clock = clock
        self._codes: dict[str, float] = {}  # code → when it stops being valid
        self._lock = threading.Lock()

    def one_time_code(self) -> str:
        """A new code for `/?code=CODE`: valid once, for CODE_TTL_S."""
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._forget_expired()
            while len(self._codes) >= MAX_LIVE_CODES:
                del self._codes[next(iter(self._codes))]
            self._codes[code] = self._clock() + CODE_TTL_S
        return code

    def redeem(self, given: str | None) -> bool:
        """True once for a live code, then never again for it."""
        if not given:
            return False
        with self._lock:
            self._forget_expired()
            for code in list(self._codes):
                if token_matches(given, code):
                    del self._codes[code]
                    return True
        return False

    def allows(self, headers: dict[str, str], port: int) -> bool:
        """Whether the request (lower-cased header names) carries the token, as Bearer or cookie."""
        given = bearer_token(headers.get("authorization"))
        if given is None:
            given = cookie_token(headers.get("cookie"), port)
        return token_matches(given, self.token)

    def _forget_expired(self) -> None:
        now = self._clock()
        for code in [c for c, until in self._codes.items() if until <= now]:
            del self._codes[code]


def cookie_name(port: int) -> str:
    """One cookie per port: a second daemon (or a restart on a new port) does not clobber it."""
    return f"{COOKIE_PREFIX}{port}"


def allowed_hosts(port: int) -> frozenset[str]:
    return frozenset({f"{LOOPBACK}:{port}", f"localhost:{port}"})


def allowed_origins(port: int) -> frozenset[str]:
    return frozenset(f"http://{host}" for host in allowed_hosts(port))


def token_matches(given: str | None, token: str) -> bool:
    """Constant-time comparison: the time taken says nothing about how much of a guess was right."""
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode("utf-8"))


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, else None."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


def cookie_token(cookie_header: str | None, port: int) -> str | None:
    if not cookie_header:
        return None
    jar = SimpleCookie()
    try:
        jar.load(cookie_header)
    except CookieError:
        return None  # a damaged Cookie header counts as no cookie
    morsel = jar.get(cookie_name(port))
    return morsel.value if morsel is not None else None


def session_cookie(token: str, port: int) -> str:
    """Set-Cookie value: HttpOnly (page scripts never see it), SameSite=Strict, whole site, session only."""
    return f"{cookie_name(port)}={token}; Path=/; HttpOnly; SameSite=Strict"


def check_host(host: str | None, port: int) -> Refusal | None:
    if host not in allowed_hosts(port):
        return Refusal(HTTPStatus.FORBIDDEN, f"refused: Host {host!r} is not this control page's address "
                                             f"(open http://{LOOPBACK}:{port}/ via `vcamd panel`)")
    return None


def check_fetch_site(headers: dict[str, str], method: str) -> Refusal | None:
    """Refuse what the browser says another page sent (Sec-Fetch-* headers; absent from scripts)."""
    site = headers.get("sec-fetch-site")
    if site not in ("cross-site", "same-site"):
        return None  # same-origin, "none" (typed or opened by `vcamd panel`), or not a browser
    top_level_visit = (method == "GET" and headers.get("sec-fetch-mode") == "navigate"
                       and headers.get("sec-fetch-dest") == "document")
    if top_level_visit:
        return None  # following a link shows the page to the user; it lets the other page do nothing
    return Refusal(HTTPStatus.FORBIDDEN, "refused: the request comes from another web page")


def check_origin(origin: str | None, port: int, *, bearer: bool) -> Refusal | None:
    """CSRF rule for changes (POST): this page's own Origin, or no Origin with the Bearer header."""
    if origin is None:
        if bearer:
            return None
        return Refusal(HTTPStatus.FORBIDDEN, "refused: a change without an Origin header needs "
                                             "`Authorization: Bearer TOKEN`")
    if origin not in allowed_origins(port):
        return Refusal(HTTPStatus.FORBIDDEN, f"refused: a change from another origin ({origin})")
    return None

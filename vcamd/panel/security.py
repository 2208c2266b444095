"""The page's access rules now live in `vcamd.pages.security`, below the preview sink as well."""

# issue 40: kept only because `panel/routes.py` (being changed on other branches) still imports
# these names from here; removed when routes.py imports `vcamd.pages.security`.

from vcamd.pages.security import (
    LOGGED_IN_PAGE,
    LOOPBACK,
    Refusal,
    bearer_token,
    check_fetch_site,
    check_host,
    check_origin,
    session_cookie,
)

__all__ = [
    "LOGGED_IN_PAGE", "LOOPBACK", "Refusal", "bearer_token", "check_fetch_site", "check_host", "check_origin", "session_cookie",
]

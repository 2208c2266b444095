"""The page's connection gate now lives in `vcamd.pages.gate`, below the preview sink as well."""

# issue 40: kept only because `panel/routes.py` (being changed on other branches) still imports
# these names from here; removed when routes.py imports `vcamd.pages.gate`.

from vcamd.pages.gate import GUEST, OWNER, GatedHTTPServer

__all__ = ["GUEST", "OWNER", "GatedHTTPServer"]

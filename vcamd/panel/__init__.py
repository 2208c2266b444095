"""The control page: a local web page that drives the running daemon (`vcamd panel` opens it).

`server` (`PanelServer`: life cycle, what the API answers and does), `routes` (the routes and who
may use them), `wire` (request bodies, answers, the MJPEG stream), `surface` (`open_panel`,
`WithPanelUrl`), `video` (one JPEG per frame for every viewer), `history` (the last minute of status for the
chart), `faces` (uploads), `static/` (the page itself). Who may connect and the access rules
are `vcamd.pages`' (shared with the preview sink). `vcamd run` starts it with
`open_panel(engine, cfg, recent_faces)`.
"""

from vcamd.panel.server import PanelServer
from vcamd.panel.surface import WithPanelUrl, open_panel

__all__ = ["PanelServer", "WithPanelUrl", "open_panel"]

"""The control page: a local web page that drives the running daemon (`vcamd panel` opens it).

`server` (HTTP, JSON API, video), `security` (token, Host, Origin rules), `video` (one JPEG per
frame for every viewer), `history` (the last minute of status for the chart), `faces` (uploads),
`static/` (the page itself). `vcamd run` starts it with `open_panel(engine, cfg)`.
"""

from vcamd.panel.server import PanelServer, WithPanelUrl, open_panel

__all__ = ["PanelServer", "WithPanelUrl", "open_panel"]

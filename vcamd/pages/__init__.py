"""What every local web page of vcamd shares — the control page (`vcamd/panel/`) and the preview
sink (`vcamd/sinks/preview.py`): `gate` (who may connect, request heads, a thread pool per purpose)
and `security` (token, one-time codes, Host, Origin and fetch-metadata rules, the headers).

It sits below both, so an output (a sink) needs nothing of the control page to keep its page
as private as the control page.
"""

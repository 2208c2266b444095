"""Every gRPC channel of ours to a Triton server — the daemon's link and `vcamd serve`'s own readiness
check — reconnects at least every second (`link.RECONNECT_OPTIONS`), not on gRPC's default backoff,
which grows to 2 minutes: a channel made before the server listens (a restart, a start slowed by a busy
machine) would see it up that long after it is. `vcamd serve`'s readiness check once did: a start that
took Triton over a minute beside a loaded test run was seen ready past the tests' bound."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("tritonclient.grpc")

import tritonclient.grpc as grpcclient  # noqa: E402

from vcamd.config.address import ServerAddress  # noqa: E402
from vcamd.remote import link, serve  # noqa: E402
from vcamd.remote.link import RECONNECT_OPTIONS, ServerLink  # noqa: E402


class _Recorded:
    """What a channel was made with; a client that never connects."""

    made: list[dict[str, Any]]

    def __init__(self, target: str, **kwargs: Any) -> None:
        _Recorded.made.append(dict(kwargs.get("channel_args") or ()))

    def close(self) -> None:
        pass

    def is_server_ready(self, **_: Any) -> bool:
        raise ConnectionError("not listening")


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    _Recorded.made = []
    monkeypatch.setattr(grpcclient, "InferenceServerClient", _Recorded)
    return _Recorded.made


def test_the_reconnect_wait_is_at_most_a_second() -> None:
    options = dict(RECONNECT_OPTIONS)
    assert options["grpc.max_reconnect_backoff_ms"] <= 1000
    assert options["grpc.initial_reconnect_backoff_ms"] <= options["grpc.max_reconnect_backoff_ms"]


def test_serves_readiness_check_reconnects_as_the_daemon_does(recorded) -> None:
    serve._health_client(grpcclient, "127.0.0.1:1", {})
    assert len(recorded) == 1
    assert set(RECONNECT_OPTIONS) <= set(recorded[0].items())


def test_the_daemons_link_reconnects_within_a_second(recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(link, "credentials_for", lambda address: None)
    server = ServerLink(ServerAddress.parse("grpc://127.0.0.1:1"))
    try:
        assert recorded, "the link made no channel"
        assert all(set(RECONNECT_OPTIONS) <= set(made.items()) for made in recorded)
    finally:
        server.close()

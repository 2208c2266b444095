"""`ServerLink`: the daemon's one connection to a Triton server, and what it knows of it.

Calls run on the caller's thread (the swap worker's) through tritonclient's gRPC client. A call
that fails because the server is not there (refused, reset, killed mid-call, past its deadline)
marks the link away; from then on calls fail at once, without touching the network, and a
`server-probe` thread asks the server whether it is back — after 0.25 s, then twice as long each
time up to 1 s — so the swaps resume within about a second of its return (the issue's bound is 2 s).
Nothing waits on the link but the swap it runs: the loop publishes at the camera's rate whatever
the server does, and the faces are held or obscured meanwhile (`on_miss`).

Each time the server comes back its models are checked again (`generation` moves on; a
`RemoteSession` re-reads its model's metadata): a restarted server may serve another model.

The link is mutual TLS with the paired certificates (`vcamd.remote.pairing`): beyond this machine
the bundle `vcamd pair` kept, on it those of this user's own `vcamd serve`; a plaintext URL to
another host is refused before anything is sent.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from vcamd.common.errors import ModelError, VcamdError
from vcamd.config.address import ServerAddress
from vcamd.remote.pairing import SERVER_NAME, Pairing, local_pairing, pairing_for
from vcamd.remote.wire import WireArg

T = TypeVar("T")

log = logging.getLogger(__name__)

RECONNECT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
"""gRPC channel options for every channel of ours to a server that may not listen yet: gRPC's own
reconnect waits grow to 2 minutes by default, so a server that starts listening (a restart, a slow
start) would stay unseen up to that long after it is up. Ours: at most a second."""

CALL_TIMEOUT_S = 4.0
"""A call's deadline. A swap normally comes back in milliseconds (a GPU) to 1.5 s (inswapper on a
CPU); a server that takes longer is stuck or cut off, and the faces are held or obscured meanwhile."""
PROBE_TIMEOUT_S = 1.0
BACKOFF_S = (0.25, 0.5, 1.0)
"""Waits between two probes of an away server: short first (a blip), then at most 1 s."""
MODEL_LOAD_WAIT_S = 60.0
"""How long a server that is ready may still be loading the models this daemon uses (a Triton in
explicit model control loads them after it answers) before a missing one is an error, not a wait."""
PROBE_EVERY_S = 2.0
"""While up: how often the probe measures the round trip (a tiny liveness call) and the models served."""


class ServerAway(ModelError):
    """The server cannot be reached now; the link is trying again (a swap error: faces held or obscured)."""


class ServerRefused(ModelError):
    """The server answered but will not do what was asked (TLS refused, no such model)."""


def _require_tritonclient() -> Any:
    try:
        import tritonclient.grpc as grpcclient
    except ImportError:
        raise VcamdError("[models] server is set, but tritonclient is not installed",
                         fix="install the client: `pip install -e '.[remote]'` (or `pip install 'tritonclient[grpc]'`)") from None
    return grpcclient


def credentials_for(address: ServerAddress) -> Pairing | None:
    """The pairing to reach `address` over mutual TLS: beyond this machine only the one `vcamd pair`
    kept; on it, that or this user's own server's (None: none has run here — the server refuses)."""
    pairing = pairing_for(address)
    if pairing is not None:
        return pairing
    if not address.loopback:
        raise VcamdError(
            f"[models] server = \"{address}\" is not on this machine, and this client is not paired with it: "
            "faces will not be sent in plaintext",
            fix="on the server run `vcamd serve --listen HOST:PORT` (it writes a pairing bundle), copy the bundle here "
                "and run `vcamd pair BUNDLE`",
        )
    return local_pairing()


class ServerLink:
    """One Triton server: its client, whether it is up, its round trip, the models it serves."""

    def __init__(self, address: ServerAddress, *, clock: Callable[[], float] = time.monotonic) -> None:
        grpcclient = _require_tritonclient()
        import grpc

        self.address = address
        self._local = pairing_for(address) is None  # this user's own server here: its files are read again when it is away
        self._pairing = credentials_for(address)
        self._grpc = grpc
        self._errors = grpcclient  # InferInput, InferRequestedOutput
        self._options: list[tuple[str, int | str]] = [
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
            *RECONNECT_OPTIONS,
            ("grpc.keepalive_time_ms", 10_000),
            ("grpc.keepalive_timeout_ms", 5_000),
        ]
        self._client = self._connect(self._pairing)
        self._clock = clock
        self._lock = threading.Lock()  # guards the fields below
        self._up = False
        self._checked = False  # reached at least once
        self._error: str | None = "not connected yet"
        self._away_since: float | None = clock()
        self._retry = 0
        self._generation = 0
        self._rtt_ms: deque[float] = deque(maxlen=16)
        self._call_ms: deque[float] = deque(maxlen=64)
        self._serves: list[str] = []
        self._calls = 0
        self._failures = 0
        self._wanted: set[str] = set()  # the models this daemon runs there: "up" waits until they are loaded
        self._ready_since: float | None = None  # the server said ready (this time round), maybe not its models yet
        self._stop = threading.Event()
        self._wake = threading.Event()
        # The probe holds the link weakly: a link dropped with its face pipeline (a rebuild) ends its probe.
        self._probe = threading.Thread(target=_probe_loop, args=(weakref.ref(self), self._stop, self._wake), name="server-probe", daemon=True)
        self._probe.start()

    def _connect(self, pairing: Pairing | None) -> Any:
        options, creds = list(self._options), None
        if pairing is not None:
            options.append(("grpc.ssl_target_name_override", SERVER_NAME))
            creds = self._grpc.ssl_channel_credentials(root_certificates=pairing.ca, private_key=pairing.key,
                                                       certificate_chain=pairing.certificate)
        return self._errors.InferenceServerClient(self.address.target, creds=creds, channel_args=options)

    def _renew_local_pairing(self) -> None:
        """While this user's own server is away: its certificates as they are now (it may have made
        them after this link started, or new ones with `--new-pairing`)."""
        if not self._local:
            return
        pairing = local_pairing()
        if pairing != self._pairing:
            old, self._pairing, self._client = self._client, pairing, self._connect(pairing)
            try:
                old.close()
            except Exception:  # noqa: BLE001 — closing a broken channel: nothing to report
                pass

    # ---- state -------------------------------------------------------------------------------------

    @property
    def tls(self) -> bool:
        return self._pairing is not None

    @property
    def generation(self) -> int:
        """Moves on each time the server comes (back) up: what was checked before must be checked again."""
        with self._lock:
            return self._generation

    @property
    def up(self) -> bool:
        with self._lock:
            return self._up

    def status(self) -> dict[str, Any]:
        """What status, the control page and doctor show of the server."""
        with self._lock:
            away = None if self._away_since is None else round(self._clock() - self._away_since, 1)
            return {
                "url": self.address.url,
                "tls": self.tls,
                "state": "up" if self._up else ("connecting" if not self._checked else "away"),
                "rtt_ms": _median(self._rtt_ms),
                "call_ms": _median(self._call_ms),
                "serves": list(self._serves),
                "error": None if self._up else self._error,
                "away_s": away,
                "calls": self._calls,
                "failures": self._failures,
            }

    def want(self, *models: str) -> None:
        """Models this daemon runs on the server: after a restart it is up only once they are loaded
        (or `MODEL_LOAD_WAIT_S` passed: then the call says which model it does not serve)."""
        with self._lock:
            self._wanted.update(models)

    def wait_up(self, timeout_s: float | None = None) -> bool:
        """Block until the server has been reached (True), or `timeout_s` passed (False)."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        while not self._stop.is_set():
            if self.up:
                return True
            if deadline is not None and self._clock() >= deadline:
                return False
            self._wake.set()
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 — closing a broken channel: nothing to report
            pass

    # ---- calls -----------------------------------------------------------------------------------------

    def metadata(self, model: str) -> tuple[list[WireArg], list[WireArg]]:
        """The model's inputs and outputs as Triton's metadata says. ServerRefused when it does not serve it."""
        data = self._call(lambda: self._client.get_model_metadata(model, as_json=True,
                                                                   client_timeout=PROBE_TIMEOUT_S * 5), model)
        return ([WireArg.from_metadata(i) for i in data.get("inputs", [])], [WireArg.from_metadata(o) for o in data.get("outputs", [])])

    def infer(self, model: str, inputs: Sequence[tuple[str, np.ndarray, str]], outputs: Sequence[str]) -> dict[str, np.ndarray]:
        """One inference: (name, array, Triton datatype) in, the named outputs back."""
        with self._lock:
            if not self._up:
                raise ServerAway(self._away_text(), fix=self._away_fix())
        requests = []
        for name, array, datatype in inputs:
            item = self._errors.InferInput(name, list(array.shape), datatype)
            item.set_data_from_numpy(array)
            requests.append(item)
        wanted = [self._errors.InferRequestedOutput(name) for name in outputs]
        start = time.perf_counter()
        result = self._call(lambda: self._client.infer(model, requests, outputs=wanted,
                                                       client_timeout=CALL_TIMEOUT_S), model)
        took = (time.perf_counter() - start) * 1000.0
        with self._lock:
            self._calls += 1
            self._call_ms.append(took)
        return {name: result.as_numpy(name) for name in outputs}

    def served_models(self) -> list[str]:
        """The models the server has ready (its repository index)."""
        return self._call(self._index, None)

    def _index(self) -> list[str]:
        # The loaded models, from their statistics (a server that loads its models by API lists none in its index).
        stats = self._client.get_inference_statistics("", as_json=True, client_timeout=PROBE_TIMEOUT_S)
        return sorted({m["name"] for m in stats.get("model_stats", [])})

    def statistics(self, model: str) -> dict[str, Any]:
        """Triton's inference statistics of a model (batch sizes executed, queue and compute times)."""
        stats: dict[str, Any] = self._call(lambda: self._client.get_inference_statistics(
            model, as_json=True, client_timeout=PROBE_TIMEOUT_S * 5), model)
        return stats

    def _call(self, call: Callable[[], T], model: str | None) -> T:
        try:
            return call()
        except Exception as exc:  # tritonclient's InferenceServerException, or gRPC's own
            raise self._failed(exc, model) from None

    def _failed(self, exc: Exception, model: str | None) -> ModelError:
        status = getattr(exc, "status", None)  # tritonclient's exception has status(); gRPC's own may not
        code = str(status() if callable(status) else "")
        text = _message(exc)
        transient = "no available versions" in text or "not ready" in text.lower()  # a server starting or stopping its models
        if not transient and ("NOT_FOUND" in code or "not found" in text.lower() or "unknown model" in text.lower()):
            return ServerRefused(f"the Triton server at {self.address} does not serve {model!r} ({text})",
                                 fix=f"serve it there (`vcamd serve` with the same [models] value), or set [models] to a model it serves: "
                                     f"{', '.join(self._serves) or 'see `vcamd doctor`'}")
        if "PERMISSION_DENIED" in code or "UNAUTHENTICATED" in code or "restricted" in text.lower():
            return ServerRefused(f"the Triton server at {self.address} refused this client ({text})",
                                 fix="pair again: copy the bundle `vcamd serve` wrote and run `vcamd pair BUNDLE`")
        if not transient and ("INVALID_ARGUMENT" in code or "INTERNAL" in code or ("UNKNOWN" in code and "connect" not in text.lower())):
            return ModelError(f"the Triton server at {self.address} failed the call to {model!r}: {text}",
                              fix="see the server's log")
        self._went_away(text)
        return ServerAway(self._away_text(), fix=self._away_fix())

    def _went_away(self, text: str) -> None:
        with self._lock:
            self._failures += 1
            self._error = text
            if self._up:
                self._up = False
                self._away_since = self._clock()
                self._retry = 0
                log.warning("the Triton server at %s is away (%s); faces are held or obscured until it is back", self.address, text)
        self._wake.set()

    def _away_text(self) -> str:
        return f"the Triton server at {self.address} is away ({self._error}); trying again every second"

    def _away_fix(self) -> str:
        if self.address.loopback:
            return "start it: `vcamd serve` (see README \"The swap on a GPU elsewhere\")"
        return "check that the server runs and the network reaches it (`vcamd doctor`)"

    # ---- the probe -----------------------------------------------------------------------------------

    def _next_probe_in(self) -> float:
        with self._lock:
            return PROBE_EVERY_S if self._up else BACKOFF_S[min(self._retry, len(BACKOFF_S) - 1)]

    def _probe_once(self) -> None:
        start = time.perf_counter()
        with self._lock:
            wanted = sorted(self._wanted)
        try:
            live = self._client.is_server_ready(client_timeout=PROBE_TIMEOUT_S)
            rtt = (time.perf_counter() - start) * 1000.0
            serves = self._index() if live else []
            loading = [m for m in wanted if not self._client.is_model_ready(m, client_timeout=PROBE_TIMEOUT_S)] \
                if live and not self.up else []
        except Exception as exc:  # noqa: BLE001 — whatever the channel raised: still away
            with self._lock:
                was_up = self._up
                self._error = _message(exc)
                self._retry += 1
            if was_up:
                self._went_away(self._error or "")
            self._renew_local_pairing()
            return
        with self._lock:
            if not live:
                self._retry += 1
                self._ready_since = None
                self._error = "the server is starting (not ready)"
                return
            if not self._up:
                self._ready_since = self._ready_since if self._ready_since is not None else self._clock()
                if loading and self._clock() - self._ready_since < MODEL_LOAD_WAIT_S:
                    self._retry = 0  # loading: look again soon
                    self._error = f"the server is loading {', '.join(loading)}"
                    return
                self._ready_since = None
            self._rtt_ms.append(rtt)
            self._serves = serves
            if not self._up:
                self._up = True
                self._generation += 1
                back_after = None if self._away_since is None or not self._checked else self._clock() - self._away_since
                self._checked = True
                self._away_since = None
                self._retry = 0
                self._error = None
                log.info("the Triton server at %s is up (%s, %.1f ms round trip%s); it serves %s", self.address,
                         "mutual TLS" if self.tls else "loopback", rtt,
                         "" if back_after is None else f", back after {back_after:.1f} s", ", ".join(serves) or "nothing")


def _probe_loop(ref: weakref.ref[ServerLink], stop: threading.Event, wake: threading.Event) -> None:
    """The `server-probe` thread: probe now and then (`_next_probe_in`), or at once when woken (a
    call just failed, or someone waits for the server) — never faster than the backoff while away."""
    last = 0.0
    while not stop.is_set():
        link = ref()
        if link is None:
            return
        wait = link._next_probe_in()
        del link
        woken = wake.wait(wait)
        wake.clear()
        if stop.is_set():
            return
        link = ref()
        if link is None:
            return
        if woken and not link.up and time.monotonic() - last < wait:
            del link
            if stop.wait(wait):
                return
            link = ref()
            if link is None:
                return
        last = time.monotonic()
        link._probe_once()
        del link


def _message(exc: BaseException) -> str:
    """The first line of what tritonclient or gRPC said."""
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    lines = (text or "").strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def _median(values: Sequence[float]) -> float | None:
    return round(float(np.median(list(values))), 2) if values else None

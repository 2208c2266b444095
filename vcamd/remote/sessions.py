"""The seam: sessions on a Triton server standing where ONNX Runtime's stand.

`RemoteSessions` is what `vcamd.models.pipeline` hands the face engine instead of `vcamd.inference.runtime.Sessions`
when `[models] server` is set: the detector and recognizer keep their local sessions (they see
whole frames, which never leave the machine); the swapper, enhancer and parser get a
`RemoteSession`, whose `get_inputs()`/`get_outputs()` are the served model's signature (Triton's
metadata, `vcamd.remote.wire`) and whose `run()` is an inference on the server. `Swapper`,
`Enhancer` and `FaceParser` do not know the difference: they check the signature with their own
contract code and run one code path.

With `[models] fallback = "local"` the local model stands behind it (`FailoverSession`): its
session runs while the server is away, and the server's model takes over again once it is back and
has the same signature (and, for the swapper, the same `emap`: the latent is made here).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vcamd.common.errors import ModelError, VcamdError
from vcamd.config.schema import Config
from vcamd.remote.address import ServerAddress
from vcamd.remote.link import ServerAway, ServerLink, ServerRefused
from vcamd.remote.wire import EMAP_SUFFIX, SERVED_ROLES, Arg, Signature, emap_rows, served_name

if TYPE_CHECKING:
    from vcamd.common.types import ModelFiles
    from vcamd.inference.runtime import Sessions

log = logging.getLogger(__name__)

LOCAL_FALLBACK = "local"


@dataclass(frozen=True, slots=True)
class Served:
    role: str
    name: str  # the served model's name (`wire.served_name` of the [models] value)


def served_roles(cfg: Config) -> dict[str, Served]:
    """Role → served model, for the roles `cfg` runs on its server (none without one). The
    enhancer is listed whether on or not: it can be switched on while running."""
    if not cfg.models.server:
        return {}
    wanted = {"swapper": cfg.models.swapper, "enhancer": cfg.models.enhancer, "parser": cfg.models.parser}
    return {role: Served(role, served_name(value)) for role, value in wanted.items() if value and role in SERVED_ROLES}


def remote_placeholders(cfg: Config) -> dict[str, Path]:
    """Role → the name standing for its model file, for the roles that run on the server with no
    local copy (all of them, unless `fallback = "local"`, which needs the local files)."""
    if cfg.models.fallback == LOCAL_FALLBACK:
        return {}
    return {role: Path(served.name) for role, served in served_roles(cfg).items()}


class RemoteSession:
    """A model on the Triton server, with an ONNX Runtime session's face: `get_inputs`,
    `get_outputs`, `run`. Built once the server has been reached (its signature is its metadata)."""

    def __init__(self, link: ServerLink, served: Served) -> None:
        self.link = link
        self.served = served
        link.want(*self.models)
        if not link.up:
            log.info("waiting for the Triton server at %s to load the %s (%s)", link.address, served.role, served.name)
            link.wait_up()
        self._generation = link.generation
        self.signature = self._read_signature()

    @property
    def models(self) -> tuple[str, ...]:
        """The served model this session uses. A swapper's `.emap` companion (inswapper's alone: the
        other families have none) is wanted once the swapper asks for it (`initializer`)."""
        return (self.served.name,)

    def _read_signature(self) -> Signature:
        inputs, outputs = self.link.metadata(self.served.name)
        return Signature.of_wire(self.served.role, inputs, outputs)

    def get_inputs(self) -> list[Arg]:
        return list(self.signature.inputs)

    def get_outputs(self) -> list[Arg]:
        return list(self.signature.outputs)

    def get_providers(self) -> list[str]:
        return [f"Triton {self.link.address}"]

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """As `InferenceSession.run`: the model's outputs (all of them for None), from float feeds."""
        self._recheck()
        sig = self.signature
        names = [a.name for a in sig.outputs] if output_names is None else list(output_names)
        wire_in = []
        for arg in sig.inputs:
            codec = sig.codec(arg.name)
            wire_in.append((arg.name, codec.to_wire(np.asarray(feeds[arg.name])), codec.datatype))
        got = self.link.infer(self.served.name, wire_in, names)
        return [sig.codec(name).from_wire(got[name]) for name in names]

    def initializer(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A graph initializer the code needs locally; the swapper's `emap` is served by a companion model."""
        if name != "emap":
            raise ModelError(f"the server does not serve the {name!r} of {self.served.name}", fix="run the model locally")
        model = self.served.name + EMAP_SUFFIX
        self.link.want(model)  # after a restart of the server, up only once this one is loaded too
        rows = emap_rows(shape[0])
        got = self.link.infer(model, [("row", rows, "INT64")], ["emap"])["emap"]
        emap = np.asarray(got, np.float32)
        if emap.shape != tuple(shape):
            raise ModelError(f"the server's {model} gives an emap of shape {emap.shape}, not {shape}", fix="check the server's swapper")
        return emap

    def _recheck(self) -> None:
        """A server that came back may serve another model: check it as when we first met."""
        generation = self.link.generation
        if generation == self._generation:
            return
        fresh = self._read_signature()
        if _args(fresh.inputs) != _args(self.signature.inputs) or _args(fresh.outputs) != _args(self.signature.outputs):
            raise ServerRefused(
                f"the Triton server at {self.link.address} came back serving another {self.served.role} as {self.served.name!r} "
                f"({_args(fresh.inputs)}, was {_args(self.signature.inputs)})",
                fix="serve the same model again, or restart the daemon to load what the server serves now",
            )
        self._generation = generation


def _args(args: Sequence[Arg]) -> list[tuple[str, tuple[Any, ...], str]]:
    return [(a.name, tuple(a.shape), a.type) for a in args]


def _compatible(local: Sequence[Any], served: Sequence[Arg]) -> bool:
    """Same names and sizes (the batch dimension aside): the local model and the server's are one model."""
    def key(arg: Any) -> tuple[str, tuple[Any, ...]]:
        return arg.name, tuple(d if isinstance(d, int) else None for d in list(arg.shape)[1:])

    return sorted(map(key, local)) == sorted(map(key, served))


class FailoverSession:
    """The server's model while it is up, the local one while it is away (`fallback = "local"`).
    Its signature is the local model's; the server's must match it before it is used."""

    def __init__(self, link: ServerLink, served: Served, local: Any, local_path: Path) -> None:
        self.link = link
        self.served = served
        self.local = local
        self._local_path = local_path
        self._remote: RemoteSession | None = None
        self._refused_generation: int | None = None  # the server's model did not match: not used until it comes back
        link.want(served.name)  # and its `.emap` once asked for (`RemoteSession.initializer`)
        self._lock = threading.Lock()
        self.ran_remote = 0
        self.ran_local = 0

    def get_inputs(self) -> list[Any]:
        inputs: list[Any] = self.local.get_inputs()  # an ONNX Runtime session: untyped
        return inputs

    def get_outputs(self) -> list[Any]:
        outputs: list[Any] = self.local.get_outputs()
        return outputs

    def get_providers(self) -> list[str]:
        return [f"Triton {self.link.address}", *self.local.get_providers()]

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        remote = self._usable_remote()
        if remote is not None:
            try:
                out = remote.run(output_names, feeds)
                self.ran_remote += 1
                return out
            except ServerAway:
                pass
            except ServerRefused as err:
                log.error("%s; running the local %s", err, self.served.role)
                self._refused_generation = self.link.generation
        self.ran_local += 1
        ran: list[np.ndarray] = self.local.run(output_names, feeds)
        return ran

    def _usable_remote(self) -> RemoteSession | None:
        if not self.link.up or self._refused_generation == self.link.generation:
            return None
        with self._lock:
            if self._remote is None:
                try:
                    remote = RemoteSession(self.link, self.served)
                    self._check_same(remote)
                except ServerAway:
                    return None
                except ModelError as err:
                    log.error("not using the server's %s: %s (the local model runs)", self.served.role, err)
                    self._refused_generation = self.link.generation
                    return None
                self._remote = remote
            return self._remote

    def _check_same(self, remote: RemoteSession) -> None:
        if not _compatible(self.local.get_inputs(), remote.get_inputs()) or not _compatible(self.local.get_outputs(), remote.get_outputs()):
            raise ModelError(f"the server's {self.served.name} has another signature than the local {self._local_path.name}",
                             fix="serve the same model file as [models] names here")
        if self.served.role == "swapper":
            from vcamd.faces.specs import swapper_spec_for
            from vcamd.faces.swap import _read_emap

            spec = swapper_spec_for({a.name: a.shape for a in self.local.get_inputs()})
            if spec is not None and spec.source.kind == "emap":  # only inswapper's latent goes through an emap
                dim = spec.identity_dim
                if not np.allclose(remote.initializer("emap", (dim, dim)), _read_emap(self._local_path, dim), atol=1e-6):
                    raise ModelError(f"the server's {self.served.name} is another export than the local {self._local_path.name} "
                                     "(their emap differ: the latent made here would be wrong there)",
                                     fix="serve the same model file as [models] names here")


class RemoteSessions:
    """`vcamd.inference.runtime.Sessions`' stand-in with a server: the served roles' models on it, the rest local."""

    def __init__(self, cfg: Config, local: Sessions, files: ModelFiles, *,
                 link_factory: Callable[[ServerAddress], ServerLink] = ServerLink) -> None:
        self.local = local
        self._fallback = cfg.models.fallback == LOCAL_FALLBACK
        self._served: dict[Path, Served] = {}
        for role, served in served_roles(cfg).items():
            path = files.paths.get(role)
            if path is None and role == "enhancer":  # off now, may be switched on while running
                try:
                    path = files.enhancer()
                except VcamdError:
                    path = None  # its local file is missing (fallback): switching it on says so
            if path is not None:
                self._served[_key(path)] = served
        self._made: dict[Path, Any] = {}
        self._lock = threading.Lock()
        self.link = link_factory(ServerAddress.parse(cfg.models.server))

    # -- what Sessions offers --------------------------------------------------------------------------
    @property
    def providers(self) -> list[str]:
        return self.local.providers

    @property
    def threads(self) -> int:
        return self.local.threads

    @property
    def core_split(self) -> Any:
        return self.local.core_split

    def get(self, path: Path | str, *, keep_optimized: bool = False, background: bool = False) -> Any:
        key = _key(Path(path))
        served = self._served.get(key)
        if served is None:
            return self.local.get(path, keep_optimized=keep_optimized, background=background)
        with self._lock:
            made = self._made.get(key)
        if made is not None:
            return made
        if self._fallback:
            made = FailoverSession(self.link, served, self.local.get(path, keep_optimized=keep_optimized, background=background), Path(path))
        else:
            made = RemoteSession(self.link, served)
        with self._lock:
            return self._made.setdefault(key, made)

    def get_resized(self, path: Path | str, input_hw: tuple[int, int]) -> Any:
        return self.local.get_resized(path, input_hw)

    def active_providers(self) -> dict[str, str]:
        """Model file → what runs it; a served model: the server (and the local provider behind it with fallback)."""
        active = self.local.active_providers()
        for key, served in self._served.items():
            if key in self._made:
                behind = f", else {active[key.name]} here" if key.name in active else ""
                active[key.name] = f"Triton {self.link.address}{behind}"
        return active

    def server_status(self) -> dict[str, Any]:
        status = self.link.status()
        status["fallback"] = "local" if self._fallback else None
        status["models"] = {served.role: served.name for key, served in self._served.items() if key in self._made}
        return status

    def close(self) -> None:
        self.link.close()


def _key(path: Path) -> Path:
    return path.expanduser().resolve() if path.is_absolute() or path.exists() else path

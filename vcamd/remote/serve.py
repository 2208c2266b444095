"""`vcamd serve`: a real NVIDIA Triton Inference Server (PyTriton) running the config's face models.

PyTriton ships the `tritonserver` binary and its Python backend; each served model is an inference
function bound to it, running the model file through ONNX Runtime with this machine's provider
(`[models] providers`: CUDA/TensorRT on a GPU box, the CPU elsewhere). Triton batches the requests
of every client that arrive while the model is busy (dynamic batching) and hands them to the
function as one batch.

What is served: the swapper (and, for inswapper, its `.emap` companion, the rows of its identity
projection: the client makes the latent itself), the enhancer when its file is here, the parser when set — each
under its `wire.served_name`, with its image tensors as uint8 pixels (`vcamd.remote.wire`). The
loaders are the same classes `vcamd run` uses (`Swapper`, `Enhancer`, `FaceParser`), so a wrong
file is refused here with the same message.

Private by default: gRPC on 127.0.0.1 unless `--listen` says otherwise, and then only with mutual
TLS (`vcamd.remote.pairing`); Triton's HTTP endpoint, which PyTriton uses to manage the server,
stays on 127.0.0.1; metrics are off; every endpoint but health needs the access token. Nothing
here writes or logs a tensor: requests live in memory (Triton's and PyTriton's shared memory)
and errors name the model, never the data.
"""

from __future__ import annotations

import logging
import os
import socket
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vcamd.common.errors import ModelError, VcamdError
from vcamd.config.schema import Config
from vcamd.remote.address import ServerAddress
from vcamd.remote.wire import EMAP_SUFFIX, SERVED_ROLES, Arg, Signature, served_name, wire_dtype

log = logging.getLogger(__name__)

MAX_BATCH = 8
"""The most requests Triton hands the model at once (faces from several clients)."""
OPEN_ENDPOINTS = {"health"}
"""Triton endpoints that need no token: whether the server is alive says nothing about anyone."""
READY_LINE = "vcamd serve: ready"


@dataclass(frozen=True)
class ServedModel:
    """One model as bound to Triton: its name, wire tensors and the function that runs a batch."""

    name: str
    role: str
    inputs: list[tuple[str, type, tuple[int, ...]]]
    outputs: list[tuple[str, type, tuple[int, ...]]]
    infer: Callable[..., dict[str, np.ndarray]]
    batching: bool = True


@dataclass(frozen=True)
class LoadedRole:
    """A role this machine serves: its model loaded by the role's own class (its signature checked)."""

    role: str
    name: str  # `wire.served_name` of its [models] value
    model: Any  # Swapper, Enhancer or FaceParser
    session: Any


def load_served_roles(cfg: Config, sessions: Any) -> list[LoadedRole]:
    """The swapper; the enhancer when it is on or its file is here; the parser when set — each
    loaded with the class `vcamd run` loads it with, so a wrong file is refused with the same message."""
    from vcamd.modelstore.roles import role_named
    from vcamd.modelstore.store import ModelStore

    store = ModelStore.from_config(cfg.models)
    wanted = [("swapper", cfg.models.swapper, True), ("enhancer", cfg.models.enhancer, cfg.enhancer.enabled),
              ("parser", cfg.models.parser, True)]
    loaded: list[LoadedRole] = []
    for role, value, required in wanted:
        if not value or role not in SERVED_ROLES:
            continue
        try:
            path = store.path_for(value, role)
        except ModelError:
            if required:
                raise
            log.info("not serving the %s: %s is not here", role, value)
            continue
        # The swapper with the family the config names: a shared signature is told apart so, as `vcamd run` does.
        extra = {"family": cfg.models.swapper_family or None} if role == "swapper" else {}
        model = role_named(role).loader_class()(path, sessions, **extra)
        session = getattr(model, "session", None) or getattr(model, "_session")  # Enhancer keeps it private
        loaded.append(LoadedRole(role, served_name(value), model, session))
    return loaded


def served_models(cfg: Config, sessions: Any = None) -> list[ServedModel]:
    """Each role `cfg` serves, described as Triton will serve it (a swapper with its `.emap` companion)."""
    from vcamd.inference.runtime import Sessions

    sessions = sessions if sessions is not None else Sessions(list(cfg.models.providers), cfg.models.threads)
    models: list[ServedModel] = []
    for item in load_served_roles(cfg, sessions):
        models.append(_served(item.name, item.role, item.session))
        if item.role == "swapper" and item.model.emap is not None:  # inswapper's; the other families have none
            models.append(_served_emap(item.name + EMAP_SUFFIX, item.model.emap))
    return models


def _served(name: str, role: str, session: Any) -> ServedModel:
    inputs = [Arg(i.name, list(i.shape), i.type) for i in session.get_inputs()]
    outputs = [Arg(o.name, list(o.shape), o.type) for o in session.get_outputs()]
    sig = Signature.to_serve(role, inputs, outputs)
    batch_dim = inputs[0].shape[0] if inputs and inputs[0].shape else None
    whole_batches = not (isinstance(batch_dim, int) and batch_dim > 0)
    out_names = [o.name for o in outputs]
    dtypes = {i.name: _ort_numpy(i.type) for i in inputs}

    def infer(**wire: np.ndarray) -> dict[str, np.ndarray]:
        feeds: dict[str, np.ndarray] = {n: sig.codec(n).from_wire(wire[n]).astype(dtypes[n], copy=False) for n in dtypes}
        count = len(next(iter(feeds.values())))
        if whole_batches:
            results = session.run(out_names, feeds)
        else:  # a model exported for one face at a time: the batch Triton formed, face by face
            parts = [session.run(out_names, {n: v[i : i + 1] for n, v in feeds.items()}) for i in range(count)]
            results = [np.concatenate([p[k] for p in parts]) for k in range(len(out_names))]
        return {n: sig.codec(n).to_wire(np.asarray(r)) for n, r in zip(out_names, results, strict=True)}

    # Triton batches along every tensor's first dimension: a tensor with no other (a DeepFaceLab
    # model's `morph_value:0` [1]) is not a batch of anything, so that model is served unbatched,
    # each tensor with its whole shape.
    batching = all(len(a.shape) > 1 for a in [*inputs, *outputs])

    def tensors(args: list[Arg]) -> list[tuple[str, type, tuple[int, ...]]]:
        return [(a.name, wire_dtype(sig.codec(a.name)),
                 tuple(d if isinstance(d, int) and d > 0 else -1 for d in sig.codec(a.name).wire_shape(a.shape)[1 if batching else 0:]))
                for a in args]

    return ServedModel(name, role, tensors(inputs), tensors(outputs), infer, batching=batching)


def _served_emap(name: str, emap: np.ndarray) -> ServedModel:
    table = np.ascontiguousarray(emap, np.float32)

    def infer(row: np.ndarray) -> dict[str, np.ndarray]:
        rows = np.asarray(row, np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= len(table)):
            raise ModelError(f"{name}: rows outside 0..{len(table) - 1}")
        return {"emap": table[rows]}

    return ServedModel(name, "emap", [("row", np.int64, (-1,))], [("emap", np.float32, (-1, table.shape[1]))], infer, batching=False)


def _ort_numpy(ort_type: str) -> type:
    return {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(uint8)": np.uint8, "tensor(int64)": np.int64,
            "tensor(double)": np.float64}[ort_type]


# ---- the server -------------------------------------------------------------------------------------


def require_pytriton() -> None:
    """PyTriton importable, on numpy 1 (its Python backend stub returns empty outputs under numpy 2)."""
    try:
        import pytriton  # noqa: F401
    except ImportError:
        raise VcamdError("`vcamd serve` needs PyTriton (NVIDIA's Triton Inference Server for Python)",
                         fix="install it in an environment of its own: `python3 -m venv .venv-serve && "
                             ".venv-serve/bin/pip install -e '.[serve]'` (README \"The swap on a GPU elsewhere\")") from None
    if int(np.__version__.split(".")[0]) >= 2:
        raise VcamdError(f"PyTriton's Python backend is built for numpy 1; this environment has numpy {np.__version__} "
                         "(every output would come back empty)",
                         fix="serve from an environment of its own: `.venv-serve/bin/pip install -e '.[serve]'` picks numpy 1.26")


def stub_library_path() -> str | None:
    """The folder of this interpreter's libpython, for Triton's Python backend stub.

    The stub links `libpython3.X.so` and finds the system's first; under another build of the same
    Python (pyenv, conda) that one does not match the running interpreter's modules (seen:
    "'_thread.RLock' object has no attribute '_recursion_count'"). The interpreter's own LIBDIR
    first on LD_LIBRARY_PATH makes the stub load the right one."""
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY")
    if not libdir or not ldlib or not (Path(libdir) / ldlib).exists():
        return None
    return str(libdir)


def public_address(listen: ServerAddress) -> ServerAddress:
    """The address a client is told: the one listened on, or this machine's name for "every interface"."""
    if listen.host in ("0.0.0.0", "::"):
        return ServerAddress(socket.getfqdn() or socket.gethostname(), listen.port)
    return listen


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServeOptions:
    listen: ServerAddress
    max_batch: int = MAX_BATCH
    queue_delay_us: int = 0
    instances: int = 1
    renew_pairing: bool = False
    tls: bool = False
    """Mutual TLS on loopback too (beyond it always)."""
    bundle: Path | None = None
    """Where to write the client's pairing bundle (beyond loopback); None: the server's state folder."""
    state: Path | None = None
    """The server's private folder (certificates, token); None: `pairing.state_dir()`."""


def serve(cfg: Config, options: ServeOptions, *, announce: Callable[[str], None] = print) -> None:
    """Run the server until SIGINT/SIGTERM or Triton stops. `announce` gets the lines a user reads."""
    from vcamd.remote import pairing

    require_pytriton()
    listen = options.listen
    if not listen.loopback and listen.host in ("", "*"):
        raise VcamdError("--listen needs a host: 0.0.0.0 (every interface), an address of this machine, or 127.0.0.1")
    libdir = stub_library_path()
    if libdir is not None:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)

    from vcamd.inference.runtime import Sessions

    sessions = Sessions(list(cfg.models.providers), cfg.models.threads)
    models = served_models(cfg, sessions)
    providers = sorted(set(sessions.active_providers().values()))
    state = options.state or pairing.state_dir()
    token = pairing.access_token(state)
    tls: dict[str, Any] = {}
    bundle_path = None
    if options.tls or not listen.loopback:
        files, pair = pairing.server_credentials(state, renew=options.renew_pairing)
        tls = {"grpc_use_ssl": True, "grpc_use_ssl_mutual": True, "grpc_server_cert": files.certificate,
               "grpc_server_key": files.key, "grpc_root_cert": files.ca}
        bundle_path = pairing.write_bundle(pair, public_address(listen), options.bundle or state / "pairing.json")

    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import VALID_TRITON_ENDPOINTS, Triton, TritonConfig, TritonSecurityConfig

    config = TritonConfig(grpc_address=listen.host, grpc_port=listen.port, http_address="127.0.0.1", http_port=free_loopback_port(),
                          allow_metrics=False, allow_gpu_metrics=False, allow_cpu_metrics=False, log_verbose=0, exit_timeout_secs=5,
                          log_file=state / f"tritonserver-{listen.port}.log", **tls)  # Triton's own log: start-up tables, errors; never a tensor
    security = TritonSecurityConfig(access_token=token, restricted_endpoints=sorted(VALID_TRITON_ENDPOINTS - OPEN_ENDPOINTS))
    with Triton(config=config, security_config=security, workspace=_fresh_workspace(listen)) as triton:
        for model in models:
            batching = ModelConfig(batching=True, max_batch_size=options.max_batch,
                                   batcher=DynamicBatcher(max_queue_delay_microseconds=options.queue_delay_us))
            triton.bind(
                model_name=model.name,
                infer_func=[_batched(model.infer)] * options.instances if model.batching else _single(model.infer),
                inputs=[Tensor(name=n, dtype=d, shape=s) for n, d, s in model.inputs],
                outputs=[Tensor(name=n, dtype=d, shape=s) for n, d, s in model.outputs],
                config=batching if model.batching else ModelConfig(batching=False),
                strict=True,
            )
        served = ", ".join(m.name for m in models)
        announce(f"Triton's own log: {state / f'tritonserver-{listen.port}.log'}")
        announce(f"serving {served} on {listen.url} ({'mutual TLS' if tls else 'loopback only'}; "
                 f"ONNX Runtime on {', '.join(providers)})")
        if bundle_path is not None:
            announce(f"pairing bundle for clients: {bundle_path} — copy it to the client and run `vcamd pair {bundle_path.name}` there")
        triton.run()
        announce(READY_LINE)
        triton.serve()


def _fresh_workspace(listen: ServerAddress) -> Path:
    """PyTriton's workspace (its copy of the server binaries, the model store, the sockets between
    Triton's Python backend and this process): one per user and port, in a 0700 folder under the
    temp dir — short, as Unix socket paths must be (108 bytes) — cleared at each start, so a server
    killed without its clean-up leaves no second copy behind."""
    import shutil
    import tempfile

    from vcamd.files.private_files import private_dir

    uid = os.getuid() if hasattr(os, "getuid") else 0
    parent = Path(tempfile.gettempdir()) / f"vcamd-serve-{uid}"
    if parent.is_symlink():  # planted by another user in the shared temp dir: never followed, never cleared through
        raise VcamdError(f"{parent} is a symbolic link; `vcamd serve` keeps its workspace there", fix=f"remove {parent}")
    private_dir(parent)
    path = parent / str(listen.port)
    shutil.rmtree(path, ignore_errors=True)
    return path


def _batched(infer: Callable[..., dict[str, np.ndarray]]) -> Callable[..., Any]:
    from pytriton.decorators import batch

    batched: Callable[..., Any] = batch(infer)  # PyTriton is untyped
    return batched


def _single(infer: Callable[..., dict[str, np.ndarray]]) -> Callable[..., Any]:
    def run(requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        return [infer(**request) for request in requests]

    return run

"""`vcamd serve`: a real NVIDIA Triton Inference Server running the config's face models.

The `tritonserver` binary and its Python backend come from the nvidia-pytriton wheel
(`vcamd.remote.tritonserver`); each served model is a Triton Python-backend model
(`vcamd.remote.backend`) running the model file through ONNX Runtime with this machine's provider
(`[models] providers`: CUDA/TensorRT on a GPU box, the CPU elsewhere) inside Triton's own stub.
Triton batches the requests of every client that arrive while the model is busy (dynamic
batching) and hands them to the model as one batch.

What is served: the swapper (and, for inswapper, its `.emap` companion, the rows of its identity
projection: the client makes the latent itself), the enhancer when its file is here, the parser when set — each
under its `wire.served_name`, with its image tensors as uint8 pixels (`vcamd.remote.wire`). The
loaders are the same classes `vcamd run` uses (`Swapper`, `Enhancer`, `FaceParser`), so a wrong
file is refused here with the same message.

Private by default: gRPC on 127.0.0.1 unless `--listen` says otherwise, and mutual TLS on every
address, loopback too (`vcamd.remote.pairing`): the client's key is in files only its user reads,
and no secret is on a command line (any local user reads those). No HTTP endpoint, no metrics.
Nothing here writes or logs a tensor: requests live in memory (Triton's, and the Python backend's
shared memory, made private to the user before the server is ready: `tritonserver.private_regions`)
and errors name the model, never the data.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vcamd.common.errors import ModelError, VcamdError
from vcamd.common.signalrelay import relayed
from vcamd.config.address import ServerAddress
from vcamd.config.schema import Config
from vcamd.remote.wire import EMAP_SUFFIX, SERVED_ROLES, Arg, Signature, served_name, wire_dtype

log = logging.getLogger(__name__)

MAX_BATCH = 8
"""The most requests Triton hands the model at once (faces from several clients)."""
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
    table: np.ndarray | None = None
    """An `.emap` companion's rows (its whole model)."""


@dataclass(frozen=True)
class LoadedRole:
    """A role this machine serves: its model loaded by the role's own class (its signature checked)."""

    role: str
    name: str  # `wire.served_name` of its [models] value
    model: Any  # Swapper, Enhancer or FaceParser
    session: Any


def load_served_roles(cfg: Config, sessions: Any, roles: set[str] | None = None) -> list[LoadedRole]:
    """The swapper; the enhancer when it is on or its file is here; the parser when set (of `roles`,
    when given) — each loaded with the class `vcamd run` loads it with, so a wrong file is refused
    with the same message."""
    from vcamd.config.roles import role_named
    from vcamd.modelstore.store import ModelStore

    store = ModelStore.from_config(cfg.models)
    wanted = [("swapper", cfg.models.swapper, True), ("enhancer", cfg.models.enhancer, cfg.enhancer.enabled),
              ("parser", cfg.models.parser, True)]
    loaded: list[LoadedRole] = []
    for role, value, required in wanted:
        if not value or role not in SERVED_ROLES or (roles is not None and role not in roles):
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


def served_models(cfg: Config, sessions: Any = None, roles: set[str] | None = None) -> list[ServedModel]:
    """Each role `cfg` serves (of `roles`, when given), described as Triton will serve it (a swapper
    with its `.emap` companion)."""
    from vcamd.inference.runtime import Sessions

    sessions = sessions if sessions is not None else Sessions(list(cfg.models.providers), cfg.models.threads)
    models: list[ServedModel] = []
    for item in load_served_roles(cfg, sessions, roles):
        models.append(_served(item.name, item.role, item.session))
        if item.role == "swapper" and item.model.emap is not None:  # inswapper's; the other families have none
            models.append(served_emap(item.name + EMAP_SUFFIX, item.model.emap))
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


def served_emap(name: str, emap: np.ndarray) -> ServedModel:
    table = np.ascontiguousarray(emap, np.float32)

    def infer(row: np.ndarray) -> dict[str, np.ndarray]:
        rows = np.asarray(row, np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= len(table)):
            raise ModelError(f"{name}: rows outside 0..{len(table) - 1}")
        return {"emap": table[rows]}

    return ServedModel(name, "emap", [("row", np.int64, (-1,))], [("emap", np.float32, (-1, table.shape[1]))], infer, batching=False,
                       table=table)


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


@dataclass(frozen=True)
class ServeOptions:
    listen: ServerAddress
    max_batch: int = MAX_BATCH
    queue_delay_us: int = 0
    instances: int = 1
    renew_pairing: bool = False
    bundle: Path | None = None
    """Where to write the client's pairing bundle (beyond loopback); None: the server's state folder."""
    state: Path | None = None
    """The server's private folder (certificates and keys); None: `pairing.state_dir()`."""


def serve(cfg: Config, options: ServeOptions, *, announce: Callable[[str], None] = print) -> None:
    """Run the server until SIGINT/SIGTERM or Triton stops. `announce` gets the lines a user reads."""
    from vcamd.inference.runtime import Sessions
    from vcamd.remote import pairing, tritonserver

    require_pytriton()
    listen = options.listen
    if not listen.loopback and listen.host in ("", "*"):
        raise VcamdError("--listen needs a host: 0.0.0.0 (every interface), an address of this machine, or 127.0.0.1")
    dist = tritonserver.Distribution.installed()
    _require_free(listen)
    sessions = Sessions(list(cfg.models.providers), cfg.models.threads)
    models = served_models(cfg, sessions)  # each file checked here, with its role's class, before Triton loads it
    providers = sorted(set(sessions.active_providers().values()))
    del sessions  # Triton's stubs load the models; this process only watches the server
    state = options.state or pairing.state_dir()
    files, pair = pairing.server_credentials(state, renew=options.renew_pairing)  # mutual TLS, loopback too: no secret on argv
    tls = {"certificate": files.certificate, "key": files.key, "ca": files.ca}
    bundle_path = None
    if not listen.loopback or options.bundle is not None:
        bundle_path = pairing.write_bundle(pair, public_address(listen), options.bundle or state / "pairing.json")
    workspace = _fresh_workspace(listen)
    config_file = workspace / "config.json"
    config_file.write_text(cfg.model_dump_json(), encoding="utf-8")
    tritonserver.write_python_repository(workspace / "models", models, config_file, max_batch=options.max_batch,
                                         instances=options.instances, queue_delay_us=options.queue_delay_us)
    shm_prefix = f"vcamd_serve_{os.getuid() if hasattr(os, 'getuid') else 0}_{listen.port}_"
    tritonserver.clear_stale_regions(shm_prefix)
    log_file = state / f"tritonserver-{listen.port}.log"
    args = tritonserver.command(dist, workspace / "models", dist.backends(workspace / "backends"), host=listen.host, port=listen.port,
                                log_file=log_file, shm_prefix=shm_prefix, tls=tls)
    announce(f"Triton's own log: {log_file}")
    triton = _Triton(args, tritonserver.environment(dist, stub_library_path()), log_file)
    try:
        # SIGTERM stops Triton, relayed: this thread waits in waitpid(), where a Python handler does not run
        # while the signal lands on another of this process's threads (ONNX Runtime's).
        with relayed({signal.SIGTERM: triton.stop}):
            triton.start_ready(lambda proc: _wait_ready(proc, listen, pair, log_file, lambda: tritonserver.private_regions(shm_prefix)),
                               again=lambda: tritonserver.clear_stale_regions(shm_prefix), announce=announce)
            announce(f"serving {', '.join(m.name for m in models)} on {listen.url} (mutual TLS{'' if listen.loopback else ', beyond loopback'}; "
                     f"ONNX Runtime on {', '.join(providers)})")
            if bundle_path is not None:
                announce(f"pairing bundle for clients: {bundle_path} — copy it to the client and run `vcamd pair {bundle_path.name}` there")
            announce(READY_LINE)
            code = triton.wait()
            if code not in (0, -signal.SIGTERM, -signal.SIGINT):
                raise VcamdError(f"Triton stopped (exit {code}): {_last_error(log_file)}", fix=f"see Triton's log: {log_file}")
    finally:
        triton.close()


class _Triton:
    """The tritonserver process of one `vcamd serve`: started again (`tritonserver.START_ATTEMPTS` starts in
    all) while a start dies of Triton's own start race before it is ready (`tritonserver.aborted_by_start_race`);
    stopped once asked, from any thread (the signal relay's), a start then not tried again."""

    def __init__(self, args: list[str], env: dict[str, str], log_file: Path) -> None:
        self._args, self._env, self._log_file = args, env, log_file
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = False

    def start_ready(self, wait_ready: Callable[[subprocess.Popen[bytes]], None], *, again: Callable[[], Any],
                    announce: Callable[[str], None]) -> None:
        """Start Triton until `wait_ready` returns for one start (its VcamdError when a start ends otherwise);
        `again` runs before each start after the first (what the aborted one left in shared memory)."""
        from vcamd.remote import tritonserver

        for attempt in range(1, tritonserver.START_ATTEMPTS + 1):
            proc, offset = self._start()
            try:
                wait_ready(proc)
                return
            except VcamdError:
                code = proc.poll()
                if (self._stopping or attempt == tritonserver.START_ATTEMPTS
                        or not tritonserver.aborted_by_start_race(code, tritonserver.log_since(self._log_file, offset))):
                    raise
            announce(f"Triton aborted while its Python backend started the models (exit {code}, {tritonserver.START_RACE}: "
                     f"an intermittent fault of Triton's own, triton-inference-server/server#8882); "
                     f"starting it again ({attempt + 1} of {tritonserver.START_ATTEMPTS})")
            log.warning("Triton aborted on its start race (exit %s); starting it again", code)
            again()

    def _start(self) -> tuple[subprocess.Popen[bytes], int]:
        """A new Triton, and where its part of the log begins."""
        from vcamd.remote import tritonserver

        with self._lock:
            if self._stopping:
                raise VcamdError("vcamd serve was stopped while Triton started")
            offset = self._log_file.stat().st_size if self._log_file.exists() else 0
            with self._log_file.open("ab") as out:
                # preexec_fn with a thread of ours running: the signal relay's, which waits in recv() holding no lock.
                self._proc = subprocess.Popen(self._args, env=self._env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                              preexec_fn=tritonserver.child_setup)  # noqa: PLW1509
            return self._proc, offset

    def stop(self) -> None:
        """SIGTERM to the running Triton (none started again after this)."""
        with self._lock:
            self._stopping = True
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()

    def wait(self) -> int:
        assert self._proc is not None
        return self._proc.wait()

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            proc = self._proc
        if proc is not None:
            _stop(proc)


def _require_free(listen: ServerAddress) -> None:
    """The port free on its address (a second server there would fail in Triton's log; this says so first)."""
    host = listen.host
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a killed server's connections in TIME_WAIT do not count
        try:
            s.bind((host, listen.port))
        except OSError as exc:
            raise VcamdError(f"cannot listen on {listen.host}:{listen.port}: {exc.strerror}",
                             fix="stop what runs there, or choose another port with --listen") from None


def _wait_ready(proc: subprocess.Popen[bytes], listen: ServerAddress, pair: Any, log_file: Path, private: Callable[[], Any]) -> None:
    """Until Triton says it is ready — every model loaded (strict readiness) — or it exits; `private`
    (the Python backend's regions made 0600) runs at every look, and once more when it is ready."""
    import time

    import tritonclient.grpc as grpcclient

    host = "127.0.0.1" if listen.host in ("0.0.0.0", "::") else listen.host
    options = {"root_certificates": pair.ca, "private_key": pair.key, "certificate_chain": pair.certificate}
    client = _health_client(grpcclient, f"{host}:{listen.port}", options)
    try:
        while proc.poll() is None:
            private()  # Triton makes a region as each model instance loads, before it listens
            try:
                if client.is_server_ready(client_timeout=1.0):
                    private()
                    return
            except Exception:  # noqa: BLE001 — not listening yet
                pass
            time.sleep(0.02)
    finally:
        client.close()
    raise VcamdError(f"Triton did not start (exit {proc.returncode}): {_last_error(log_file)}", fix=f"see Triton's log: {log_file}")


def _health_client(grpcclient: Any, target: str, tls: dict[str, bytes]) -> Any:
    import grpc

    from vcamd.remote.link import RECONNECT_OPTIONS
    from vcamd.remote.pairing import SERVER_NAME

    # Made before Triton listens: on gRPC's default backoff, a start that took a minute on a busy machine
    # was seen ready up to a minute after it was.
    return grpcclient.InferenceServerClient(target, creds=grpc.ssl_channel_credentials(**tls),
                                            channel_args=[("grpc.ssl_target_name_override", SERVER_NAME), *RECONNECT_OPTIONS])


def _last_error(log_file: Path) -> str:
    """Triton's last error line (its log names the model and the reason; never a tensor)."""
    try:
        lines = log_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "no log"
    errors = [line for line in lines if line.startswith("E")] or lines[-1:]
    return errors[-1][:500] if errors else "no log"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (Triton finishes its requests, 5 s at most), then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _fresh_workspace(listen: ServerAddress) -> Path:
    """The server's workspace (its model repository, the Python backend's folder of links, the
    config its stubs load): one per user and port, in a 0700 folder under the temp dir, cleared at
    each start, so a server killed without its clean-up leaves nothing of itself behind."""
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
    return private_dir(path)

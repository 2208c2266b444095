"""ONNX Runtime sessions: which providers, how many threads, and what really runs.

One `InferenceSession` per model file, created once and shared by every stage that uses the model.
Spinning is off so idle sessions do not burn the cores the running one needs, and after creation
the provider ONNX Runtime actually picked is read back and logged — a CUDA request that silently
fell back to the CPU is the most common "why is it slow" report.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from vcamd.common.errors import ModelError, VcamdError
from vcamd.common.wayout import ways_out
from vcamd.inference.cores import core_split

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime

log = logging.getLogger(__name__)
PROVIDER_REPORT_LOGGER = f"{__name__}.providers"
"""Where each model's provider is reported: the daemon's log keeps it, one-shot commands show it with -v only."""

PROVIDER_NAMES: dict[str, str] = {
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "directml": "DmlExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
"""Our config names → ONNX Runtime provider names."""

AUTO_ORDER = ("cuda", "coreml", "directml", "openvino", "cpu")
"""What "auto" tries, best first. TensorRT is left out: its engine build takes minutes on first use."""

_INSTALL_FIX = {
    "cuda": "install the GPU build: `pip uninstall -y onnxruntime && pip install onnxruntime-gpu` (and a matching CUDA/cuDNN)",
    "tensorrt": "install onnxruntime-gpu and TensorRT, or use providers = [\"cuda\"]",
    "coreml": "CoreML exists only on macOS with the standard `onnxruntime` wheel",
    "directml": "install `onnxruntime-directml` (Windows) instead of onnxruntime",
    "openvino": "install `onnxruntime-openvino` instead of onnxruntime",
    "cpu": "reinstall onnxruntime",
}

_ORT_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino", "onnxruntime-silicon")


# Not hardware on this machine: AzureExecutionProvider (in the standard wheels since 1.16) sends
# inference to a cloud endpoint, which nothing here configures or would want for a face.
_NOT_LOCAL = frozenset({"AzureExecutionProvider"})


def available_providers() -> list[str]:
    """The execution providers ONNX Runtime offers on this machine, best first."""
    import onnxruntime

    return [p for p in onnxruntime.get_available_providers() if p not in _NOT_LOCAL]


def resolve_providers(requested: list[str], available: list[str] | None = None) -> list[str]:
    """Map config names to ONNX Runtime provider names, in order, always ending with the CPU.

    "auto" picks the best available of CUDA, CoreML, DirectML, OpenVINO, then the CPU. An explicit
    provider that this onnxruntime install lacks is an error (never a silent CPU fallback).
    """
    available = available_providers() if available is None else available
    if not requested or requested == ["auto"]:
        best = next(PROVIDER_NAMES[n] for n in AUTO_ORDER if PROVIDER_NAMES[n] in available)
        return _with_cpu([best])
    resolved = []
    for name in requested:
        if name not in PROVIDER_NAMES:
            raise VcamdError(
                f"[models] providers: unknown provider {name!r}",
                fix=f"use one of auto, {', '.join(PROVIDER_NAMES)}",
            )
        ort_name = PROVIDER_NAMES[name]
        if ort_name not in available:
            problem = gpu_install_problem()
            raise VcamdError(
                f"[models] providers: {name} ({ort_name}) is not available in this onnxruntime "
                f"(available: {', '.join(available)})",
                fix=problem or _INSTALL_FIX[name] + ", or set providers = [\"auto\"]",
            )
        resolved.append(ort_name)
    return _with_cpu(resolved)


def _with_cpu(providers: list[str]) -> list[str]:
    # The CPU provider last lets ORT place the few ops a GPU provider lacks; it is not a silent
    # fallback for the whole model (Sessions checks what the session really runs on).
    cpu = PROVIDER_NAMES["cpu"]
    return [p for p in providers if p != cpu] + [cpu]


def installed_onnxruntimes() -> dict[str, str]:
    """ONNX Runtime distributions installed in this environment → version."""
    found = {}
    for dist in _ORT_DISTRIBUTIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def gpu_install_problem(installed: dict[str, str] | None = None) -> str | None:
    """Explain a broken install (two ONNX Runtime packages, e.g. onnxruntime + onnxruntime-gpu), else None.

    insightface depends on the CPU `onnxruntime`; installed beside `onnxruntime-gpu` the two
    packages overwrite each other's files and the GPU providers disappear.
    """
    installed = installed_onnxruntimes() if installed is None else installed
    if len(installed) < 2:
        return None
    accelerated = [name for name in installed if name != "onnxruntime"]
    keep = accelerated[0]
    listed = ", ".join(f"{name} {version}" for name, version in installed.items())
    return (
        f"several ONNX Runtime packages are installed together ({listed}) and overwrite each other; "
        f"fix: `pip uninstall -y {' '.join(installed)} && pip install {keep}`"
    )


@runtime_checkable
class ServedElsewhere(Protocol):
    """A session whose model file is on a server, not here (`vcamd.remote.sessions.RemoteSession`):
    what the code would read from the graph (the swapper's `emap`) it asks the server for."""

    def initializer(self, name: str, shape: tuple[int, ...]) -> np.ndarray: ...


class Sessions:
    """One InferenceSession per model file (and per input-size variant), created on first use;
    safe from any thread, different models load side by side."""

    def __init__(
        self,
        providers: list[str] | None = None,
        threads: int = 0,
        *,
        wrap: Callable[[Any, Path], Any] | None = None,
    ) -> None:
        """`wrap(session, path)`, when given, receives every new session and returns what callers
        get instead — the seam for fault injection in tests and for profiling."""
        self.providers = resolve_providers(list(providers or ["auto"]))
        self.threads = threads or os.cpu_count() or 1
        self.core_split = core_split(threads)
        """Where the swap worker's sessions run (`vcamd.inference.cores`); None: on `helper_threads` threads, unpinned."""
        self._wrap = wrap
        self._sessions: dict[tuple[Path, tuple[int, int] | None], _Slot] = {}
        self._active: dict[str, str] = {}
        self._copies: dict[Path, Path] = {}
        """Model file → the int8 copy its sessions run instead (`run_copy`)."""
        self._lock = threading.Lock()  # guards the dicts; a session is created under its own slot's lock

    def _background_pool(self) -> "_Pool":
        """The pool of a `background` session: one thread per core where the swap worker can
        choose its cores (`core_split`: the pool pinned off the loop's core, the worker following
        the machine's load); elsewhere `threads`, less one core when that would take every core —
        the loop keeps one whatever the swap model does."""
        split = self.core_split
        if split is None:
            return _Pool(helper_threads(self.threads, os.cpu_count() or 1))
        return _Pool(split.threads, split.pool_affinities())

    def _options(self, pool: "_Pool", *, optimized: bool = False) -> "onnxruntime.SessionOptions":
        """`optimized`: for a graph ONNX Runtime already optimised (`vcamd.inference.ortcache`): no more optimising."""
        import onnxruntime

        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = pool.threads
        if pool.affinities is not None:
            opts.add_session_config_entry("session.intra_op_thread_affinities", pool.affinities)
        opts.inter_op_num_threads = 1
        level = onnxruntime.GraphOptimizationLevel
        opts.graph_optimization_level = level.ORT_DISABLE_ALL if optimized else level.ORT_ENABLE_ALL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        opts.log_severity_level = 3  # ORT warnings (e.g. the unused `emap` initializer) are noise here
        return opts

    def get(self, path: Path | str, *, keep_optimized: bool = False, background: bool = False) -> "onnxruntime.InferenceSession":
        """The session for a model file, created once. `keep_optimized`: load it from its optimised
        graph kept on disk (`vcamd.inference.ortcache`; built on the first load) — for the model a start waits
        for, the swapper. `background`: the model runs on a helper thread beside the publishing
        loop (the swap worker's swapper and enhancer): its session's pool (`_background_pool`)
        leaves the loop a core while the machine is quiet (`vcamd.inference.cores`;
        with an unpinned pool on every core, a pool thread
        took the loop's core: one 720p frame took 137 ms while inswapper ran). Not a lower
        priority: against a call app at normal priority a nice-10 swapper got a tenth of its share
        (the face 4–7 s old), and a pool mixing priorities waits in every operator for its
        slowest thread (docs/performance.md, "A call's worth of load")."""
        return self._get(Path(path), None, keep_optimized, background)

    def run_copy(self, model: Path | str, copy: Path) -> None:
        """Sessions of `model` made from now on run `copy` instead: its int8 copy, checked against it
        (`vcamd.inference.precision` decides, `vcamd.inference.int8cache` keeps it). Callers keep naming (and reading)
        the model file itself; `runs_copy` says whether the copy really loaded."""
        with self._lock:
            self._copies[Path(model).expanduser().resolve()] = Path(copy)

    def runs_copy(self, model: Path | str) -> bool:
        """Whether `model`'s sessions run its int8 copy (False too when the copy failed to load)."""
        with self._lock:
            return Path(model).expanduser().resolve() in self._copies

    def copy_session(self, model: Path | str, copy: Path, *, background: bool = False) -> "onnxruntime.InferenceSession":
        """A new session of `model`'s int8 copy `copy` (with `get`'s pool for `background`), for a
        running model to switch to; from now on `model`'s sessions run the copy, and the float
        session is no longer kept here (554 MB for inswapper: freed once its user lets go of it).
        Raises ModelError when the copy cannot be loaded (nothing changes then)."""
        return self.copy_sessions(model, copy, [None], background=background)[None]

    def copy_sessions(self, model: Path | str, copy: Path, shapes: list[tuple[int, int] | None], *,
                      background: bool = False) -> dict[tuple[int, int] | None, "onnxruntime.InferenceSession"]:
        """`copy_session` for each input shape in `shapes` (None: the model's own; else the copy
        rewritten to that height × width, as `get_resized` rewrites the model): the detector's copy
        serves its full looks and every crop and tile shape the tracker runs. The float sessions of
        other shapes are dropped here too, so a shape asked for later is made from the copy.
        Raises ModelError when one cannot be loaded (nothing changes then)."""
        path = Path(model).expanduser().resolve()
        pool = self._background_pool() if background else _Pool(self.threads)
        made: dict[tuple[int, int] | None, Any] = {}
        for hw in dict.fromkeys(shapes):
            session = self._new_session(Path(copy), _model_at(Path(copy), hw), pool)
            self._record(path, session.get_providers()[0], hw)
            made[hw] = self._wrap(session, path) if self._wrap is not None else session
        with self._lock:
            self._copies[path] = Path(copy)
            slots = {hw: self._sessions.get((path, hw)) for hw in made}
            for key in [key for key in self._sessions if key[0] == path and key[1] not in made]:
                del self._sessions[key]
        for hw, slot in slots.items():
            if slot is not None:
                with slot.lock:
                    slot.session = made[hw]
        return made

    def get_resized(self, path: Path | str, input_hw: tuple[int, int]) -> "onnxruntime.InferenceSession":
        """A session for a fully convolutional model whose graph fixes its input size (e.g. an
        SCRFD exported at 640²), rewritten to take `input_hw` (height, width) instead.

        Used for tracking, where the detector runs on a small crop around a known face.
        """
        return self._get(Path(path), (int(input_hw[0]), int(input_hw[1])))

    def _get(self, path: Path, input_hw: tuple[int, int] | None, keep_optimized: bool = False,
             background: bool = False) -> "onnxruntime.InferenceSession":
        path = path.expanduser().resolve()
        key = (path, input_hw)
        with self._lock:
            slot = self._sessions.setdefault(key, _Slot())
        # One model's seconds of loading (a 554 MB swapper) do not hold up another's: models load
        # side by side; two callers of the same one wait for the one session. A failed creation
        # leaves the slot empty (the next caller tries again and gets the error anew).
        with slot.lock:
            if slot.session is None:
                pool = self._background_pool() if background else _Pool(self.threads)
                slot.session = self._create(path, input_hw, keep_optimized, pool)
            return slot.session

    def _create(self, path: Path, input_hw: tuple[int, int] | None, keep_optimized: bool, pool: "_Pool") -> "onnxruntime.InferenceSession":
        if not path.is_file():
            raise ModelError(f"model file {path} does not exist", fix=f"{ways_out()} (or fix the path in [models])")
        copy = self._copies.get(path)
        session = self._from_copy(path, copy, input_hw, pool) if copy is not None else None
        if session is None:
            session = self._from_model(path, input_hw, keep_optimized, pool)
        self._record(path, session.get_providers()[0], input_hw)
        return self._wrap(session, path) if self._wrap is not None else session

    def _from_model(self, path: Path, input_hw: tuple[int, int] | None, keep_optimized: bool, pool: "_Pool") -> "onnxruntime.InferenceSession":
        if input_hw is not None:
            return self._new_session(path, _with_input_size(path, input_hw), pool)
        if keep_optimized:
            return self._from_optimized(path, pool)
        return self._new_session(path, str(path), pool)

    def _from_copy(self, path: Path, copy: Path, input_hw: tuple[int, int] | None, pool: "_Pool") -> "onnxruntime.InferenceSession | None":
        """The session of `path`'s int8 copy (rewritten to `input_hw` when given, as `get_resized`
        rewrites the model); None when the copy does not load — the model itself serves then (said
        in the log; `runs_copy` is False after)."""
        try:
            return self._new_session(copy, _model_at(copy, input_hw), pool)
        except ModelError as exc:
            log.warning("%s: its int8 copy %s does not load (%s); the float model serves", path.name, copy, exc)
            with self._lock:
                self._copies.pop(path, None)
            return None

    def _record(self, path: Path, really: str, input_hw: tuple[int, int] | None) -> None:
        """Say which provider really runs a new session (a warning when ONNX Runtime fell back)."""
        requested = self.providers[0]
        if really != requested:
            log.warning(
                "%s runs on %s, not on the requested %s (ONNX Runtime fell back); %s",
                path.name, really, requested, gpu_install_problem() or "check the GPU driver / CUDA install (`vcamd doctor`)",
            )
        elif input_hw is None:
            logging.getLogger(PROVIDER_REPORT_LOGGER).info("%s runs on %s", path.name, really)
        else:  # the same model again at a tracking size: already reported once
            log.debug("%s (input %d×%d) runs on %s", path.name, input_hw[1], input_hw[0], really)
        with self._lock:
            self._active[path.name] = really

    def _new_session(self, path: Path, source: str | bytes, pool: "_Pool", *, save_to: Path | None = None) -> "onnxruntime.InferenceSession":
        import onnxruntime

        opts = self._options(pool)
        if save_to is not None:
            opts.optimized_model_filepath = str(save_to)
        try:
            return onnxruntime.InferenceSession(source, sess_options=opts, providers=self.providers)
        except Exception as exc:  # ORT's pybind exceptions share no useful base class but Exception
            raise _load_error(path, exc) from None

    def _from_optimized(self, path: Path, pool: "_Pool") -> "onnxruntime.InferenceSession":
        """The session from the model's optimised graph kept on disk; on a miss (or an entry ONNX
        Runtime refuses) from the model itself, keeping its optimised graph for the next time. The
        cache never makes a load fail: a model's own error is the one raised."""
        import onnxruntime

        from vcamd.inference import ortcache

        entry = ortcache.entry_for(path, self.providers, onnxruntime.__version__)
        if entry is None:
            return self._new_session(path, str(path), pool)
        if entry.ready():
            try:
                session = onnxruntime.InferenceSession(str(entry.graph), sess_options=self._options(pool, optimized=True), providers=self.providers)
            except Exception as exc:  # whatever ORT raises: the entry goes, the model is loaded itself
                log.warning("%s: its kept optimised graph %s is unusable (%s); optimising the model again",
                            path.name, entry.graph, _first_line(exc))
                entry.drop()
            else:
                log.debug("%s: loaded from its optimised graph %s", path.name, entry.graph)
                return session
        save_to = entry.begin()
        try:
            session = self._new_session(path, str(path), pool, save_to=save_to)
        except ModelError:
            entry.abandon()
            if save_to is None:
                raise
            session = self._new_session(path, str(path), pool)  # the model's own error, if it has one; else writing the graph failed
            log.warning("%s: could not write its optimised graph to %s; loaded without keeping it", path.name, save_to.parent)
            return session
        entry.commit()
        return session

    def active_providers(self) -> dict[str, str]:
        """Model file name → the provider that really runs it."""
        with self._lock:
            return dict(self._active)


def helper_threads(threads: int, cores: int) -> int:
    """`threads` for a model beside the loop, at most `cores - 1` (never below 1)."""
    return max(1, min(threads, cores - 1))


@dataclass(frozen=True, slots=True)
class _Pool:
    """A session's intra-op threads, and where ONNX Runtime pins them (`session.intra_op_thread_affinities`; None: nowhere)."""

    threads: int
    affinities: str | None = None


class _Slot:
    """Where one session is created once: its lock, then the session."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.session: Any = None


def _load_error(path: Path, exc: Exception) -> ModelError:
    """Say whether the file is broken (re-download) or the runtime failed (providers, drivers)."""
    kind = type(exc).__name__
    if kind in ("InvalidProtobuf", "InvalidGraph", "NoSuchFile", "NotImplemented") or "Protobuf" in str(exc):
        return ModelError(
            f"model file {path} cannot be loaded by ONNX Runtime ({_first_line(exc)}); it is corrupt, truncated or not an ONNX model",
            fix=ways_out(pull_note=" to download it again (`vcamd models verify` checks the hashes)"),
        )
    return ModelError(
        f"ONNX Runtime could not create a session for {path.name} ({kind}: {_first_line(exc)})",
        fix=gpu_install_problem() or "try providers = [\"cpu\"] in [models] to rule out the GPU setup; `vcamd doctor` checks it",
    )


def _model_at(path: Path, input_hw: tuple[int, int] | None) -> str | bytes:
    """What a session is made from: the model file as it is (None), or its bytes rewritten to take `input_hw`."""
    return str(path) if input_hw is None else _with_input_size(path, input_hw)


def _with_input_size(path: Path, input_hw: tuple[int, int]) -> bytes:
    """The model's bytes with its first input's H, W set and all other shapes left to inference
    (`vcamd.inference.onnxwire`, without the onnx package: see there why)."""
    from vcamd.inference.onnxwire import WireError, with_input_size

    try:
        return with_input_size(path.read_bytes(), input_hw)
    except OSError as exc:
        raise ModelError(f"model file {path} cannot be read ({exc.strerror or exc})", fix=ways_out(pull_note=" to download it again")) from None
    except WireError as exc:
        raise ModelError(f"model file {path} is not a readable ONNX model ({_first_line(exc)})", fix=ways_out(pull_note=" to download it again")) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__

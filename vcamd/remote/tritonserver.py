"""The `tritonserver` binary the nvidia-pytriton wheel ships, run on a model repository of Triton
Python-backend models (`vcamd.remote.backend`).

Each served model is a folder of Triton's own model repository: `config.pbtxt` (built with Triton's
schema, `model_config_pb2`: Python backend, dynamic batching, instance groups) and `1/model.py`,
which names `backend.TritonPythonModel`. Triton's Python backend runs it in its stub process and
hands it each batch over the backend's shared memory — one hop, where PyTriton's bound functions
took a second (the stub forwarding each request to the binding process over its own shared memory
and ZMQ, ~2 ms a request here). PyTriton is still what installs Triton: its wheel carries the
binary, the Python backend and a stub built for each Python version; this module lays them out as
Triton expects (a backend folder of links, the stub for this interpreter) and starts the binary.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vcamd.common.errors import VcamdError

CONFIG_PARAMETER = "vcamd_config"
"""The model config's parameter naming the JSON file of the server's `Config` (in its private workspace)."""
ROLE_PARAMETER = "vcamd_role"
"""The model config's parameter naming the served role (`wire.SERVED_ROLES`, or "emap")."""
TABLE_FILE = "emap.npy"
"""Beside an `.emap` companion's model.py: the swapper's emap rows, so its stub need not load the swapper."""
BACKEND_SHM_BYTES = 4 * 2**20
"""The Python backend's first shared memory per model instance (grown 1 MB at a time as batches need)."""
MODEL_PY = "from vcamd.remote.backend import TritonPythonModel  # noqa: F401 — Triton's Python backend looks for this name\n"
START_RACE = "boost::interprocess::lock_exception"
"""What Triton's log says when its Python backend aborts the whole server while model instances start side
by side: an intermittent fault of Triton's own (triton-inference-server/server#8882), seen here once, in a CI
run, and in none of 30 starts in a row under load. A start it ended is tried again (`aborted_by_start_race`)."""
START_ATTEMPTS = 3
"""Starts of Triton at most for one `vcamd serve`, while each ends in START_RACE before the server is ready."""
TRITON_TYPES = {np.uint8: "TYPE_UINT8", np.float32: "TYPE_FP32", np.float16: "TYPE_FP16", np.int64: "TYPE_INT64", np.float64: "TYPE_FP64"}


@dataclass(frozen=True)
class Distribution:
    """Where the wheel keeps Triton: the binary, its shared libraries, the Python backend, the stubs."""

    binary: Path
    libraries: Path
    python_backend: Path
    stub: Path

    @classmethod
    def installed(cls) -> Distribution:
        from pytriton.utils.distribution import get_libs_path, get_root_module_path, get_stub_path

        root = get_root_module_path() / "tritonserver"
        found = cls(root / "bin" / "tritonserver", Path(get_libs_path()), root / "backends" / "python",
                    Path(get_stub_path(f"{sys.version_info.major}.{sys.version_info.minor}")))
        missing = [p for p in (found.binary, found.python_backend / "libtriton_python.so", found.stub) if not p.exists()]
        if missing:
            raise VcamdError(f"the nvidia-pytriton wheel lacks {', '.join(map(str, missing))} (Triton for Python "
                             f"{sys.version_info.major}.{sys.version_info.minor})",
                             fix="reinstall it: `.venv-serve/bin/pip install --force-reinstall nvidia-pytriton`")
        return found

    def backends(self, folder: Path) -> Path:
        """A backend folder for `--backend-directory`: the Python backend's files, linked, and the stub built for this interpreter."""
        python = folder / "python"
        python.mkdir(parents=True, exist_ok=True)
        for target in (self.python_backend / "libtriton_python.so", self.python_backend / "triton_python_backend_utils.py", self.stub):
            (python / target.name).symlink_to(target)
        return folder


def write_python_repository(folder: Path, models: Sequence[Any], config_file: Path, *, max_batch: int, instances: int,
                            queue_delay_us: int) -> list[str]:
    """A Triton model repository with each of `models` (`serve.ServedModel`) as a Python-backend model."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    for model in models:
        batching = model.batching and max_batch > 0
        config = model_config_pb2.ModelConfig(name=model.name, backend="python", max_batch_size=max_batch if batching else 0)
        for name, dtype, shape in model.inputs:
            config.input.add(name=name, data_type=TRITON_TYPES[dtype], dims=list(shape))
        for name, dtype, shape in model.outputs:
            config.output.add(name=name, data_type=TRITON_TYPES[dtype], dims=list(shape))
        if batching:
            config.dynamic_batching.max_queue_delay_microseconds = queue_delay_us
        group = config.instance_group.add(count=instances if model.batching else 1)
        group.kind = model_config_pb2.ModelInstanceGroup.Kind.KIND_CPU  # the stub's kind; ONNX Runtime picks the device
        config.parameters[CONFIG_PARAMETER].string_value = str(config_file)
        config.parameters[ROLE_PARAMETER].string_value = model.role
        (folder / model.name / "1").mkdir(parents=True)
        if model.table is not None:  # the swapper's emap rows: the companion's stub loads them, not the whole swapper
            np.save(folder / model.name / "1" / TABLE_FILE, model.table)
        (folder / model.name / "1" / "model.py").write_text(MODEL_PY, encoding="utf-8")
        (folder / model.name / "config.pbtxt").write_text(text_format.MessageToString(config), encoding="utf-8")
    return [m.name for m in models]


def command(dist: Distribution, repository: Path, backends: Path, *, host: str, port: int, log_file: Path,
            shm_prefix: str, tls: dict[str, Path]) -> list[str]:
    """tritonserver's command line: gRPC alone (no HTTP, no metrics), mutual TLS. Paths only, no
    secret: every local user reads a command line (/proc/PID/cmdline), so the client's key — the
    one way in — stays in its 0600 file."""
    return [str(dist.binary), f"--model-repository={repository}", f"--backend-directory={backends}",
            "--disable-auto-complete-config", "--allow-http=false", "--allow-metrics=false", "--allow-gpu-metrics=false",
            "--allow-cpu-metrics=false", f"--grpc-address={host}", f"--grpc-port={port}", "--log-verbose=0", f"--log-file={log_file}",
            "--exit-timeout-secs=5", f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
            f"--backend-config=python,shm-default-byte-size={BACKEND_SHM_BYTES}", "--backend-config=python,shm-growth-byte-size=1048576",
            "--grpc-use-ssl=true", "--grpc-use-ssl-mutual=true", f"--grpc-server-cert={tls['certificate']}",
            f"--grpc-server-key={tls['key']}", f"--grpc-root-cert={tls['ca']}"]


def environment(dist: Distribution, libdir: str | None) -> dict[str, str]:
    """The binary's libraries; for the stub, this interpreter's libpython first (`serve.stub_library_path`)
    and this environment's `bin` first on PATH, so the stub's Python finds this environment's packages."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", ""), str(dist.libraries)) if p)
    env["PATH"] = os.pathsep.join((str(Path(sys.prefix) / "bin"), env.get("PATH", "")))
    return env


def aborted_by_start_race(exit_code: int | None, log_since_start: str) -> bool:
    """Whether a Triton that exited before it was ready died of START_RACE (SIGABRT, boost's exception in
    what it logged since it started): a fault of its own to start again, not a model or setting to fix."""
    return exit_code == -signal.SIGABRT and START_RACE in log_since_start


def log_since(log_file: Path, offset: int) -> str:
    """What `log_file` holds past `offset` (bytes): the part one start of the server wrote (all of it when the
    file is shorter: made anew since)."""
    try:
        with log_file.open("rb") as f:
            f.seek(offset if offset <= os.fstat(f.fileno()).st_size else 0)
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def clear_stale_regions(prefix: str, shm: Path = Path("/dev/shm")) -> int:
    """Remove the Python backend's shared memory left by a server killed on this port (SIGKILL leaves
    them behind). Called only once the port is known free: no live server of ours has this prefix."""
    removed = 0
    for region in shm.glob(prefix + "*") if shm.is_dir() else ():
        with contextlib.suppress(OSError):
            region.unlink()
            removed += 1
    return removed


def private_regions(prefix: str, shm: Path = Path("/dev/shm")) -> int:
    """Make the Python backend's regions of this server (`prefix`) readable by their user alone; how many there are.

    Triton's Python backend makes one region per model instance (`prefix` + a UUID) as the instance
    loads — before the server listens, and never later here: no stub restart, no model control —
    through boost, which sets mode 0644 whatever the umask. Growth resizes the same region (its mode
    stays). `vcamd serve` calls this while Triton starts and once more when it is ready, before a
    client can send a crop."""
    count = 0
    for region in shm.glob(prefix + "*") if shm.is_dir() else ():
        with contextlib.suppress(FileNotFoundError):
            if region.stat().st_mode & 0o077:
                os.chmod(region, 0o600)
            count += 1
    return count


def child_setup() -> None:
    """In the server's process before it runs: it ends with `vcamd serve`, even one killed outright
    (its stubs end with it: the Python backend watches its parent)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)

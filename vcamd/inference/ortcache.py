"""The swapper's graph as ONNX Runtime optimised it, kept on disk so that a start skips the optimising.

Creating the inswapper session at `ORT_ENABLE_ALL` spends most of its 1.5–3 s rewriting the graph
(the NCHWc layout transform of 554 MB of weights) before the first swap can run. Saved once
(`SessionOptions.optimized_model_filepath`) and loaded with optimisations off, the same graph loads
in ~0.7 s and runs exactly as fast (docs/performance.md, "Cold start"). The first start that builds
an entry pays for writing it (~1.5 s more, once); every later start saves the optimising.

An optimised graph is only valid where it was made: the ONNX Runtime version, the execution
providers (only the CPU provider is cached: GPU providers place and fuse nodes their own way) and
the CPU (the NCHWc block size follows its vector width). An entry records those and the model
file's identity (resolved path, size, modification time) in its key; one that does not match is
rebuilt and replaces it, so the cache holds at most one graph per model file (entries of model
files that are gone are removed). Everything here fails soft: a cache that cannot be read or
written is logged and the model is loaded the ordinary way — never an error of its own.

Beside each graph, `kept_array` keeps what vcamd reads from the model file itself (the swapper's
`emap`, 1 MB), so a start that loads the kept graph does not walk the model file at all.

Where: `<user cache dir>/optimized/` (`~/.cache/facelive/optimized` on Linux; `$VCAMD_CACHE_DIR`
overrides), 0600 files in a 0700 folder; each entry is `<id>.onnx` with its key in `<id>.json`, written after the graph (the
key's presence marks a complete entry). Delete the folder to drop the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import platform
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FORMAT = 1
"""The key's own version: bumped when what an entry holds changes."""

CPU_PROVIDERS = ["CPUExecutionProvider"]


def cache_dir() -> Path:
    """`<user cache dir>/optimized`; `$VCAMD_CACHE_DIR` when set (`vcamd bench` keeps the graphs of
    its stand-in models in its own temporary folder)."""
    import platformdirs

    from vcamd.config.folders import APP_NAME

    if os.environ.get("VCAMD_CACHE_DIR"):
        return Path(os.environ["VCAMD_CACHE_DIR"])
    return Path(platformdirs.user_cache_dir(APP_NAME)) / "optimized"


def cpu_signature() -> str:
    """What the optimised graph depends on in the CPU: its model and feature flags (Linux), else
    what the platform says of the processor."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    first = text.split("\n\n", 1)[0]
    lines = [line.strip() for line in first.splitlines() if line.split(":", 1)[0].strip() in wanted]
    described = "\n".join(lines) or f"{platform.processor()}"
    return hashlib.sha256(f"{platform.machine()}\n{described}".encode()).hexdigest()[:16]


def model_key(model: Path, providers: list[str], ort_version: str) -> dict[str, Any]:
    st = model.stat()
    return {"format": FORMAT, "model": str(model), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "onnxruntime": ort_version, "providers": list(providers), "optimization": "all", "cpu": cpu_signature()}


@dataclass
class Entry:
    """The cached graph of one model file: `graph` when `ready`, else built through `temporary`."""

    graph: Path
    key_file: Path
    key: dict[str, Any]
    temporary: Path | None = None

    def ready(self) -> bool:
        try:
            recorded = json.loads(self.key_file.read_text(encoding="utf-8"))
            return isinstance(recorded, dict) and recorded.get("key") == self.key and self.graph.stat().st_size == recorded.get("graph_size")
        except (OSError, ValueError):
            return False

    def begin(self) -> Path | None:
        """A fresh 0600 file for ONNX Runtime to write the optimised graph to; None when the cache
        cannot take it now (no room for it, the folder not writable)."""
        from vcamd.files.private_files import open_private_fd, private_dir

        try:
            folder = private_dir(self.graph.parent)
            free = shutil.disk_usage(folder).free
            if free < 2 * self.key["size"]:  # never fill the disk for a cache
                log.info("not keeping the optimised graph of %s: %d MB free in %s", Path(self.key["model"]).name, free // 2**20, folder)
                return None
            self.temporary = folder / f".{self.graph.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            os.close(open_private_fd(self.temporary, os.O_WRONLY))
        except OSError as exc:
            log.warning("cannot keep optimised model graphs in %s: %s", self.graph.parent, exc)
            self.temporary = None
        return self.temporary

    def commit(self) -> None:
        """The graph was written: make it the entry (then its key), and drop entries of model files
        that are gone."""
        from vcamd.files.private_files import write_private_atomic

        if self.temporary is None:
            return
        try:
            size = self.temporary.stat().st_size
            os.replace(self.temporary, self.graph)
            write_private_atomic(self.key_file, json.dumps({"key": self.key, "graph_size": size}, indent=1) + "\n")
        except OSError as exc:
            log.warning("could not keep the optimised graph of %s: %s", Path(self.key["model"]).name, exc)
            self.abandon()
            return
        self.temporary = None
        log.info("%s: its optimised graph is kept in %s (%d MB): later starts load it without optimising again",
                 Path(self.key["model"]).name, self.graph.parent, size // 10**6)
        _prune(self.graph.parent)

    def abandon(self) -> None:
        if self.temporary is not None:
            with contextlib.suppress(OSError):
                self.temporary.unlink(missing_ok=True)
            self.temporary = None

    def drop(self) -> None:
        """The entry is unusable (ONNX Runtime refused it): removed, to be built again."""
        for path in (self.key_file, self.graph):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)


def kept_array(model: Path, name: str, compute: Callable[[], np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """An array read from a model file (the swapper's `emap`), kept beside the optimised graphs:
    a start that loads the kept graph does not read the model file at all, and on a cold page
    cache walking its fields to the array costs 0.3–0.9 s of small reads across 554 MB. Keyed by
    the model file's identity (resolved path, size, mtime); a missing, stale, unreadable or
    misshapen one is computed again (`compute()`, whose errors are the caller's) and rewritten.
    Read with `allow_pickle=False`."""
    from vcamd.files.private_files import private_dir, write_private_atomic

    try:
        st = model.stat()
    except OSError:
        return compute()
    key = json.dumps({"format": FORMAT, "model": str(model), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "name": name})
    path = cache_dir() / f"{_entry_name(model)}.{name}.npz"
    try:
        with np.load(path, allow_pickle=False) as kept:
            stored: np.ndarray = kept["value"]
            if str(kept["key"]) == key and stored.shape == shape:
                return stored
    except FileNotFoundError:
        pass
    except Exception as exc:  # noqa: BLE001 — a damaged file of ours: computed again, never an error
        log.info("%s: its kept %s (%s) is unreadable (%s); reading it from the model again", model.name, name, path, exc)
    value = compute()
    try:
        data = io.BytesIO()
        np.savez(data, value=value, key=np.array(key))
        private_dir(path.parent)
        write_private_atomic(path, data.getvalue())
    except OSError as exc:
        log.info("%s: could not keep its %s in %s: %s", model.name, name, path.parent, exc)
    return value


def _entry_name(model: Path) -> str:
    return hashlib.sha256(str(model).encode()).hexdigest()[:24]


def entry_for(model: Path, providers: list[str], ort_version: str, folder: Path | None = None) -> Entry | None:
    """The cache entry for `model` loaded on `providers`; None where the cache does not apply (GPU
    providers) or the model file cannot be read (the ordinary load says why)."""
    if list(providers) != CPU_PROVIDERS:
        return None
    try:
        key = model_key(model, providers, ort_version)
    except OSError:
        return None
    folder = folder or cache_dir()
    name = _entry_name(model)
    return Entry(folder / f"{name}.onnx", folder / f"{name}.json", key)


def _prune(folder: Path) -> None:
    """Remove entries whose model file is gone, and temporaries a killed process left (a day old)."""
    import time

    try:
        children = list(folder.iterdir())
    except OSError:
        return
    for key_file in (p for p in children if p.suffix == ".json"):
        try:
            model = Path(json.loads(key_file.read_text(encoding="utf-8"))["key"]["model"])
            gone = not model.exists()
        except (OSError, ValueError, KeyError, TypeError):
            gone = True
        if gone:
            for path in (key_file, key_file.with_suffix(".onnx")):
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
    for array in (p for p in children if p.suffix == ".npz"):
        try:
            with np.load(array, allow_pickle=False) as kept:
                gone = not Path(json.loads(str(kept["key"]))["model"]).exists()
        except Exception:  # noqa: BLE001 — unreadable: of no use either
            gone = True
        if gone:
            with contextlib.suppress(OSError):
                array.unlink(missing_ok=True)
    # A graph without its key (a process killed between the two writes) or a temporary left by a
    # killed process: removed once a day old (younger ones may be another process's, in progress).
    left = [p for p in children if (p.name.startswith(".") and p.suffix == ".tmp") or (p.suffix == ".onnx" and not p.with_suffix(".json").exists())]
    for path in left:
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime > 86400:
                path.unlink()

"""`[runtime] max_memory_gb`: cap the daemon's memory, and refuse models that cannot fit under it.

The cap is the address-space limit (RLIMIT_AS) on Linux and macOS: an allocation past it fails with
MemoryError inside the process instead of the whole desktop swapping. It is a limit on address
space, not on resident memory; GPU drivers (CUDA, TensorRT) reserve far more address space than
they use, so the cap is for CPU runs. Windows has no such limit: a warning says the cap is ignored.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from pathlib import Path

from vcamd.common.errors import VcamdError

log = logging.getLogger(__name__)

GB = 1024**3
ORT_OVERHEAD = 2.0
"""Rough peak memory of an ONNX Runtime session relative to its model file (weights + arena)."""


def apply_memory_cap(max_gb: float) -> int | None:
    """Limit this process's address space to `max_gb` GB; 0 = no cap.

    Returns the limit applied in bytes, or None when there is none (0, or unsupported here).
    Raises VcamdError when the process already uses more than the cap.
    """
    if max_gb <= 0:
        return None
    try:
        import resource
    except ImportError:
        log.warning(
            "[runtime] max_memory_gb = %g is not supported on %s; running without a memory cap", max_gb, sys.platform
        )
        return None
    limit = int(max_gb * GB)
    in_use = _address_space_in_use()
    if in_use is not None and in_use >= limit:
        raise VcamdError(
            f"[runtime] max_memory_gb = {max_gb:g} is below what vcamd already uses (~{in_use / GB:.2f} GB of address space)",
            fix="raise [runtime] max_memory_gb, or set it to 0 for no cap",
        )
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY and limit > hard:
        log.warning("[runtime] max_memory_gb = %g is above the system's hard limit; using %.2f GB", max_gb, hard / GB)
        limit = hard
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError) as exc:
        log.warning("[runtime] max_memory_gb = %g could not be applied (%s); running without a memory cap", max_gb, exc)
        return None
    log.info("memory cap: %.2f GB of address space", limit / GB)
    return limit


def _address_space_in_use() -> int | None:
    """Current virtual size of this process in bytes (Linux /proc); None where unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def estimated_gb(path: Path) -> float:
    """Rough memory a session for this model file needs: its size × ORT_OVERHEAD."""
    return Path(path).stat().st_size * ORT_OVERHEAD / GB


def check_fits(path: Path, max_gb: float) -> None:
    """Raise VcamdError when one model alone would not fit under `[runtime] max_memory_gb`."""
    check_all_fit([path], max_gb)


def check_all_fit(paths: Iterable[Path], max_gb: float) -> None:
    """Raise VcamdError when these models together would not fit under the cap (0 = no cap)."""
    if max_gb <= 0:
        return
    sized = sorted(((estimated_gb(p), Path(p)) for p in paths), reverse=True)
    need = sum(gb for gb, _ in sized)
    if need <= max_gb:
        return
    biggest = sized[0][1]
    if len(sized) == 1:
        what = f"model {biggest.name} needs"
    else:
        what = f"the models ({', '.join(p.name for _, p in sized)}) need"
    fix = "raise the cap" if "fp16" in biggest.name else 'raise the cap or use the fp16 model ([models] swapper = "inswapper_128_fp16")'
    raise VcamdError(f"{what} ~{need:.1f} GB, more than [runtime] max_memory_gb = {max_gb:g}", fix=fix)

"""The call scenario's swapper: a stand-in that costs what `--swap-ms` says, on this machine.

The call's targets (swap age p95 ≤ 1.5 s under two busy processes, …) were set for a swapper of
~0.37 s a face. A fixed stand-in does not cost that everywhere: the same 8 heavy convolutions
took 0.37–0.43 s a face on one host of these 2-core machines and 0.17 s on another, which made the
same targets twice as easy there. So before its runs, on a quiet machine, the bench times the light
swap alone and with `PROBE_CONVS` heavy convolutions as the run's swapper runs quiet (the same
providers and session, `Sessions.get(background=True)`, called from a thread on the swapper's cores,
`vcamd.inference.cores`), and builds the stand-in with as many as make a swap of `--swap-ms`. What it
measured is printed with the runs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PROBE_CONVS = 4
"""Heavy convolutions in the probe whose time, less the light swap's, gives one convolution's."""
MAX_CONVS = 256
"""At most this many: a GPU's convolution costs microseconds, and the model file grows 2.4 MB each."""
TIMED_RUNS = 5
"""Runs timed per model (after one untimed run); the median counts."""


@dataclass(frozen=True, slots=True)
class CallSwapper:
    path: Path
    convs: int
    target_ms: float
    measured_ms: float
    """The built stand-in's median swap, measured quiet before the runs."""


def build_call_swapper(folder: Path, target_ms: float, providers: list[str], threads: int, *, fp16: bool = False,
                       time_model: Callable[[Path], float] | None = None) -> CallSwapper:
    """The stand-in for `target_ms` a face (built in `folder`). `time_model(path)` → a swap's
    milliseconds (default: `swap_ms` with `providers` and `threads`); a parameter for tests."""
    from vcamd.bench.standins import build_swapper

    def timed(path: Path) -> float:
        return time_model(path) if time_model is not None else swap_ms(path, providers, threads)

    suffix = "_fp16" if fp16 else ""

    def built(convs: int) -> Path:
        path = folder / f"swapper_call{convs}{suffix}.onnx"
        if not path.exists():
            build_swapper(path, fp16=fp16, heavy_convs=convs)
        return path

    light_ms = timed(build_swapper(folder / f"swapper_call0{suffix}.onnx", fp16=fp16))
    convs = convs_for(target_ms, light_ms, (timed(built(PROBE_CONVS)) - light_ms) / PROBE_CONVS)
    path = built(convs)
    measured_ms = timed(path)
    # Once more from the built stand-in itself: its many convolutions say what one costs better
    # than the probe's few (a probe 10 % off left the stand-in at 327 ms for 370 asked).
    refined = convs_for(target_ms, light_ms, (measured_ms - light_ms) / convs)
    if refined != convs:
        convs, path = refined, built(refined)
        measured_ms = timed(path)
    return CallSwapper(path, convs, target_ms, measured_ms)


def convs_for(target_ms: float, light_ms: float, per_conv_ms: float) -> int:
    """How many heavy convolutions make the light swap cost `target_ms`: 1 to MAX_CONVS."""
    if per_conv_ms <= 0:  # the probe ran no slower than the light swap: timer noise on a fast device
        return MAX_CONVS
    return min(MAX_CONVS, max(1, round((target_ms - light_ms) / per_conv_ms)))


def swap_ms(path: Path, providers: list[str], threads: int) -> float:
    """The median milliseconds of one swap as the live swapper runs it on a quiet machine: its
    session (`background`), called from a thread on the swapper's cores (`vcamd.inference.cores`; on every
    core it would be up to twice as fast as the swaps of the runs)."""
    from vcamd.common.threads import in_thread
    from vcamd.inference.runtime import Sessions

    sessions = Sessions(providers, threads)
    session = sessions.get(path, background=True)
    split = sessions.core_split
    return in_thread(lambda: _median_ms(session, split.swapper_cores if split is not None else None), "swap-ms").result()


def _median_ms(session, cores: frozenset[int] | None) -> float:
    from vcamd.bench.standins import LATENT_DIM, SWAP_SIZE
    from vcamd.inference.cores import pin_calling_thread

    if cores is not None:
        pin_calling_thread(cores)  # this thread only: it ends with the timing
    rng = np.random.default_rng(0)
    feeds = {"target": rng.random((1, 3, SWAP_SIZE, SWAP_SIZE), dtype=np.float32),
             "source": rng.standard_normal((1, LATENT_DIM), dtype=np.float32)}
    session.run(None, feeds)  # the first run allocates
    times = []
    for _ in range(TIMED_RUNS):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)

"""`GpuSampler`: the GPU figures of the live status and the run's stats.

This machine has no NVIDIA GPU, so the GPU query is a fake (`find_query`); what is under test is
when the sampler looks for the GPU (never on the caller's thread: the engine builds its sampler
before the first frame) and what it reports.
"""

from __future__ import annotations

import threading

from support.waiting import wait_for

from vcamd.live.measures.stats import GpuSampler

WAIT_S = 30.0  # generous: the conditions below hold in milliseconds on an idle machine


def test_the_gpu_is_looked_for_on_the_sampler_s_thread_not_the_caller_s() -> None:
    looking = threading.Event()
    found = threading.Event()
    callers: list[str] = []

    def slow_find():  # pynvml's init, or a first nvidia-smi: time the caller must not wait for
        callers.append(threading.current_thread().name)
        looking.set()
        found.wait(WAIT_S)
        return lambda: (37.0, 1024.0, 8192.0)

    sampler = GpuSampler(interval_s=0.01, find_query=slow_find)
    assert callers == []  # building it looks for nothing
    sampler.start()  # returns while the GPU is still being looked for
    assert looking.wait(WAIT_S) and sampler.latest() is None
    found.set()
    wait_for(lambda: sampler.latest() is not None, "the first sample", timeout_s=WAIT_S, poll_s=0.005)
    assert sampler.latest() == {"util_pct": 37.0, "memory_used_mib": 1024.0, "memory_total_mib": 8192.0}
    summary = sampler.stop()
    assert callers == ["gpu-sampler"]
    assert summary is not None and summary["samples"] >= 1
    assert summary["util_pct"] == {"mean": 37.0, "max": 37.0} and summary["memory_total_mib"] == 8192.0


def test_no_gpu_means_no_figures_and_no_thread_left() -> None:
    before = set(threading.enumerate())
    sampler = GpuSampler(interval_s=0.01, find_query=lambda: None)
    sampler.start()
    assert sampler.stop() is None
    assert sampler.latest() is None
    assert not [t for t in threading.enumerate() if t not in before and t.name == "gpu-sampler"]


def test_a_probe_that_starts_failing_ends_the_sampling_and_keeps_what_it_had() -> None:
    calls = []

    def query():
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError("NVML: GPU is lost")
        return (float(len(calls) * 10), 100.0 * len(calls), 8192.0)

    sampler = GpuSampler(interval_s=0.001, find_query=lambda: query)
    sampler.start()
    wait_for(lambda: len(calls) >= 4, "the failing probe", timeout_s=WAIT_S, poll_s=0.005)
    summary = sampler.stop()
    assert summary == {"util_pct": {"mean": 20.0, "max": 30.0}, "memory_used_mib": {"max": 300.0},
                       "memory_total_mib": 8192.0, "samples": 3}

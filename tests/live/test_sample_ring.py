"""Live stats keep a fixed amount of memory however long the daemon runs."""

from __future__ import annotations

import numpy as np

from vcamd.common.quality import Level
from vcamd.common.types import Outcome
from vcamd.live.measures.stats import LiveStats, SampleRing, percentiles


def test_ring_keeps_the_most_recent_samples_in_order_and_exact_totals() -> None:
    ring = SampleRing(cap=100)
    buffer = ring._values
    for i in range(1, 251):
        ring.append(float(i))
    assert ring._values is buffer and buffer.size == 100  # never reallocated
    assert len(ring) == 100 and ring.count == 250 and ring.sum == sum(range(1, 251))
    assert np.array_equal(ring.recent(), np.arange(151, 251, dtype=float))
    assert np.array_equal(ring.recent(3), [248.0, 249.0, 250.0])
    assert percentiles(ring)["p50"] == 200.5  # over the kept window only


def test_live_stats_percentiles_cover_the_recent_window() -> None:
    stats = LiveStats(clock=iter(np.arange(0, 1e6, 0.033)).__next__)
    for i in range(30_000):
        stats.record_publish(Outcome.swapped, Level.full, 100.0 if i < 10_000 else 10.0)
        stats.record_stage("loop", 5.0)
    assert stats.latency_percentiles() == {"p50": 10.0, "p95": 10.0, "p99": 10.0}  # the old 100 ms aged out
    assert stats.stages_ms["loop"].count == 30_000 and stats.stages_ms["loop"].sum == 150_000.0

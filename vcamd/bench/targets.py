"""What the bench's figures are held against: each target (from the issue that set it), and a
target's row in the printout — the figure, the limit, figure ÷ limit, met or not."""

from __future__ import annotations

from dataclasses import dataclass

# Targets from the live-daemon issue (720p / 30 fps on a 2-core CPU).
TARGET_FPS_RATIO = 0.95
TARGET_P99_BUDGET_MS = 40.0  # + one frame interval
TARGET_OVERHEAD_MS = 8.0
TARGET_CPU_MS = 30.0
TARGET_SWAPPED = 0.95
# Targets from the performance issue (round 2): groups and resolution growth.
TARGET_FULL_QUALITY = 0.90
TARGET_EVERY_FACE = 0.95
TARGET_RESOLUTION_RATIO = 1.3
TARGET_ONE_FACE_CPU_MS = 9.0  # 720p, SCRFD-2.5G, at full quality (the loop's-own-cost issue; 12 before it)
# Targets from the loop's-own-cost issue: 29 faces steady at full quality, a crowd at the camera's rate.
TARGET_GROUPS_P99_MS = 40.0
TARGET_GROUPS_FULL_QUALITY = 0.95
TARGET_CROWD_FULL_QUALITY = 0.90
TARGET_FIRST_FRAME_MS = 500.0  # cold start: from the process start, with the compute-equivalent swapper
TARGET_FIRST_SWAP_MS = 3000.0
# Targets from the call-load issue: 720p, the call's swapper, two busy processes, 2 cores.
TARGET_SWAP_AGE_P95_MS = 1500.0
TARGET_SWAPPED_AFTER_FIRST = 0.90
TARGET_CALL_FIRST_FRAME_MS = 1000.0
TARGET_CALL_FIRST_SWAP_MS = 4000.0
# Targets from the int8 issue: the swapper's int8 copy on the CPU, 720p, 2 cores.
TARGET_INT8_SPEEDUP = 3.0  # swap per face, float ÷ int8, in the same run (compute-equivalent inswapper)
TARGET_INT8_SWAP_AGE_P95_MS = 1000.0  # quiet (inswapper) and under two busy processes (call)
TARGET_INT8_FIRST_SWAP_MS = 1500.0  # daily start (graph cache warm), compute-equivalent inswapper
TARGET_INT8_SWAPPED_AFTER_FIRST = 0.95  # call, two busy processes

# Targets from the Triton hop issue: the swap on a server elsewhere (`vcamd bench --scenarios remote`).
TARGET_HOP_MS = 5.0
TARGET_DELAY_RTT_MS = 50
TARGET_SWAP_AGE_EXTRA_MS = 60.0
TARGET_BACK_S = 2.0

@dataclass(frozen=True)
class TargetRow:
    """One target of a scenario: what was measured, the limit, figure / limit, and whether it is met."""

    scenario: str
    measure: str
    figure: str
    target: str
    ratio: float | None  # figure / target (≤ 1 is met for an upper limit, ≥ 1 for a lower one)
    met: bool | None  # None: not measurable with this engine (see figure)


def upper(scenario: str, measure: str, value: float, limit: float, unit: str = "") -> TargetRow:
    return TargetRow(scenario, measure, f"{value:.1f}{unit}", f"≤ {limit:.1f}{unit}", round(value / limit, 2), value <= limit)


def lower_share(scenario: str, measure: str, value: float | None, limit: float, missing: str = "") -> TargetRow:
    if value is None:
        return TargetRow(scenario, measure, f"n/a ({missing})", f"≥ {100 * limit:.0f} %", None, None)
    return TargetRow(scenario, measure, f"{100 * value:.1f} %", f"≥ {100 * limit:.0f} %", round(value / limit, 2), value >= limit)

"""The degradation ladder, driven frame by frame with an injected clock: no sleeps, no threads."""

from __future__ import annotations

import time

from vcamd.common.quality import Level
from vcamd.config.schema import WatchdogConfig
from vcamd.live.measures.watchdog import (
    HISTORY_CAP,
    NO_GAIN_BLOCK_S,
    PROBE_AFTER_S,
    RUNG_RECORD,
    STALE_AFTER_EDIT,
    WAY_BACK_FRAMES,
    Transition,
    TransitionResult,
    Watchdog,
)

FPS = 30.0
LADDER_ORDER = list(Level)  # best first (the member order is the ladder's)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def feed(dog: Watchdog, clock: FakeClock, latency_ms: float, frames: int, stage_ms=None) -> list:
    """Publish `frames` frames at 30 fps, each with the given latency; collect every event."""
    events = []
    for _ in range(frames):
        clock.now += 1.0 / FPS
        events.extend(dog.observe(latency_ms, stage_ms))
    return events



def test_degrades_one_step_at_a_time_down_to_frame_skip():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=True)
    events = feed(dog, clock, 70.0, 30 * 10, {"detect": 55.0})
    transitions = [e for e in events if isinstance(e, Transition)]
    assert [(t.from_level, t.to_level) for t in transitions] == [
        (Level.full, Level.no_enhancer),
        (Level.no_enhancer, Level.low_res),
        (Level.low_res, Level.frame_skip),
    ]
    assert dog.level is Level.frame_skip
    # No two transitions closer than the cooldown, and each one names what triggered it.
    for a, b in zip(transitions, transitions[1:]):
        assert b.time - a.time >= dog.cfg.cooldown_s
    first = transitions[0]
    assert first.reason == "over_budget"
    assert first.trigger.over_budget_share == 1.0
    assert first.trigger.p95_ms == 70.0
    assert first.trigger.stage_p95_ms == {"detect": 55.0}
    line = first.log_line()
    assert "\n" not in line
    assert "from=full to=no_enhancer" in line and "p95_ms=70.0" in line and "detect_p95_ms=55.0" in line


def test_skips_the_enhancer_step_when_the_enhancer_is_off():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    feed(dog, clock, 70.0, 30 * 2)
    assert dog.transitions[0].to_level is Level.low_res
    # And climbing back from low_res goes straight to full.
    feed(dog, clock, 5.0, 30 * 10)
    assert dog.level is Level.full
    assert (dog.transitions[-1].from_level, dog.transitions[-1].to_level) == (Level.low_res, Level.full)


def test_holds_the_level_while_latency_sits_between_the_thresholds():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock)
    feed(dog, clock, 70.0, 20)  # one step down
    assert dog.level is Level.no_enhancer
    # 30 ms: under budget (no further degrade) but above budget × headroom = 24 ms (no recovery).
    events = feed(dog, clock, 30.0, 30 * 20)
    assert dog.level is Level.no_enhancer
    assert not [e for e in events if isinstance(e, Transition)]


def test_recovers_only_after_sustained_headroom():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(recover_after_s=3.0), clock)
    feed(dog, clock, 70.0, 20)
    assert dog.level is Level.no_enhancer
    # 2 s of headroom (window fill included) is not enough.
    feed(dog, clock, 10.0, 60)
    assert dog.level is Level.no_enhancer
    # A burst of slow frames resets the headroom timer ...
    feed(dog, clock, 45.0, 3)
    feed(dog, clock, 10.0, 80)
    assert dog.level is Level.no_enhancer
    # ... and the climb happens once the p95 stays under budget × headroom for recover_after_s.
    feed(dog, clock, 10.0, 30 * 2)
    assert dog.level is Level.full
    up = dog.transitions[-1]
    assert up.reason == "headroom" and up.trigger.p95_ms < 40 * 0.6


def test_no_oscillation_when_latency_depends_on_the_level():
    """A machine where full quality takes 55 ms and no_enhancer takes 30 ms must settle on
    no_enhancer and stay there, not bounce between the two."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock)
    cost = {Level.full: 55.0, Level.no_enhancer: 30.0, Level.low_res: 15.0, Level.frame_skip: 8.0}
    for _ in range(30 * 60):
        clock.now += 1.0 / FPS
        dog.observe(cost[dog.level])
    assert dog.level is Level.no_enhancer
    assert len(dog.transitions) == 1


def test_each_transition_gets_its_result_measured_over_the_next_window():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(window=15, cooldown_s=10.0), clock)
    events = feed(dog, clock, 70.0, 15)
    assert [type(e) for e in events] == [Transition]
    events = feed(dog, clock, 20.0, 14)
    assert events == []  # the new window is not full yet
    events = feed(dog, clock, 20.0, 1)
    assert [type(e) for e in events] == [TransitionResult]
    result = events[0]
    assert result.transition is dog.transitions[0]
    assert result.after.p95_ms == 20.0 and result.after.over_budget_share == 0.0
    assert "of=full->no_enhancer" in result.log_line()
    history = dog.history()
    assert history[0]["after"]["p95_ms"] == 20.0 and history[0]["trigger"]["p95_ms"] == 70.0


def test_a_short_spike_under_the_degrade_ratio_does_not_degrade():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(window=15, degrade_ratio=0.3), clock)
    feed(dog, clock, 20.0, 15)
    feed(dog, clock, 90.0, 4)  # 4/15 = 0.27 of the window over budget
    feed(dog, clock, 20.0, 15)
    assert dog.level is Level.full and dog.transitions == []


def test_a_forced_level_pins_it_until_released():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock)
    t = dog.force(Level.low_res)
    assert t is not None and t.reason == "manual" and dog.level is Level.low_res
    feed(dog, clock, 5.0, 30 * 10)
    assert dog.level is Level.low_res and not dog.automatic
    dog.force(None)
    assert dog.level is Level.full


def test_new_thresholds_keep_the_pin_the_switches_and_the_history():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False, boost_enabled=True)
    dog.force(Level.low_res)
    dog.configure(WatchdogConfig(budget_ms=60.0, window=10), {"budget_ms", "window"})
    assert dog.cfg.budget_ms == 60.0 and dog.level is Level.low_res and not dog.automatic
    assert (dog.enhancer_enabled, dog.boost_enabled) == (False, True)
    assert [t.to_level for t in dog.transitions] == [Level.low_res]
    feed(dog, clock, 5.0, 30 * 10)
    assert dog.level is Level.low_res  # still pinned under the new thresholds


def test_every_watchdog_key_says_what_an_edit_of_it_makes_stale():
    assert set(STALE_AFTER_EDIT) == set(WatchdogConfig.model_fields)


def test_a_new_budget_keeps_the_level_and_judges_the_frames_under_it():
    """Before, any [watchdog] edit threw the level and every measurement away: the camera jumped
    back to full quality and stepped down again while a new window filled."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock)
    feed(dog, clock, 500.0, 30 * 10)  # far over budget: stepped down
    degraded = dog.level
    assert degraded is not Level.full
    dog.configure(WatchdogConfig(budget_ms=1000.0), {"budget_ms"})
    assert dog.level is degraded and dog.automatic  # no jump to the top
    events = feed(dog, clock, 500.0, 30 * 10)  # under budget × headroom now: climbs, rung by rung
    assert [t.reason for t in events if isinstance(t, Transition)][:1] == ["headroom"]
    assert LADDER_ORDER.index(dog.level) < LADDER_ORDER.index(degraded)


def test_an_edit_that_judges_nothing_keeps_the_frames_measured():
    """A cooldown edit: the half-full window counts on, so the next decision needs only the frames
    it lacked (before: all of a new window, from full quality)."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(cooldown_s=0.0), clock)
    feed(dog, clock, 500.0, 15)  # one full window over budget: one step down
    first = dog.level
    assert first is not Level.full
    feed(dog, clock, 500.0, 5)
    dog.configure(WatchdogConfig(cooldown_s=0.1), {"cooldown_s"})
    events = feed(dog, clock, 500.0, 10)  # with the 5 kept, a full window: the next step down
    assert [t.reason for t in events if isinstance(t, Transition)] == ["over_budget"]
    assert LADDER_ORDER.index(dog.level) > LADDER_ORDER.index(first)


def test_a_shorter_window_keeps_the_newest_frames():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock)
    feed(dog, clock, 500.0, 10)  # under the 15-frame window: nothing decided yet
    assert dog.level is Level.full
    dog.configure(WatchdogConfig(window=5), {"window"})
    events = feed(dog, clock, 500.0, 1)  # 5 over-budget frames in the window now
    assert [t.reason for t in events if isinstance(t, Transition)] == ["over_budget"]


def test_watchdog_history_stays_bounded():
    """Transitions and results were kept in lists that grew for as long as the daemon ran."""
    dog = Watchdog(WatchdogConfig(), time.monotonic)
    for i in range(HISTORY_CAP + 50):
        dog.force(Level.low_res if i % 2 == 0 else None)
    assert len(dog.transitions) == HISTORY_CAP
    assert dog.transitions[-1].to_level is Level.full  # the newest are kept
    assert len(dog.history()) == HISTORY_CAP


def test_climbs_back_to_a_rung_known_to_fit_the_budget_after_a_passing_spike():
    """A 29-face frame costs ~32 ms at full quality: under the 40 ms budget, never under the
    headroom rule's 24 ms. A load spike took it to low_res for good; now it comes back."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    feed(dog, clock, 32.0, 30 * 2)  # full fits the budget
    feed(dog, clock, 70.0, 5)  # another process takes the CPU for a moment: 5 of 15 frames late
    assert dog.level is Level.low_res
    feed(dog, clock, 30.0, 30 * 5)  # low_res buys little: 30 ms, still above 24
    assert dog.level is Level.full
    up = dog.transitions[-1]
    assert up.reason == "fits" and up.trigger.p95_ms == 30.0
    # And it stays there while full keeps fitting.
    feed(dog, clock, 32.0, 30 * 20)
    assert dog.level is Level.full and len(dog.transitions) == 2


def test_a_climb_on_a_memory_that_no_longer_fits_is_not_repeated_every_few_seconds():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    feed(dog, clock, 32.0, 30 * 2)
    cost = {Level.full: 70.0, Level.low_res: 30.0, Level.frame_skip: 20.0}  # full no longer fits at all
    for _ in range(30 * 60):
        clock.now += 1.0 / FPS
        dog.observe(cost[dog.level])
    # One climb on the memory of the healthy full, which failed: then low_res for good.
    assert [(t.from_level.name, t.to_level.name, t.reason) for t in dog.transitions] == [
        ("full", "low_res", "over_budget"), ("low_res", "full", "fits"), ("full", "low_res", "over_budget")]
    assert dog.level is Level.low_res


def test_a_level_that_only_sometimes_fits_is_climbed_to_less_and_less_often():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    n = 0
    for _ in range(30 * 120):  # full alternates between fitting (2 s) and not (1 s)
        clock.now += 1.0 / FPS
        n += 1
        slow = dog.level is Level.full and (n // 30) % 3 == 2
        dog.observe(70.0 if slow else 30.0)
    climbs = [t.time for t in dog.transitions if t.reason == "fits"]
    gaps = [b - a for a, b in zip(climbs, climbs[1:])]
    assert len(climbs) <= 6 and all(b >= a for a, b in zip(gaps, gaps[1:]))


def feed_costs(dog: Watchdog, clock: FakeClock, cost: dict, frames: int) -> list:
    """`frames` frames at 30 fps, each taking what the rung it is made at costs."""
    events = []
    for _ in range(frames):
        clock.now += 1.0 / FPS
        events.extend(dog.observe(cost[dog.level]))
    return events


def test_a_step_down_that_makes_the_frames_later_is_taken_back_at_once_and_blocked_for_longer_each_time():
    """A 150-face crowd on a 2-core CPU: 30 ms a frame at full quality, 55 at low_res (its smaller
    detector input misses the crowd's small faces, whose places are covered anew). A passing burst
    took the watchdog down to low_res, and it stayed there, slower, for good."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    cost = {Level.full: 30.0, Level.low_res: 55.0, Level.frame_skip: 50.0}
    feed_costs(dog, clock, cost, 90)
    feed(dog, clock, 90.0, 5)  # a passing burst: 5 of 15 frames over budget, far over
    assert dog.level is Level.low_res
    stepped = clock.now
    events = feed_costs(dog, clock, cost, dog.cfg.window)  # one window at low_res: back at once, no cooldown
    back = [e for e in events if isinstance(e, Transition)]
    assert [(t.from_level, t.to_level, t.reason) for t in back] == [(Level.low_res, Level.full, "no_gain")]
    assert back[0].time - stepped < dog.cfg.cooldown_s
    assert back[0].trigger.p95_ms == 55.0 and back[0].compared is not None and back[0].compared.frames == RUNG_RECORD - dog.cfg.window
    line = back[0].log_line()
    assert "reason=no_gain" in line and f"above_frames={RUNG_RECORD - dog.cfg.window}" in line and "above_over_budget=0.00" in line
    assert dog.history()[-1]["compared"]["frames"] == RUNG_RECORD - dog.cfg.window

    def burst_steps() -> bool:
        """A burst at full (then full's own cost): whether the watchdog stepped down for it."""
        before = len(dog.transitions)
        feed(dog, clock, 90.0, 10)
        stepped_down = any(t.reason == "over_budget" for t in dog.transitions[before:])
        feed_costs(dog, clock, cost, 30 * 2)  # back at full, if it stepped (the step is taken back again)
        assert dog.level is Level.full
        return stepped_down

    assert not burst_steps()  # blocked: the frames stay at full quality through the burst
    clock.now = back[0].time + NO_GAIN_BLOCK_S
    feed_costs(dog, clock, cost, 90)
    assert burst_steps()  # tried again once the block ran out; taken back again, blocked twice as long
    again = dog.transitions[-1]
    assert again.reason == "no_gain"
    clock.now = again.time + NO_GAIN_BLOCK_S
    feed_costs(dog, clock, cost, 90)
    assert not burst_steps()
    clock.now = again.time + 2 * NO_GAIN_BLOCK_S
    feed_costs(dog, clock, cost, 90)
    assert burst_steps()


def test_a_step_down_followed_by_another_is_judged_again_once_the_second_is_taken_back():
    """The crowd at full quality (p95 50 ms, a fifth of its frames over budget) stepped down for a
    burst; low_res's first second was within the margin of full's record, but over budget, so the
    ladder went on down to frame_skip, later still, and was taken back to low_res — where it stayed
    for the rest of the run (0.73 of it), later than full, because the first step had never been
    judged. Now it is, on low_res's frames after the way back."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)

    def crowd(frames: int, late_at_low_res: float) -> None:
        for k in range(frames):
            clock.now += 1.0 / FPS
            level = dog.level
            if level is Level.full:
                dog.observe(50.0 if k % 10 < 2 else 30.0)
            elif level is Level.low_res:
                dog.observe(late_at_low_res if k % 10 < 4 else 30.0)
            else:
                dog.observe(75.0)

    crowd(90, 52.0)
    for _ in range(5):  # a passing burst, until the step down
        if dog.level is Level.full:
            feed(dog, clock, 90.0, 1)
    assert dog.level is Level.low_res
    crowd(60, 52.0)  # within 10 % of full's p95, but 4 frames in 10 over budget: on down, then back
    assert [(t.to_level, t.reason) for t in dog.transitions] == [
        (Level.low_res, "over_budget"), (Level.frame_skip, "over_budget"), (Level.low_res, "no_gain")]
    crowd(WAY_BACK_FRAMES + 30, 70.0)  # low_res as it runs for the rest of the run: later than full was
    assert [(t.to_level, t.reason) for t in dog.transitions[3:]] == [(Level.full, "no_gain")]
    assert dog.transitions[-1].compared is not None and dog.transitions[-1].compared.p95_ms == 50.0
    crowd(30 * 5, 70.0)
    assert dog.level is Level.full and len(dog.transitions) == 4


def test_the_way_back_up_is_not_taken_for_the_rung_above_s_own_cost():
    """Back at full, a crowd's first frames find its faces at full size again and draw their covers
    and swaps anew (for over a second with camera noise): later than low_res's frames were. Full's
    own frames after that are not."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    cost = {Level.full: 30.0, Level.low_res: 55.0, Level.frame_skip: 50.0}
    feed_costs(dog, clock, cost, 90)
    feed(dog, clock, 90.0, 5)
    feed_costs(dog, clock, cost, dog.cfg.window)
    assert dog.level is Level.full and dog.transitions[-1].reason == "no_gain"
    feed(dog, clock, 70.0, WAY_BACK_FRAMES - 5)  # the way back: over budget, later than low_res's frames
    feed_costs(dog, clock, cost, 30 * 5)
    assert dog.level is Level.full and len(dog.transitions) == 2


def test_a_step_down_that_gains_nothing_over_its_record_is_taken_back_and_one_that_gains_stands():
    """The crowd at full quality (p95 50 ms, a fifth of its frames over budget) stepped down for a
    burst; low_res ran within 10 % of full's record (not worse by the margin, not better) and
    stood for the rest of the run at lower quality (full 0.56 of it). A rung that neither keeps
    the budget nor runs earlier than the record by the margin is taken back once its record is
    full; one earlier by more than the margin stands."""

    def run(low_res_late_ms: float) -> Watchdog:
        clock = FakeClock()
        dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
        for k in range(90 + 5 + RUNG_RECORD + 30 * 3):
            clock.now += 1.0 / FPS
            if 90 <= k < 95 and dog.level is Level.full:
                dog.observe(90.0)  # a passing burst, until the step down
            elif dog.level is Level.full:
                dog.observe(50.0 if k % 10 < 2 else 30.0)
            else:
                dog.observe(low_res_late_ms if k % 10 < 2 else 30.0)
        return dog

    level_down = run(52.0)
    assert [(t.to_level, t.reason) for t in level_down.transitions] == [(Level.low_res, "over_budget"), (Level.full, "no_gain")]
    back = level_down.transitions[-1]
    assert back.compared is not None and back.compared.p95_ms == 50.0
    assert back.time - level_down.transitions[0].time >= (RUNG_RECORD - 1) / FPS  # judged on the whole record, not its start
    assert level_down.level is Level.full
    earlier = run(44.0)
    assert [(t.to_level, t.reason) for t in earlier.transitions] == [(Level.low_res, "over_budget")]


def test_a_crowd_stepped_down_by_a_load_tries_full_quality_again_once_the_load_has_gone():
    """The crowd at full quality: p95 50 ms, a fifth of its frames over budget (no step down due,
    never the headroom or a window that fits to climb on). A 40 s load took it down to frame_skip,
    and there it stayed for the rest of the run once the load had gone. Now, its frames calm and
    faster than when it got there for PROBE_AFTER_S, it tries full again (reason "probe"), and stays."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    quiet = {Level.full: (50.0, 30.0), Level.low_res: (68.0, 45.0), Level.frame_skip: (28.0, 20.0)}
    loaded = {Level.full: (95.0, 80.0), Level.low_res: (100.0, 85.0), Level.frame_skip: (45.0, 38.0)}

    def crowd(costs: dict, seconds: float) -> None:
        for k in range(int(seconds * FPS)):
            clock.now += 1.0 / FPS
            late, usual = costs[dog.level]
            dog.observe(late if k % 10 < 2 else usual)

    crowd(quiet, 3)
    crowd(loaded, 40)
    assert dog.level is Level.frame_skip
    crowd(loaded, 60)  # the load stays: frame_skip runs as when it got there, no probe
    assert dog.level is Level.frame_skip and all(t.reason != "probe" for t in dog.transitions)
    gone = clock.now
    crowd(quiet, 5 + PROBE_AFTER_S)
    probe = dog.transitions[-1]
    assert (probe.from_level, probe.to_level, probe.reason) == (Level.frame_skip, Level.full, "probe")
    assert PROBE_AFTER_S <= probe.time - gone <= PROBE_AFTER_S + 2.0
    crowd(quiet, 60)
    assert dog.level is Level.full and dog.transitions[-1] is probe


def test_a_rung_reached_by_a_take_back_below_the_rung_a_load_left_probes_too():
    """Under the load, frame_skip ran later than low_res and was taken back up to low_res — a move
    up, yet still below full, which the load took it from: once the load has gone, it probes."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)

    def crowd(costs: dict, seconds: float) -> None:
        for k in range(int(seconds * FPS)):
            clock.now += 1.0 / FPS
            late, usual = costs[dog.level]
            dog.observe(late if k % 10 < 2 else usual)

    crowd({Level.full: (50.0, 30.0)}, 3)
    crowd({Level.full: (95.0, 95.0), Level.low_res: (60.0, 60.0), Level.frame_skip: (80.0, 80.0)}, 20)
    assert (dog.level, dog.transitions[-1].reason) == (Level.low_res, "no_gain")
    gone = clock.now
    crowd({Level.full: (50.0, 30.0), Level.low_res: (45.0, 30.0)}, PROBE_AFTER_S + 5)
    probe = dog.transitions[-1]
    assert (probe.to_level, probe.reason) == (Level.full, "probe") and probe.time - gone >= PROBE_AFTER_S


def test_a_probe_into_a_load_that_stays_steps_down_again_and_settles_there():
    """The load eased enough for frame_skip to run faster than when it got there, not for full:
    one probe, down again, and frame_skip — reached anew, as fast as now — is where it settles."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    feed_costs(dog, clock, {Level.full: 30.0}, 90)
    feed_costs(dog, clock, {Level.full: 90.0, Level.low_res: 80.0, Level.frame_skip: 45.0}, 30 * 20)
    assert dog.level is Level.frame_skip
    eased = {Level.full: 70.0, Level.low_res: 60.0, Level.frame_skip: 30.0}
    feed_costs(dog, clock, eased, int(30 * (6 * PROBE_AFTER_S)))
    assert [t.reason for t in dog.transitions].count("probe") == 1
    assert dog.level is Level.frame_skip


def test_a_step_that_held_for_a_full_record_is_not_judged_again_by_a_later_load():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    feed(dog, clock, 30.0, 90)
    feed(dog, clock, 90.0, 5)
    assert dog.level is Level.low_res
    feed(dog, clock, 25.0, RUNG_RECORD)  # low_res ran earlier than full: the step stands
    loaded = {Level.full: 90.0, Level.low_res: 60.0, Level.frame_skip: 35.0}
    feed_costs(dog, clock, loaded, 30 * 3)  # a load comes later: the next step down, not back up
    assert [t.reason for t in dog.transitions] == ["over_budget", "over_budget"] and dog.level is Level.frame_skip


def test_a_step_down_for_a_load_that_stays_is_taken_again_once_the_frames_back_up_say_so():
    """Another process takes the CPU for good: full now costs 70 ms, low_res 45, frame_skip 35. The
    frames at low_res are later than full's before the load (30 ms): the step is taken back — and
    full's frames now, later still than low_res's were, take it down again, for good, unblocked;
    then on down to frame_skip, which the load leaves within the budget."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock, enhancer_enabled=False)
    feed(dog, clock, 30.0, 90)
    loaded = {Level.full: 70.0, Level.low_res: 45.0, Level.frame_skip: 35.0}
    feed_costs(dog, clock, loaded, 30 * 10)
    assert [(t.to_level, t.reason) for t in dog.transitions] == [
        (Level.low_res, "over_budget"), (Level.full, "no_gain"), (Level.low_res, "no_gain"), (Level.frame_skip, "over_budget")]
    again = dog.transitions[2]
    assert again.trigger.p95_ms == 70.0 and again.compared is not None and again.compared.p95_ms == 45.0
    assert dog.level is Level.frame_skip
    # Unblocked: a later burst at full steps down to low_res again at once.
    feed(dog, clock, 5.0, 30 * 15)
    assert dog.level is Level.full
    feed(dog, clock, 70.0, 15)
    assert dog.transitions[-1].to_level is Level.low_res


def test_frames_made_while_warming_up_are_not_judged():
    """Start-up builds sessions and runs the first full detection: its slow first frames took a
    group to low_res before it was ever measured at full."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(), clock)
    events = [e for _ in range(30) for e in (clock.__setattr__("now", clock.now + 1 / FPS), dog.observe(90.0, warming=True))[1]]
    assert events == [] and dog.level is Level.full
    feed(dog, clock, 90.0, 15)  # once warm, the same latency is judged
    assert dog.level is not Level.full


# ---- the face's age: a second input to the same ladder ----------------------------------------------


def feed_ages(dog: Watchdog, clock: FakeClock, age_ms, frames: int, latency_ms: float = 20.0) -> list:
    """`frames` frames on time (`latency_ms`), each showing a swapped face `age_ms` old (a number,
    or a function of the level: the enhancer makes the face older)."""
    events = []
    for _ in range(frames):
        clock.now += 1.0 / FPS
        age = age_ms(dog.level) if callable(age_ms) else age_ms
        events.extend(dog.observe(latency_ms, swap_age_ms=age))
    return events


def test_an_old_face_steps_the_enhancer_off_with_its_trigger_logged_and_goes_no_lower():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=True)
    events = feed_ages(dog, clock, 4000.0, 30 * 20)  # frames on time, the face 4 s old
    transitions = [e for e in events if isinstance(e, Transition)]
    assert [(t.from_level, t.to_level, t.reason) for t in transitions] == [(Level.full, Level.no_enhancer, "swap_age")]
    trigger = transitions[0].trigger
    assert trigger.swap_age_p95_ms == 4000.0 and trigger.swap_age_over_share == 1.0
    line = transitions[0].log_line()
    assert "reason=swap_age" in line and "swap_age_p95_ms=4000" in line
    # low_res and frame_skip change only the loop's detection: they would not make a swap faster.
    assert dog.level is Level.no_enhancer


def test_an_old_face_without_an_enhancer_changes_nothing():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=False)
    assert feed_ages(dog, clock, 4000.0, 30 * 10) == []
    assert dog.level is Level.full


def test_a_young_face_or_a_budget_of_zero_never_steps_down():
    clock = FakeClock()
    young = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=True)
    off = Watchdog(WatchdogConfig(swap_age_budget_ms=0.0), clock, enhancer_enabled=True)
    assert feed_ages(young, clock, 900.0, 30 * 10) == []
    assert feed_ages(off, clock, 9000.0, 30 * 10) == []
    assert young.level is off.level is Level.full


def test_climbs_back_once_the_face_is_young_and_not_before():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=True)
    feed_ages(dog, clock, 4000.0, 30 * 2)
    assert dog.level is Level.no_enhancer
    # Frames well on time (the latency rule alone would climb after 3 s) but the face still 1.2 s
    # old: over budget × headroom (0.9 s), so the enhancer stays off.
    feed_ages(dog, clock, 1200.0, 30 * 10)
    assert dog.level is Level.no_enhancer and len(dog.transitions) == 1
    events = feed_ages(dog, clock, 500.0, 30 * 5)  # the call app closed: the face is young again
    climbs = [e for e in events if isinstance(e, Transition)]
    assert [(t.from_level, t.to_level, t.reason) for t in climbs] == [(Level.no_enhancer, Level.full, "headroom")]


def test_a_climb_that_makes_the_face_old_again_waits_longer_each_time():
    # The enhancer makes the face 3 s old; without it 0.5 s: the ladder must not bounce every few
    # seconds between the two.
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=True)
    feed_ages(dog, clock, lambda level: 3000.0 if level is Level.full else 500.0, 30 * 120)
    downs = [t.time for t in dog.transitions if t.reason == "swap_age"]
    assert len(downs) >= 3
    gaps = [b - a for a, b in zip(downs, downs[1:])]
    assert all(later > earlier for earlier, later in zip(gaps, gaps[1:])), gaps


# ---- several faces, each old: one face swapped per round -------------------------------------------


def feed_faces(dog: Watchdog, clock: FakeClock, age_ms, frames: int, faces: int) -> list:
    """`frames` frames on time, each with `faces` faces to swap; the face shown is `age_ms(cap)` old
    (cap: the watchdog's faces per round, None for every face) — one face a round is that many
    times younger."""
    events = []
    for _ in range(frames):
        clock.now += 1.0 / FPS
        events.extend(dog.observe(20.0, swap_age_ms=age_ms(dog.faces_per_round), faces_to_swap=faces))
    return events


def test_several_old_faces_with_nothing_below_are_swapped_one_per_round_logged_and_given_back_once_young():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=False)
    events = feed_faces(dog, clock, lambda cap: 3 * 1200.0 if cap is None else 500.0, 30 * 2, faces=3)
    caps = [e for e in events if isinstance(e, Transition)]
    assert [(t.from_level, t.to_level, t.reason, t.faces_per_round) for t in caps] == [(Level.full, Level.full, "swap_age", (None, 1))]
    assert dog.faces_per_round == 1
    assert "faces_per_round=all->1" in caps[0].log_line() and "swap_age_p95_ms=3600" in caps[0].log_line()
    assert dog.history()[-1]["faces_per_round"] == {"from": "all", "to": "1"}
    # The call app closes: the three faces would be young again (400 ms each).
    events = feed_faces(dog, clock, lambda cap: 400.0 if cap is None else 150.0, 30 * 10, faces=3)
    back = [e for e in events if isinstance(e, Transition)]
    assert [(t.reason, t.faces_per_round) for t in back] == [("headroom", (1, None))]
    assert dog.faces_per_round is None and "faces_per_round=1->all" in back[0].log_line()


def test_one_old_face_is_not_capped_and_a_pinned_quality_swaps_every_face():
    clock = FakeClock()
    alone = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=False)
    assert feed_faces(alone, clock, lambda cap: 4000.0, 30 * 10, faces=1) == []
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=False)
    feed_faces(dog, clock, lambda cap: 4000.0, 30 * 2, faces=2)
    assert dog.faces_per_round == 1
    dog.force(Level.full)
    assert dog.faces_per_round is None


def test_a_second_face_that_left_the_window_does_not_cap_the_one_still_there():
    """The cap judges the frames of the window, as the latencies and the ages are: a second face
    seen earlier (young then) and gone for a whole window does not make one old face "several"."""
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=False)
    feed_faces(dog, clock, lambda cap: 500.0, 10, faces=2)  # a visitor, while the face is young
    feed_faces(dog, clock, lambda cap: 500.0, 2 * dog.cfg.window, faces=1)  # gone for two windows
    assert feed_faces(dog, clock, lambda cap: 4000.0, 30 * 10, faces=1) == []
    assert dog.faces_per_round is None


def test_the_enhancer_goes_first_and_comes_back_only_after_every_face_is_swapped_again():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=True)
    feed_faces(dog, clock, lambda cap: 4000.0 if cap is None else 600.0, 30 * 4, faces=4)
    assert [(t.to_level, t.faces_per_round) for t in dog.transitions] == [(Level.no_enhancer, (None, None)), (Level.no_enhancer, (None, 1))]
    feed_faces(dog, clock, lambda cap: 300.0, 30 * 20, faces=4)
    assert [(t.to_level, t.faces_per_round) for t in dog.transitions[2:]] == [(Level.no_enhancer, (1, None)), (Level.full, (None, None))]


def test_giving_the_faces_back_when_that_makes_them_old_again_waits_longer_each_time():
    clock = FakeClock()
    dog = Watchdog(WatchdogConfig(swap_age_budget_ms=1500.0), clock, enhancer_enabled=False)
    feed_faces(dog, clock, lambda cap: 3000.0 if cap is None else 500.0, 30 * 120, faces=3)
    caps = [t.time for t in dog.transitions if t.faces_per_round == (None, 1)]
    assert len(caps) >= 3
    gaps = [b - a for a, b in zip(caps, caps[1:])]
    assert all(later > earlier for earlier, later in zip(gaps, gaps[1:])), gaps

"""The live numbers, described once: what `status()`, the `--stats-json` document and the control
page's history read and write.

Standard library only, so the control protocol (and with it the CLI) can name these types without
importing numpy. `LiveStats.live_numbers()` builds `LiveNumbers`; the engine's status carries them,
`LiveStats.to_json()` is built from them, and the panel's history samples them.
"""

from __future__ import annotations

from typing import TypedDict


class Percentiles(TypedDict):
    p50: float
    p95: float
    p99: float


class AgePercentiles(TypedDict):
    p50: float
    p95: float


class FrameCounts(TypedDict):
    """Frames since the start, by what happened to them (`vcamd.common.types.Outcome` for the published ones)."""

    captured: int
    processed: int
    published: int
    dropped: int  # captured but never processed: a newer camera frame replaced it
    swapped: int
    held: int
    blurred: int
    passthrough: int
    off: int
    offline: int  # the offline card: the camera lost (no frame for stall_timeout_s)
    starting: int  # the "Camera starting…" card, before the camera's first frame (a healthy start, not offline)
    again: int  # a covered frame of the start processed again once its wait was over (`live.startframes`): published twice


class FaceCounts(TypedDict):
    """Per face and published frame (`vcamd.privacy.rule.FaceOutcome`)."""

    swapped: int
    held: int
    obscured: int
    unsure: int
    """Places the detector was unsure of, covered (`[detection] cover_threshold`): not counted as faces above."""
    side_on: int
    """Of the held and obscured above, faces seen from the side (`vcamd.privacy.rule.side_on`): a swap there would leave cheek and ear as they are."""


class Misses(TypedDict):
    """Why a face was held or obscured instead of swapped: counts since the start."""

    tracker_late: int  # crop re-detections that missed the loop's deadline: positions unknown for that frame
    tracker_errors: int  # crop re-detections that raised
    detector_errors: int  # full-frame detections that raised
    swap_errors: int  # swap model failures (exception, NaN output, wrong count)
    swap_jobs_replaced: int  # swap jobs a newer one replaced before the worker took them: the swap is slower than the camera
    camera_lost: int  # times the camera stopped delivering (since it was last chosen)
    camera_bad_frames: int  # frames the camera delivered that were not images (skipped)


class LiveNumbers(TypedDict):
    fps: float  # published frames per second over the last `stats.RECENT_FRAMES` frames
    latency_ms: Percentiles  # capture → publish
    swap_age_ms: AgePercentiles  # publish time minus the capture time of the frame the shown swap was computed on
    frames: FrameCounts
    faces: FaceCounts
    misses: Misses


def no_misses() -> Misses:
    return Misses(tracker_late=0, tracker_errors=0, detector_errors=0, swap_errors=0, swap_jobs_replaced=0,
                  camera_lost=0, camera_bad_frames=0)

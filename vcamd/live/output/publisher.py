"""The last step of a frame: disclosure badge, the sink (and its failure streak), the frames kept.

Keeps the last published frame (snapshot, control page) and the last good output (a frame in which
every face was swapped, and where those faces were) that `on_miss = "hold"` covers faces with; draws
the placeholder cards: "starting" until the camera's first frame, "offline" while it is away.
Runs on the loop's thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vcamd.common.errors import VcamdError
from vcamd.common.types import Face, Frame
from vcamd.config.schema import Config, DisclosureConfig, PreviewConfig, VirtualCameraConfig
from vcamd.live.output.placeholder import OFFLINE_MESSAGE, STARTING_MESSAGE
from vcamd.privacy.rule import Held
from vcamd.sinks.base import Sink, SinkFactory
from vcamd.sinks.registry import OUTPUT_SECTIONS

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(frozen=True)
class PublisherSettings:
    """What the publisher reads of the config (`Publisher.configure`): the badge ([disclosure]) and
    the output sections (`sinks.registry.OUTPUT_SECTIONS`: the sink factory opens the output with
    them; the publisher compares them to know when to reopen it). Built from a config in one place (`of`)."""

    disclosure: DisclosureConfig
    virtual_camera: VirtualCameraConfig
    preview: PreviewConfig

    @classmethod
    def of(cls, cfg: Config) -> PublisherSettings:
        return cls(cfg.disclosure, cfg.virtual_camera, cfg.preview)


class Publisher:
    """Sends frames to the sink; never raises for a failed write (retried with the next frame)."""

    def __init__(
        self,
        sink_factory: SinkFactory,
        *,
        badge: Callable[[Frame, str, str], object],
        placeholder: Callable[[int, int, str], Frame],
        clock: Clock,
    ) -> None:
        self._sink_factory = sink_factory
        self._badge = badge
        self._placeholder = placeholder
        self._clock = clock
        self.sink: Sink | None = None  # built once the source's frame size is known
        self.size: tuple[int, int] | None = None  # (width, height) of the output
        self._fps = 30.0
        self.failure_streak = 0  # consecutive failed sink writes (logged once per streak)
        self.last_published: Frame | None = None
        self.held: Held | None = None  # the last good output
        self.applied: PublisherSettings | None = None
        """The settings `configure` applied last: the badge drawn from its [disclosure], the output
        opened with its output sections (the sink factory reads them)."""

    def configure(self, settings: PublisherSettings) -> str | None:
        """Apply the publisher's settings: [disclosure] from the next frame, and the output
        reopened when one of its sections (`sinks.registry.OUTPUT_SECTIONS`) changed. Returns the
        problem when the new output cannot open (the caller goes back to the old settings)."""
        before, self.applied = self.applied, settings
        if before is None or all(getattr(before, s) == getattr(settings, s) for s in OUTPUT_SECTIONS):
            return None
        return self.reopen()

    def open(self, size: tuple[int, int], fps: float) -> None:
        """Open the sink once, before the first frame; kept open for the whole run."""
        self.size, self._fps = size, fps
        self.sink = self._sink_factory(size[0], size[1], fps)
        self.sink.open()

    def reopen(self) -> str | None:
        """Close the output and open it with the current settings ([virtual_camera]/[preview]
        changed). Returns the problem when the new one cannot open; the caller then goes back to
        the old settings and calls `reopen()` again so the output never vanishes."""
        if self.sink is None or self.size is None:
            return None
        self.sink.close()
        try:
            self.sink = self._sink_factory(self.size[0], self.size[1], self._fps)
            self.sink.open()
        except VcamdError as err:
            self.sink = None
            return str(err)
        log.info("output reopened with the new settings")
        return None

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()

    def badge(self, frame: Frame) -> None:
        """Label `frame` as AI-altered, as [disclosure] says."""
        assert self.applied is not None, "configure() first"
        disclosure = self.applied.disclosure
        if disclosure.badge:
            self._badge(frame, disclosure.text, disclosure.corner.value)

    def offline_frame(self) -> Frame:
        assert self.size is not None
        return self._placeholder(self.size[0], self.size[1], OFFLINE_MESSAGE)

    def starting_frame(self) -> Frame:
        """The card shown before the camera's first frame (a webcam can take seconds to start)."""
        assert self.size is not None
        return self._placeholder(self.size[0], self.size[1], STARTING_MESSAGE)

    def send(self, frame: Frame, status: dict[str, Any] | None) -> None:
        """Write `frame`; a failed write is logged once per streak and retried with the next frame."""
        try:
            if self.sink is None:
                raise VcamdError("the output is closed")
            self.sink.send(frame, status)
        except Exception as exc:  # a failed write is retried with the next frame, never fatal
            # One line when a streak starts and one when it ends, not one per frame at 30 fps.
            if self.failure_streak == 0:
                log.warning("sink write failed (retrying with every frame): %s", exc)
            self.failure_streak += 1
        else:
            if self.failure_streak:
                log.info("sink writes work again after %d failed frames", self.failure_streak)
                self.failure_streak = 0
        self.last_published = frame

    def remember_good(self, frame: Frame, faces: list[Face], sources: tuple[str | None, ...] = ()) -> None:
        """`frame` showed every one of `faces` swapped (with a face map: each to its `sources`): the
        output `hold` covers faces with."""
        self.held = Held(frame, list(faces), sources)

    def forget_good(self) -> None:
        """The camera changed: the old good output no longer matches the picture."""
        self.held = None

"""What the live engine reports: the status snapshot the loop refreshes, and the stats JSON at the end.

`EngineStatus` reads the running parts (`parts.LiveParts`), the settings (`engine_settings.Settings`)
and the start-up record (`frames.FrameProcessor`) and writes nothing but the snapshot
(`LiveParts.status`), which every surface (socket, tray, page) reads without costing the loop.
"""

from __future__ import annotations

from typing import Any

from vcamd.live.engine_settings import Settings
from vcamd.live.frames import FrameProcessor
from vcamd.live.measures.numbers import Misses
from vcamd.live.measures.stats import GpuSampler, count_misses
from vcamd.live.parts import LiveParts


class EngineStatus:
    """The engine's numbers and state, assembled from its parts (on the loop's thread)."""

    def __init__(self, parts: LiveParts, settings: Settings, frames: FrameProcessor, gpu: GpuSampler) -> None:
        self.parts = parts
        self.settings = settings
        self.frames = frames
        self.gpu = gpu

    def refresh(self, state: str) -> dict[str, Any]:
        """The status snapshot now, with the engine in `state`: kept in `LiveParts.status` and returned."""
        source_face = self.settings.cfg.swap.source_face
        identity = self.parts.faces.source if self.parts.faces is not None else None
        self.parts.status = {
            "enabled": self.parts.enabled,
            "state": state,
            "camera": self.parts.reader.state.value,
            "level": self.parts.watchdog.level.name,
            "quality": "auto" if self.parts.watchdog.automatic else self.parts.watchdog.level.name,
            **self.parts.stats.live_numbers(captured=self._captured(), dropped=self._dropped(), misses=self._misses()),
            "source_face": str(source_face) if source_face else None,
            # A group photo: which face was taken, for every surface (socket, page, tray), not only set-face's answer.
            "source_face_pick": identity.which_face() if identity is not None else None,
            "providers": dict(self.parts.providers),
            **self.settings.models_status(),
            **self._precision(),
            "config_error": self.settings.problems.text(),
            "swap_needs": [need.to_json() for need in self.settings.swap_needs()],
            "queue_depth": self.parts.slot.depth,
            "gpu": self.gpu.latest(),
            "server": self._server_status(),
        }
        return self.parts.status

    def stats_json(self) -> dict[str, Any]:
        """The run's stats (`--stats-json`); stops the GPU sampler."""
        return self.parts.stats.to_json(
            captured=self._captured(),
            dropped=self._dropped(),
            source_fps=self.parts.source.fps,
            transitions=self.parts.watchdog.history(),
            queue_depth_max=self.parts.slot.max_depth,
            providers=self.parts.providers,
            gpu=self.gpu.stop(),
            misses=self._misses(),
        ) | {"startup_ms": self.frames.startup.to_json(), "published_before_first_swap": self.frames.startup.before_first_swap,
             "published_while_loading": self.frames.startup.while_loading,
             "swapper_cores": self.parts.worker.cores.to_json(), "server": self._server_status(), **self._precision(),
             "precision_changes": list(self.settings.int8.changes)}

    def _server_status(self) -> dict[str, Any] | None:
        """The Triton server the models run on (`[models] server`): its state, round trip, models; None: here."""
        remote = self.parts.faces.remote if self.parts.faces is not None else None
        return remote.server_status() if remote is not None else None

    def _precision(self) -> dict[str, Any]:
        """What each model of the running pipeline runs at ("float" or "int8", `vcamd.inference.precision`) and
        why; the face map's people (`face_map`: reference → source). Empty while none runs."""
        faces = self.parts.faces
        if faces is None:
            return {"precision": {}, "precision_why": {}, "face_map": []}
        runs, why = faces.precision_status()
        return {"precision": runs, "precision_why": why, "face_map": faces.face_map.status() if faces.face_map is not None else []}

    def _captured(self) -> int:
        return self.parts.replaced_captured + self.parts.reader.captured + self.parts.source.skipped

    def _misses(self) -> Misses:
        return count_misses(reader=self.parts.reader, tracker=self.parts.tracker, full_detector=self.parts.full_detector,
                            swap_worker=self.parts.worker)

    def _dropped(self) -> int:
        """Frames captured but never processed: replaced in the slot, or skipped by a file source
        that fell behind (also those of sources replaced on a camera change)."""
        return self.parts.slot.dropped + self.parts.replaced_skipped + self.parts.source.skipped

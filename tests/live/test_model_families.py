"""Every swapper family in the live engine, switched while it runs as the page and the tray switch it
(`LiveEngine.set_model`, a `.dfm` model by a config edit): each one's stand-in, of that family's
exact signature, swaps the real face of the camera, and no published frame shows the raw face
while the models change — checked on every frame with the real detectors and recogniser
(`vcamd.bench.leaks.find_leaks`).

The stand-ins return a stranger's real face (crowd_selfie.jpg's largest) aligned in their family's
own geometry and normalisation: what a perfect swapper of that family would return, so a swap can
be told from a leak — and a family whose crop or output is handled wrongly pastes a broken face
where the detector then finds the raw person, or none at all."""

from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.waiting import wait_for

from vcamd.bench import leaks
from vcamd.bench.families import build_converter, build_family_swapper
from vcamd.bench.standins import build_recognizer
from vcamd.common.types import Outcome
from vcamd.config.reading import config_from_dict
from vcamd.faces.specs import SWAPPERS, family_named
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine
from vcamd.live.loading import load_face_pipeline

FIRST = "inswapper_128_fp16"
SWITCHED = ("hyperswap_1a_256", "ghost_1_256", "hififace_unofficial_256", "simswap_256", "blendswap_256",
            "simswap_unofficial_512", "uniface_256")
"""One model of every family but DeepFaceLab's, by its manifest name, in the order they are switched to:
each one's crop (template, size) differs from the one before, so its swaps are told from the last."""
SWAPS_EACH = 3
"""Frames showing each family's swap before the next switch."""


@pytest.fixture(scope="module")
def checkers(assets: Path):
    return leaks.load_checkers(assets / "models", threads=1)


@pytest.fixture(scope="module")
def stranger(assets: Path, checkers):
    """crowd_selfie.jpg and its largest face (as the second checker finds it), and its embedding."""
    both, recognizer = checkers
    photo = cv2.imread(str(assets / "images" / "crowd_selfie.jpg"))
    face = max(both[1].detect(photo), key=lambda f: f.area)
    return photo, face, recognizer.embed(photo, face)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory, stranger) -> Path:
    """A models folder with each family's stranger stand-in under its manifest file name, the
    embedding converters, and a DeepFaceLab model."""
    folder = tmp_path_factory.mktemp("family_models")
    photo, face, _ = stranger
    for name in (FIRST, *SWITCHED):
        spec = family_named(name)
        assert spec is not None
        build_family_swapper(folder / f"{name}.onnx", spec, stranger=spec.crop.align(photo, face.kps)[0])
    for converter in {spec.converter for spec in SWAPPERS if spec.converter}:
        build_converter(folder / f"{converter}.onnx")
    dfl = SWAPPERS[-1].sized(224)
    build_family_swapper(folder / "own_identity.dfm", dfl, stranger=dfl.crop.align(photo, face.kps)[0])
    build_recognizer(folder / "recognizer.onnx")
    return folder


@pytest.fixture(scope="module")
def clip(tmp_path_factory, assets: Path, checkers) -> leaks.Clip:
    """Newton's head on grey at 320×240, 15 fps, a second here and a second a little to the right."""
    both, recognizer = checkers
    portrait = cv2.imread(str(assets / "images" / "newton.png"))
    face = max(both[1].detect(portrait), key=lambda f: f.area)
    return leaks.portrait_clip(tmp_path_factory.mktemp("clip") / "newton.avi", portrait, face, [0.45] * 15 + [0.55] * 15,
                               size=(320, 240), fps=15.0, face_height=0.45, detectors=both, recognizer=recognizer)


class KeepAll:
    """A sink keeping every published frame."""

    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []
        self._lock = threading.Lock()

    def open(self) -> None:
        pass

    def send(self, frame: np.ndarray, stats: dict | None = None) -> None:
        with self._lock:
            self.frames.append(frame.copy())

    def close(self) -> None:
        pass


def test_every_family_swaps_live_and_switching_shows_no_raw_frame(models_dir: Path, clip: leaks.Clip, checkers, stranger, assets: Path):
    cfg = config_from_dict({
        "models": {"dir": str(models_dir), "detector": str(assets / "models" / "scrfd_500m_kps.onnx"),
                   "recognizer": str(models_dir / "recognizer.onnx"), "swapper": FIRST, "providers": ["cpu"], "threads": 1},
        "detection": {"size": 320, "track_size": 160},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
        "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5},
    })
    sink = KeepAll()
    engine = LiveEngine(cfg, source=open_source(str(clip.path), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
                        faces=load_face_pipeline(cfg)[0], pipeline_factory=load_face_pipeline)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()

    def swapped() -> int:
        return engine.parts.stats.outcomes[Outcome.swapped]

    def shows(family: str) -> bool:
        """The newest swap is the new family's: its crop is that family's (template and size)."""
        result, _ = engine.parts.worker.latest()
        spec = next(s for s in SWAPPERS if s.family == family)
        crop = (result.swapped[0].template, result.swapped[0].size) if result is not None and result.swapped else None
        return crop == (spec.crop.template, 224 if spec.layout == "dfm" else spec.crop.size)

    try:
        wait_for(lambda: swapped() >= SWAPS_EACH, what=f"swaps with {FIRST}")
        status = engine.status()
        assert status["models"] == {"swapper": FIRST, "enhancer": "gfpgan_1.4", "loading": None}
        offered = {c["name"]: c["present"] for c in status["model_choices"]["swapper"]}
        assert all(offered[name] for name in SWITCHED) and not offered["ghost_2_256"]  # only what is in the models dir
        for name in SWITCHED:
            family = family_named(name).family
            after = engine.set_model("swapper", name)
            assert after["models"]["loading"] == name or after["models"]["swapper"] == name
            wait_for(lambda: shows(family), what=f"{name}'s swaps", timeout_s=60)
            wait_for(lambda: engine.status()["models"] == {"swapper": name, "enhancer": "gfpgan_1.4", "loading": None},
                     what=f"{name} in the status", detail=lambda: engine.status()["models"])
            done = swapped()
            wait_for(lambda: swapped() >= done + SWAPS_EACH, what=f"frames swapped with {name}")
        # A DeepFaceLab model: no source photo, by a config edit (a path, as the config names one).
        engine.on_config_change(engine.cfg.model_copy(update={"models": engine.cfg.models.model_copy(
            update={"swapper": str(models_dir / "own_identity.dfm")})}))
        wait_for(lambda: shows("deepfacelab"), what="the .dfm model's swaps", timeout_s=60)
        done = swapped()
        wait_for(lambda: swapped() >= done + SWAPS_EACH, what="frames swapped with the .dfm model")
        assert engine.status()["config_error"] is None
    finally:
        engine.request_quit()
        thread.join(20)
    assert not thread.is_alive()
    stats = engine.parts.stats
    assert stats.outcomes[Outcome.passthrough] == 0
    both, recognizer = checkers
    leaked = leaks.find_leaks(sink.frames, clip.placements, both, recognizer, swapped_identity=stranger[2])
    assert leaked == [], f"{len(leaked)} leaks in {len(sink.frames)} frames: " + "; ".join(map(str, leaked[:5]))
    assert len(sink.frames) > 8 * SWAPS_EACH


def test_a_model_not_downloaded_is_refused_at_once_and_nothing_changes(models_dir: Path, assets: Path, clip: leaks.Clip):
    from vcamd.common.errors import VcamdError

    cfg = config_from_dict({
        "models": {"dir": str(models_dir), "detector": str(assets / "models" / "scrfd_500m_kps.onnx"),
                   "recognizer": str(models_dir / "recognizer.onnx"), "swapper": FIRST, "providers": ["cpu"], "threads": 1},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
    })
    engine = LiveEngine(cfg, source=open_source(str(clip.path), cfg.camera, loop=True), sink_factory=lambda w, h, fps: KeepAll(),
                        faces=load_face_pipeline(cfg)[0], pipeline_factory=load_face_pipeline)
    with pytest.raises(VcamdError, match=r"ghost_2_256\.onnx \(ghost_2_256\).*vcamd models pull ghost_2_256"):
        engine.settings.set_model("swapper", "ghost_2_256")
    with pytest.raises(VcamdError, match="gfpgan_1.4 is not a swapper"):
        engine.settings.set_model("swapper", "gfpgan_1.4")
    with pytest.raises(VcamdError, match="did you mean"):
        engine.settings.set_model("swapper", "ghost_9_256")
    assert engine.cfg.models.swapper == FIRST


def test_with_a_server_a_served_model_is_not_switched_here(models_dir: Path, assets: Path, clip: leaks.Clip):
    """The server serves the models it was started with: a switch from the page or the tray is
    refused at once with what to do there, and nothing changes (nothing is loaded, no server asked)."""
    from vcamd.common.errors import VcamdError

    cfg = config_from_dict({
        "models": {"dir": str(models_dir), "detector": str(assets / "models" / "scrfd_500m_kps.onnx"),
                   "recognizer": str(models_dir / "recognizer.onnx"), "swapper": FIRST, "enhancer": "gfpgan_1.4",
                   "providers": ["cpu"], "threads": 1, "server": "grpc://127.0.0.1:1"},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
    })
    engine = LiveEngine(cfg, source=open_source(str(clip.path), cfg.camera, loop=True), sink_factory=lambda w, h, fps: KeepAll(),
                        faces=None, pipeline_factory=load_face_pipeline)
    for role, name in (("swapper", "ghost_2_256"), ("enhancer", "codeformer")):
        with pytest.raises(VcamdError, match=rf"the {role} runs on the Triton server at grpc://127.0.0.1:1") as refused:
            engine.settings.set_model(role, name)
        assert f'[models] {role} = "{name}"' in (refused.value.fix or "")
    assert engine.cfg.models.swapper == FIRST and engine.cfg.models.enhancer == "gfpgan_1.4"

"""The one settings schema: a frozen pydantic model per TOML section, and `Config`, all of them.

Unknown keys are rejected (a typo must not silently fall back to a default). Every key has a
default, documented in `config.example.toml`; a test keeps the two in step. Reading a file is
`vcamd.config.reading`; how a refused value is worded, `vcamd.config.wording`.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    field_validator,
)


def _no_nul(p: Path) -> Path:
    if "\x00" in str(p):
        raise ValueError("a path cannot contain a NUL character")
    return p


UserPath = Annotated[Path, Strict(False), AfterValidator(_no_nul)]
"""A path from the config file (TOML text); relative paths are taken relative to the file."""

Providers = Literal["auto", "cuda", "tensorrt", "coreml", "directml", "openvino", "cpu"]


class Section(BaseModel):
    # strict: a TOML value of the wrong type is refused, never converted ("0.3" is not a number,
    # true is not 1). An integer is still a number for a float key (threshold = 1 is read as 1.0,
    # then bounded). Enum and path keys opt out (`Strict(False)`): TOML writes them as text.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ModelsConfig(Section):
    dir: UserPath | None = None
    """Where model files live; None = the user data dir (platformdirs) / models."""
    detector: str = "buffalo_l"
    """Manifest name (buffalo_l → det_10g.onnx) or a path to an SCRFD .onnx file."""
    recognizer: str = "buffalo_l"
    """Manifest name (buffalo_l → w600k_r50.onnx) or a path to an ArcFace .onnx file."""
    swapper: str = "inswapper_128_fp16"
    """A swapper from the manifest (inswapper_128_fp16, hyperswap_1a_256, ghost_2_256, simswap_256, …:
    `vcamd models list`), or a path to an .onnx file or a DeepFaceLab .dfm model."""
    swapper_family: str = ""
    """The swapper's family (vcamd.faces.specs.SWAPPERS: inswapper_128, hyperswap_256, ghost_256, …);
    "" = told from the model's name (the manifest's, or a file named like one) or its inputs."""
    converter: str = ""
    """The embedding converter of the ghost, simswap and hififace families (a manifest name or a
    path); "" = the family's own (crossface_ghost, crossface_simswap, crossface_hififace)."""
    enhancer: str = "gfpgan_1.4"
    """An enhancer from the manifest (gfpgan_1.4, gfpgan_1.3, codeformer, restoreformer_plus_plus,
    gpen_bfr_512, …) or a path to an .onnx file."""
    parser: str = ""
    """Face parser (BiSeNet, 19 CelebAMask-HQ classes): a path to an .onnx file; "" = off. With
    one, the swapped face is pasted only where the parser sees the [mask] regions."""
    providers: list[Providers] = ["auto"]
    mirror: str = ""
    """Replaces the download host of every model URL (for users behind firewalls)."""
    threads: Annotated[int, Field(ge=0, le=256)] = 0
    """ONNX Runtime intra-op threads per session; 0 = number of cores."""
    precision: Literal["auto", "float", "int8"] = "auto"
    """The swapper, the enhancer and the parser on the CPU: "auto" runs each one's int8 copy where the CPU has
    int8 dot-product units and the copy passed the fidelity check on these weights (`vcamd.inference.precision`);
    "float" never; "int8" also without those units. GPUs keep their float path; a model on the `server` runs as served."""
    server: str = ""
    """A Triton Inference Server running the swapper (and the enhancer and parser when set),
    "grpc://HOST:PORT"; "" = here. Only aligned face crops and the source latent go there."""
    fallback: Literal["none", "local"] = "none"
    """While the server is away: "none" holds or obscures the faces (`[swap] on_miss`), "local"
    runs the local models (their files must be here)."""

    @field_validator("providers")
    @classmethod
    def _providers_not_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("must list at least one provider, or [\"auto\"]")
        if "auto" in v and len(v) > 1:
            raise ValueError('"auto" cannot be combined with explicit providers')
        return v

    @field_validator("server")
    @classmethod
    def _server_is_grpc(cls, v: str) -> str:
        from vcamd.config.address import ServerAddress

        return ServerAddress.parse(v).url if v.strip() else ""

    @field_validator("mirror")
    @classmethod
    def _mirror_is_http(cls, v: str) -> str:
        if v and not v.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, or empty")
        return v.rstrip("/")


class DetectionConfig(Section):
    size: Annotated[int, Field(ge=128, le=1280, multiple_of=32)] = 640
    """Detector input size (square) for full-frame detections."""
    threshold: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5
    cover_threshold: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.2
    """Live, face_selection = "all" or [swap] others = "obscure": a face the full detection scores at least this but under
    `threshold` (the detector is unsure) is obscured, never swapped and never shown raw. Equal to
    `threshold`: off. Default 0.2, not 0.3: at 1080p the full look is ÷3, a 20–36-px face is 7–12 px at the
    detector's input, under SCRFD's smallest anchor, and its score is the detector's luck — the checkers (SCRFD-500M or
    -2.5G at 0.5) find faces on crowd_selfie at 1080p that the other model scores 0.24 (tests/live/test_small_faces.py)."""
    full_every: Annotated[int, Field(ge=1, le=300)] = 10
    """Live: look for new faces every N frames (where the picture changed; the whole frame at least every third look, every thirtieth while the picture holds still); in between, re-detect in a crop around each face."""
    track_size: Annotated[int, Field(ge=96, le=640, multiple_of=32)] = 192
    """Live: detector input size for the crop around a tracked face."""

    @field_validator("cover_threshold")
    @classmethod
    def _cover_at_most_threshold(cls, value: float, info: ValidationInfo) -> float:
        threshold = info.data.get("threshold")  # absent when it failed its own check (reported there)
        if threshold is not None and value > threshold:
            raise ValueError(f"above threshold ({threshold:g}): set it at most {threshold:g} (equal turns covering unsure faces off)")
        return value


class FaceSelection(StrEnum):
    largest = "largest"
    all = "all"
    reference = "reference"


class Others(StrEnum):
    """What the output shows of the faces face_selection does not swap."""

    obscure = "obscure"
    show = "show"


class OnMiss(StrEnum):
    hold = "hold"
    blur = "blur"
    passthrough = "passthrough"


class FaceMapEntry(Section):
    """One `[[swap.map]]` entry: the person in `reference` is given the face in `source`
    (`vcamd/faces/mapping.py`). Each photo must show exactly one face."""

    reference: UserPath
    """A photo of the person in the camera (one face)."""
    source: UserPath
    """A photo of the face they get (one face; the consent of that person is needed too), or a
    DeepFaceLab `.dfm` model (its own trained face)."""


class SwapConfig(Section):
    enabled: bool = True
    """Swapping on at start-up (the tray and `vcamd on/off` switch it at run time)."""
    source_face: UserPath | None = None
    source_consent: bool = False
    """You confirm you have the consent of the person in source_face. Required to swap."""
    face_selection: Annotated[FaceSelection, Strict(False)] = FaceSelection.largest
    reference_face: UserPath | None = None
    """With face_selection = "reference": the target face to swap is the one most like this photo."""
    others: Annotated[Others, Strict(False)] = Others.obscure
    """The faces face_selection does not swap (other people, a poster, a face on a screen): "obscure"
    (made unrecognisable, like a face that cannot be swapped) or "show" (left as the camera shows them)."""
    cover_changes: bool = True
    """Live: what changes in the frame away from the faces known so far (someone stepping in, a hand,
    a pan) is obscured until a detection has looked there, so a face entering between detections is
    never shown raw. false: only faces already found are swapped or covered — a newcomer can show
    for a few frames, but nothing else is ever obscured (a screen or a moving background included)."""
    mouth_mask: bool = False
    color_correction: bool = True
    on_miss: Annotated[OnMiss, Strict(False)] = OnMiss.hold
    """Live: what a frame shows when its face cannot be swapped in time (start-up, detection miss, model error, stale swap)."""
    max_result_age_s: Annotated[float, Field(gt=0, le=600)] = 5.0
    """Live: once the last swap is older than this while the model hangs (a swap runs > 4× its usual time), on_miss applies."""
    pixel_boost: Literal[128, 256, 512] = 128
    """The side (px) each face is swapped at: above the swapper's own (inswapper's 128, most other
    families' 256), its crop is swapped as (N/side)² polyphase tiles (one batch, (N/side)² times the
    model's work) and blended at N px — a sharper face on a large camera picture. The watchdog gives
    it up first ("no_boost" rung). A side N is not a multiple of (a 224-px .dfm model): no boost."""
    map: list[FaceMapEntry] = []
    """`[[swap.map]]`: several people, each their own source face, told apart by the recogniser;
    everyone else follows `others` (face_selection and source_face are then not used)."""
    weight: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    """How strongly the source identity is pushed (FaceFusion's face swapper weight), for the
    swappers that take an embedding: 0.5 = the source as it is; towards 0 the target's own identity
    is mixed in (35 % at 0), towards 1 pushed away from (35 % at 1). Off 0.5 the recognizer runs on
    each swapped face too."""


class SmoothingConfig(Section):
    """Live: each tracked face's position filtered over time (`vcamd/live/tracking/smoothing.py`, a One-Euro
    filter): a still head's paste stands still, a moving one follows without lag."""

    enabled: bool = True
    min_cutoff_hz: Annotated[float, Field(gt=0.0, le=30.0)] = 0.15
    """Cutoff on a still head (Hz): lower is steadier."""
    beta: Annotated[float, Field(ge=0.0, le=1000.0)] = 40.0
    """How fast the cutoff rises with the face's speed (per face width a second): higher lags less in motion."""


FaceRegion = Literal["skin", "brows", "eyes", "glasses", "nose", "mouth", "lips"]


class MaskConfig(Section):
    """With `[models] parser`: where the swapped face may show, and when too little of it is in view."""

    regions: list[FaceRegion] = ["skin", "brows", "eyes", "nose", "lips"]
    """The face parser's regions the swap covers; "glasses" and "mouth" (the inner mouth) are optional."""
    min_visible: Annotated[float, Field(ge=0.0, le=1.0)] = 0.6
    """The share of the face's core (eyes, nose, mouth) the parser must see as those regions for the
    face to be pasted; under it (a hand over most of the face, a turned head) the face is held or
    obscured as by on_miss."""

    @field_validator("regions")
    @classmethod
    def _regions_not_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError('must list at least one region, e.g. ["skin", "brows", "eyes", "nose", "lips"]')
        return v


class EnhancerConfig(Section):
    enabled: bool = False
    strength: Annotated[float, Field(ge=0.0, le=1.0)] = 0.8
    weight: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    """CodeFormer's fidelity weight: 0 = the most restored, 1 = the most like the input (the other
    enhancers have none)."""


class CameraConfig(Section):
    device: str = "0"
    """Camera index ("0"), device path ("/dev/video0"), video file path, or "synthetic"."""
    width: Annotated[int, Field(ge=64, le=7680)] = 1280
    height: Annotated[int, Field(ge=64, le=4320)] = 720
    fps: Annotated[float, Field(gt=0, le=240)] = 30.0
    mjpg: bool = True
    loop: bool = False
    """For a video file: start again at the end instead of going offline."""
    reopen_interval_s: Annotated[float, Field(gt=0, le=60)] = 2.0
    """Seconds between attempts to reopen a lost camera."""
    stall_timeout_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    """Live: no frame for this long counts as a lost camera; the offline frame is published meanwhile."""


class VirtualCameraConfig(Section):
    name: str = "FaceLive Camera"
    device: str = ""
    """Linux: the v4l2loopback device (e.g. /dev/video10); empty = find the one labelled `name`."""
    backend: str = ""
    """pyvirtualcam backend ("v4l2loopback", "obs", "unitycapture"); empty = the platform default."""


class WatchdogConfig(Section):
    budget_ms: Annotated[float, Field(gt=0, le=1000)] = 40.0
    """Per-frame budget, measured capture→publish."""
    window: Annotated[int, Field(ge=3, le=600)] = 15
    """Frames in the rolling window the decisions look at."""
    degrade_ratio: Annotated[float, Field(gt=0, le=1)] = 0.3
    """Degrade one step when more than this share of the window ran over budget."""
    recover_headroom: Annotated[float, Field(gt=0, lt=1)] = 0.6
    """Climb one step when the window's p95 is under budget × this for `recover_after_s`."""
    recover_after_s: Annotated[float, Field(ge=0, le=600)] = 3.0
    cooldown_s: Annotated[float, Field(ge=0, le=600)] = 1.0
    """Minimum time between two transitions, so one slow spike cannot cascade (a step down taken
    back because its frames ran later than the level it left goes back at once: `Watchdog`)."""
    lowres_scale: Annotated[float, Field(gt=0.1, lt=1)] = 0.5
    """Processing/detection resolution factor at the "lower resolution" step."""
    swap_age_budget_ms: Annotated[float, Field(ge=0, le=60000)] = 1500.0
    """How old the swapped face on screen may be (publish time minus the capture time of the frame
    it was computed on). When more than `degrade_ratio` of the window's swapped frames show an older
    one, step down to the next level with less swap work (`quality.lower_swap_work`), then swap one
    face per round (`Watchdog.faces_per_round`); 0 = off."""


class Corner(StrEnum):
    top_left = "top-left"
    top_right = "top-right"
    bottom_left = "bottom-left"
    bottom_right = "bottom-right"


class DisclosureConfig(Section):
    badge: bool = True
    text: Annotated[str, Field(min_length=1, max_length=40)] = "AI-altered"
    corner: Annotated[Corner, Strict(False)] = Corner.bottom_right


class PreviewConfig(Section):
    port: Annotated[int, Field(ge=0, le=65535)] = 8765
    """Port of the local preview page on 127.0.0.1 (0 = any free port)."""
    jpeg_quality: Annotated[int, Field(ge=10, le=100)] = 80
    """JPEG quality of the preview stream and /snapshot.jpg (higher = sharper, more CPU)."""


class PanelConfig(Section):
    enabled: bool = True
    """Serve the control page on 127.0.0.1 while the daemon runs (whatever the sink)."""
    port: Annotated[int, Field(ge=0, le=65535)] = 0
    """Port of the control page on 127.0.0.1; 0 = any free port (`vcamd panel` finds it)."""
    video_fps: Annotated[float, Field(ge=1, le=30)] = 10.0
    """Frames per second of the page's live video (JPEG-encoded once per frame for all viewers)."""


class RuntimeConfig(Section):
    max_memory_gb: Annotated[float, Field(ge=0, le=1024)] = 0.0
    """Upper bound on the daemon's memory; 0 = no cap."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"


class TrayConfig(Section):
    enabled: bool = True


class Config(Section):
    models: ModelsConfig = ModelsConfig()
    detection: DetectionConfig = DetectionConfig()
    swap: SwapConfig = SwapConfig()
    smoothing: SmoothingConfig = SmoothingConfig()
    mask: MaskConfig = MaskConfig()
    enhancer: EnhancerConfig = EnhancerConfig()
    camera: CameraConfig = CameraConfig()
    virtual_camera: VirtualCameraConfig = VirtualCameraConfig()
    watchdog: WatchdogConfig = WatchdogConfig()
    disclosure: DisclosureConfig = DisclosureConfig()
    preview: PreviewConfig = PreviewConfig()
    panel: PanelConfig = PanelConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    tray: TrayConfig = TrayConfig()

"""The one settings schema: a pydantic model per TOML section, load, validate, diff.

Unknown keys are rejected (a typo must not silently fall back to a default). Every key has a
default, documented in `config.example.toml`; a test keeps the two in step.
"""

from __future__ import annotations

import difflib
import os
import stat
import sys
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from vcamd.errors import ConfigError, VcamdError
from vcamd.modelstore.roles import ROLES

APP_NAME = "facelive"

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
    """The swapper on the CPU: "auto" runs its int8 copy where the CPU has int8 dot-product units and
    the copy passed the fidelity check on these weights (`vcamd.precision`); "float" never; "int8"
    also without those units. GPUs keep their float path; a swapper on the `server` runs as served."""
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
        from vcamd.remote.address import ServerAddress

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
    cover_threshold: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.3
    """Live, face_selection = "all" or [swap] others = "obscure": a face the full detection scores at least this but under
    `threshold` (the detector is unsure) is obscured, never swapped and never shown raw. Equal to
    `threshold`: off."""
    full_every: Annotated[int, Field(ge=1, le=300)] = 10
    """Live: look for new faces every N frames (where the picture changed; the whole frame at least every third look); in between, re-detect in a crop around each face."""
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
    """Minimum time between two transitions, so one slow spike cannot cascade."""
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


def user_config_path() -> Path:
    """`~/.config/facelive/config.toml` on Linux, the platform equivalent elsewhere."""
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def user_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME))


def user_state_dir() -> Path:
    return Path(platformdirs.user_state_dir(APP_NAME))


RUN_USER = Path("/run/user")
"""Where systemd-logind makes each user's session runtime folder (what XDG_RUNTIME_DIR names)."""
SHARED_TMP = Path("/tmp")
"""The fallback's parent: fixed, not $TMPDIR, so every environment of the user finds the same folder."""


def user_runtime_dir(*, uid: int | None = None, run_user: Path = RUN_USER, tmp: Path = SHARED_TMP) -> Path:
    """The folder of the control socket and the one-daemon lock: the one rule the daemon and every
    CLI verb follow, the same folder whatever the environment (a cron job, `su`, a container, a
    desktop session), so they always find each other and a second daemon always meets the lock.

    On Linux it depends on the user id only, never on $XDG_RUNTIME_DIR (unset in cron and `su`):
    `/run/user/UID/facelive` when logind's `/run/user/UID` is a folder of the user's that no one
    else can enter, else `/tmp/vcamd-UID` (created 0700 by the daemon, `control.client.checked_runtime_dir`).
    An existing `/tmp/vcamd-UID` that is a symlink or another user's is refused here, so no verb
    talks to a socket someone else planted. Elsewhere, the platform's per-user folder
    (platformdirs: no XDG variables there). `$VCAMD_RUNTIME_DIR` overrides it all
    (`control.protocol.runtime_dir`: tests, several daemons side by side)."""
    if not sys.platform.startswith("linux"):
        return Path(platformdirs.user_runtime_dir(APP_NAME))
    uid = os.geteuid() if uid is None else uid
    session = run_user / str(uid)
    if _private_folder_of(session, uid):
        return session / APP_NAME
    fallback = tmp / f"vcamd-{uid}"
    try:
        info = os.lstat(fallback)
    except FileNotFoundError:
        return fallback
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise VcamdError(
            f"the runtime folder {fallback} is not a folder of yours (uid {uid}): another user may have planted it",
            fix="remove it, or set VCAMD_RUNTIME_DIR to a private folder of yours",
        )
    return fallback


def _private_folder_of(path: Path, uid: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid and stat.S_IMODE(info.st_mode) & 0o077 == 0


def _describe_error(err: dict[str, Any]) -> str:
    """One line: [section].key = bad value: what was expected."""
    loc = [str(p) for p in err["loc"]]
    if len(loc) >= 2:
        where = f"[{loc[0]}] {'.'.join(loc[1:])}"
    else:
        where = f"[{loc[0]}]" if loc else "(top level)"
    if err["type"] == "extra_forbidden":
        return f"{where}: {_unknown_name_hint(loc)}"
    got = err.get("input")
    msg = _WRONG_TYPE.get(err["type"])
    if msg is not None:
        msg = f"is {_toml_kind(got)}, but {msg}"
    else:
        msg = err["msg"]
    if isinstance(got, (dict, list)) and len(repr(got)) > 60:
        return f"{where}: {msg}"
    return f"{where} = {_toml_value(got)}: {msg}"


_WRONG_TYPE = {
    # pydantic's strict type errors → what the key takes, in TOML's words
    "float_type": "it must be a number, written without quotes (e.g. 0.3)",
    "int_type": "it must be a whole number, written without quotes or a decimal point (e.g. 640)",
    "bool_type": "it must be true or false, written without quotes",
    "string_type": 'it must be text in quotes (e.g. "0")',
    "list_type": 'it must be a list in brackets (e.g. ["auto"])',
    "model_type": "it must be a [section] of keys",
    "model_attributes_type": "it must be a [section] of keys",
}


def _toml_kind(value: object) -> str:
    """What a TOML value is, in the words the config file uses."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, str):
        return "text (in quotes)"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"  # a TOML date or time


def _toml_value(value: object) -> str:
    """The value as the error line shows it: true/false as TOML writes them, the rest as Python
    writes it ('0.3' in quotes: text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _unknown_name_hint(loc: list[str]) -> str:
    """"unknown key — did you mean fps?": the valid names are read from the schema, so a section
    or key added later is suggested too."""
    kind = "section" if len(loc) == 1 else "key"
    model: type[BaseModel] | None = Config
    for part in loc[:-1]:  # walk down to the section that holds the unknown name
        field = model.model_fields.get(part) if model is not None else None
        annotation = field.annotation if field is not None else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if model is None:
        return f"unknown {kind} — remove it or check the spelling (see config.example.toml)"
    valid = list(model.model_fields)
    close = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.6)
    if close:
        shown = f"[{close[0]}]" if kind == "section" else close[0]
        return f"unknown {kind} — did you mean {shown}? (see config.example.toml)"
    return f"unknown {kind} — remove it; the valid {kind}s are: {', '.join(valid)}"


def config_from_dict(data: dict[str, Any], origin: str = "<config>") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(origin, [_describe_error(e) for e in exc.errors()]) from None


MAX_CONFIG_BYTES = 1 << 20
"""A config file is a few KB; anything over 1 MiB is refused unread (a symlink to a huge file)."""

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def read_config_bytes(path: Path) -> bytes:
    """The bytes of a config file: the one way every config read goes (load, watch, reload).

    Only a regular file is read, and at most MAX_CONFIG_BYTES: a FIFO would block the reader for
    good and /dev/zero would fill memory. Opened with O_NONBLOCK (opening a FIFO does not wait for
    a writer) and checked with fstat on the opened descriptor, so the check and the read see the
    same file even if the name is swapped in between. Symlinks are followed (dotfile managers use
    them); what they point to is checked. Raises FileNotFoundError when there is no file, and
    ConfigError for everything else.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror}"]) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError(str(path), ["is a folder, not a file — pass the config file itself (e.g. config.toml)"])
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(str(path), [f"is not a regular file (a {_file_kind(info.st_mode)}) — point it at a TOML file"])
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(str(path), [f"is {info.st_size:,} bytes, over the {MAX_CONFIG_BYTES:,}-byte (1 MiB) limit for a config file — is it the right file?"])
        if _NONBLOCK:
            os.set_blocking(fd, True)
        chunks, total = [], 0
        while total <= MAX_CONFIG_BYTES:  # the file may grow after fstat: never read past the limit
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_CONFIG_BYTES:
            raise ConfigError(str(path), [f"grew over the {MAX_CONFIG_BYTES:,}-byte (1 MiB) limit for a config file while being read"])
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror}"]) from None
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def load_config(path: Path | str | None = None) -> tuple[Config, Path | None]:
    """Load and validate a config file.

    With no path, the user config file is used when it exists, else the defaults. Returns the
    config and the file it came from (None for pure defaults). Raises ConfigError with one line
    per problem.
    """
    if path is None:
        candidate = user_config_path()
        if not candidate.exists():
            return Config(), None
        path = candidate
    path = Path(path).expanduser()
    try:
        raw = read_config_bytes(path)
    except FileNotFoundError:
        raise ConfigError(str(path), ["file not found — create it with `vcamd config init` or pass --config"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(str(path), ["not UTF-8 text — save it as UTF-8"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"invalid TOML: {exc}"]) from None
    except RecursionError:
        raise ConfigError(str(path), ["nested too deeply to parse — no setting needs more than two levels"]) from None
    config = config_from_dict(data, str(path))
    return _resolve_relative_paths(config, path.parent, str(path)), path


def _resolve_relative_paths(config: Config, base: Path, origin: str) -> Config:
    """Paths in a config file are relative to the file, not to wherever the daemon was started."""

    def fix(key: str, p: Path | None) -> Path | None:
        if p is None:
            return None
        try:
            p = p.expanduser()
        except RuntimeError:  # "~someone/..." where that user does not exist
            raise ConfigError(origin, [f"{key} = {str(p)!r}: cannot expand '~' (no such user) — use a full path"]) from None
        return p if p.is_absolute() else (base / p)

    def fix_model(key: str, value: str) -> str:
        # A model is a manifest name ("buffalo_l") or a path to an .onnx file; only paths move.
        if not ("/" in value or "\\" in value or value.endswith((".onnx", ".dfm"))):
            return value
        fixed = fix(f"[models] {key}", Path(value))
        return str(fixed)

    models = config.models.model_copy(
        update={
            "dir": fix("[models] dir", config.models.dir),
            **{role.key: fix_model(role.key, getattr(config.models, role.key)) for role in ROLES},
        }
    )
    swap = config.swap.model_copy(
        update={
            "source_face": fix("[swap] source_face", config.swap.source_face),
            "reference_face": fix("[swap] reference_face", config.swap.reference_face),
            "map": [entry.model_copy(update={"reference": fix(f"[[swap.map]] {n} reference", entry.reference),
                                             "source": fix(f"[[swap.map]] {n} source", entry.source)})
                    for n, entry in enumerate(config.swap.map, 1)],
        }
    )
    device = config.camera.device
    if device.strip() and not device.strip().isdigit() and device.strip() != "synthetic":  # a device or video file path
        device = str(fix("[camera] device", Path(device.strip())))
    camera = config.camera.model_copy(update={"device": device})
    return config.model_copy(update={"models": models, "swap": swap, "camera": camera})

"""The per-frame face path: detect → select → align → swap → enhance → blend.

`FaceEngine.process_frame` runs it all on one frame (what `vcamd swap` does for every image and
video frame). The live engine runs the same pieces split in two, because the swap model can be far
slower than a camera frame:

    faces = engine.detect(frame, size)           # every frame (or tracked)
    targets = engine.select(faces, frame)
    swapped = engine.swap_faces(frame, targets)  # in a worker, on the newest frame it can take
    engine.composite(frame, swapped[i], face)    # every frame, at the face's CURRENT keypoints

What each face of the frame gets — swapped, held, obscured — is not decided here: both paths hand
their faces and swaps to the one privacy rule, `vcamd.privacy.rule.compose`.

A `SwappedFace` holds only an aligned crop and which template it is aligned to, nothing about the
frame it came from, so it can be pasted again wherever the face has moved since.

Where the enhancer runs: the swapped crop is pasted (colour-corrected) into the face's crop in the
enhancer's geometry taken from the frame (GFPGAN: FFHQ-aligned 512²), and the enhancer restores
that crop. The result is a SwappedFace in the enhancer's space, composited like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vcamd.common.errors import ConfigError, FaceError, VcamdError
from vcamd.common.quality import BEST, Level, detect_size, rung
from vcamd.common.threads import in_thread
from vcamd.common.types import Face, Frame, ModelFiles, Points
from vcamd.config.schema import Config, FaceSelection, OnMiss, Others
from vcamd.faces import boost
from vcamd.faces.align import Affine, Template, estimate_affine, for_warps, invert_affine
from vcamd.faces.blend import Blender, PasteRegion
from vcamd.faces.specs import CropSpec
from vcamd.inference.precision import FLOAT, Choice
from vcamd.privacy import rule
from vcamd.privacy.rule import FaceOutcome, Scene

if TYPE_CHECKING:
    import onnxruntime

    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.enhance import Enhancer
    from vcamd.faces.following import FollowedFace
    from vcamd.faces.identity import Embedding, Recognizer, SourceIdentity
    from vcamd.faces.parse import FaceParser, FloatMask
    from vcamd.faces.swap import Latent, Swapper
    from vcamd.inference.cores import CoreSplit
    from vcamd.inference.runtime import Sessions
    from vcamd.models.quantize import CalibrationFaces, SeenFaces


def require_consent(cfg: Config, flag: bool) -> None:
    """Refuse to swap unless the user confirmed consent (config or command-line flag)."""
    if cfg.swap.source_consent or flag:
        return
    raise VcamdError(
        "refusing to swap: putting someone's face into a photo or video needs the consent of the person in the source photo",
        fix="once you have it, set `source_consent = true` under [swap] in the config, or pass --i-have-consent",
    )


@dataclass(frozen=True, slots=True)
class SwappedFace:
    """A swapped face as an aligned crop, ready to be composited at any position of that face.

    `template`/`crop` size say how the crop is aligned: the swapper's crop (inswapper: "arcface"
    128²) or the enhancer's (GFPGAN: "ffhq" 512², restored). `kps` are the keypoints it was made from.
    """

    crop: Frame
    template: Template
    kps: Points
    keep: FloatMask | None = None
    """Where the swap may show (crop-sized, [0, 1]): the face parser's regions; None: everywhere."""
    shown: bool = True
    """False: the face parser saw too little of the face (a hand over it, a turned head): not to be
    pasted at all — the face is held or obscured like a face that could not be swapped."""
    enhanced: bool = False
    """Restored by the enhancer (its colours were matched before restoring)."""

    @property
    def size(self) -> int:
        return int(self.crop.shape[0])


@dataclass(frozen=True, slots=True)
class FrameResult:
    """One processed frame: the output image, the faces detected, how many were swapped, and the
    milliseconds each stage took (detect, select, align, swap, enhance, blend)."""

    frame: Frame
    faces: list[Face]
    swapped: int
    stage_ms: dict[str, float]


@dataclass
class StageTimer:
    """Accumulates wall-clock milliseconds per named stage."""

    ms: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.ms[stage] = self.ms.get(stage, 0.0) + (time.perf_counter() - start) * 1000.0


@dataclass(frozen=True, slots=True)
class _Source:
    """The current source identity and its swapper latent, replaced as one object (thread-safe read)."""

    identity: SourceIdentity
    latent: Latent | None  # None: a model with its own trained identity takes no source input
    stamp: tuple[Path, int, int]  # resolved path, mtime_ns, size: re-embed only when these change


def _file_stamp(path: Path) -> tuple[Path, int, int]:
    try:
        resolved = path.expanduser().resolve()
        st = resolved.stat()
    except (OSError, ValueError):  # missing, a NUL byte, a name over the limit, ...
        return path, -1, -1  # read_image will say what is wrong with it
    return resolved, st.st_mtime_ns, st.st_size


class FaceEngine:
    """Detector, recognizer, swapper, optional enhancer and blenders, plus the source identity."""

    def __init__(
        self,
        detector: FaceDetector,
        recognizer: Recognizer,
        swapper: Swapper,
        enhancer: Enhancer | None = None,
        *,
        selection: FaceSelection = FaceSelection.largest,
        others: Others = Others.obscure,
        mouth_mask: bool = False,
        color_correction: bool = True,
        lowres_scale: float = 0.5,
        pixel_boost: int = 128,
        parser: FaceParser | None = None,
        weight: float = 0.5,
    ) -> None:
        self.detector = detector
        self.recognizer = recognizer
        self.swapper = swapper
        self.enhancer = enhancer
        self.parser = parser
        self.selection = FaceSelection(selection)
        self.others = Others(others)  # for `process_frame`; the live loop reads [swap] others for every frame
        self.lowres_scale = lowres_scale
        swap_side = swapper.crop.size
        # A boost the swapper's side does not divide (a 224-px DeepFaceLab model, a 256 boost) is
        # no boost: the face is swapped at the model's own size.
        self.pixel_boost = pixel_boost if pixel_boost > swap_side and pixel_boost % swap_side == 0 else swap_side
        """The side (px) a face is swapped at on the rungs with pixel boost (`faces/boost.py`)."""
        self.weight = float(weight)
        """`[swap] weight`: how the target face's own identity is mixed into the source's
        (`specs.blend_identity`; 0.5 = the source as it is, and no per-face recognizer run)."""
        # Swapped crops → frame: colour-matched to the frame's face, mouth kept when asked.
        self._blend_swap = Blender(swap_side, mouth_mask=mouth_mask, color_correction=color_correction)
        # Swapped crop → the face's FFHQ enhancer crop, before GFPGAN (the mouth is kept later).
        self._blend_into_enhance = Blender(swap_side, mouth_mask=False, color_correction=color_correction)
        # Restored crops → frame: colours were matched before restoring (one Blender for every enhancer size).
        self._blend_enhanced = Blender(enhancer.crop.size if enhancer is not None else 512, mouth_mask=mouth_mask, color_correction=False)
        self._source: _Source | None = None
        self._reference: Embedding | None = None
        self._load_enhancer: Callable[[float, float], Enhancer] | None = None  # set by from_config
        self.sessions: Sessions | None = None  # set by from_config: where a swapper's int8 copy gets its session
        self.precision: Choice = FLOAT
        """The precision the swapper runs at, and why (`vcamd.inference.precision`; set where it is decided, `vcamd.models.pipeline`)."""
        self.seen: SeenFaces | None = None
        """While the swapper's int8 copy waits for calibration faces: the crops it is given, kept (`vcamd.models.quantize`)."""
        self.remote: Any = None
        """The Triton server's sessions (`vcamd.remote.sessions.RemoteSessions`) when models run there
        (`[models] server`; set by `vcamd.models.pipeline`): its `server_status()` is shown in the status."""

    @classmethod
    def from_config(cls, cfg: Config, files: ModelFiles, sessions: Sessions | None = None, *,
                    warm_up: Callable[[FaceDetector], None] | None = None) -> FaceEngine:
        """Build every model of `files` (resolved from `[models]`: `vcamd.models.pipeline.build_face_engine`),
        load `[swap] source_face` (and reference_face).

        The swapper — the long pole: seconds for inswapper's 554 MB, where the other models take
        a tenth of one — loads on its own `swapper-load` thread; beside it, on this one, the
        detector, the recognizer, the enhancer, the photos' embeddings and `warm_up(detector)`
        (the live engine builds the detector's sessions for every input shape there). A failure
        is raised as the parts are listed: a missing file first, then the detector, the
        recognizer, the swapper, then the rest.
        """
        from vcamd.faces.detect import FaceDetector
        from vcamd.faces.enhance import Enhancer
        from vcamd.faces.identity import Recognizer, load_source_identity
        from vcamd.faces.parse import FaceParser
        from vcamd.faces.swap import EmbeddingConverter, Swapper
        from vcamd.inference.runtime import Sessions

        if cfg.swap.face_selection == FaceSelection.reference and cfg.swap.reference_face is None:
            raise ConfigError("[swap]", ['face_selection = "reference" needs reference_face = "<photo of the person to swap>"'])
        sessions = sessions if sessions is not None else Sessions(list(cfg.models.providers), cfg.models.threads)
        paths = files.paths
        detector_path, recognizer_path, swapper_path = paths["detector"], paths["recognizer"], paths["swapper"]
        enhancer_path = paths.get("enhancer")
        parser_path = paths.get("parser")
        converter_path = paths.get("converter")

        def load_swapper() -> Swapper:
            converter = EmbeddingConverter(converter_path, sessions) if converter_path is not None else None
            swapper = Swapper(swapper_path, sessions, family=cfg.models.swapper_family or None, converter=converter, keep_optimized=True)
            swapper.require_converter()
            return swapper

        swapper_loaded = in_thread(load_swapper, "swapper-load")
        detector = FaceDetector(detector_path, sessions, cfg.detection.size, cfg.detection.threshold)
        recognizer = Recognizer(recognizer_path, sessions)
        enhancer = source = reference = parser = None
        later: Exception | None = None  # an error of a part listed after the swapper waits for the swapper's own
        try:
            if enhancer_path is not None:
                enhancer = Enhancer(enhancer_path, sessions, cfg.enhancer.strength, cfg.enhancer.weight)
            if parser_path is not None:
                parser = FaceParser(parser_path, sessions, cfg.mask.regions, cfg.mask.min_visible)
            if cfg.swap.source_face is not None:
                source = (_file_stamp(Path(cfg.swap.source_face)), load_source_identity(cfg.swap.source_face, detector, recognizer, "source face"))
            if cfg.swap.face_selection == FaceSelection.reference:
                assert cfg.swap.reference_face is not None
                reference = load_source_identity(cfg.swap.reference_face, detector, recognizer, "reference face").embedding
            if warm_up is not None:
                warm_up(detector)
        except Exception as exc:
            later = exc
        swapper = swapper_loaded.result()
        if later is not None:
            raise later
        engine = cls(
            detector,
            recognizer,
            swapper,
            enhancer,
            selection=cfg.swap.face_selection,
            others=cfg.swap.others,
            mouth_mask=cfg.swap.mouth_mask,
            color_correction=cfg.swap.color_correction,
            lowres_scale=cfg.watchdog.lowres_scale,
            pixel_boost=cfg.swap.pixel_boost,
            parser=parser,
            weight=cfg.swap.weight,
        )
        # Kept so a hot reload can switch the enhancer on without a restart (sessions are cached per file).
        engine._load_enhancer = lambda strength, weight: Enhancer(files.enhancer(), sessions, strength, weight)
        engine.sessions = sessions
        if source is not None:
            engine._use_source(*source)
        engine._reference = reference
        return engine

    @property
    def core_split(self) -> CoreSplit | None:
        """Where the swap worker's models run (`vcamd.inference.cores`): the swapper's, the enhancer's and
        the parser's sessions come from one `Sessions`."""
        return self.swapper.core_split

    @property
    def boosts(self) -> bool:
        """Faces are swapped above the swapper's own size on the rungs with pixel boost."""
        return self.pixel_boost > self.swapper.crop.size

    # ---- precision (`vcamd.inference.precision`) ---------------------------------------------------------------

    def precision_status(self) -> tuple[dict[str, str], dict[str, str]]:
        """What each model runs at ("float" or "int8") by role, and why where there is something to say."""
        runs: dict[str, str] = {"detector": "float", "recognizer": "float", "swapper": self.precision.runs}
        if self.enhancer is not None:
            runs["enhancer"] = "float"
        if self.parser is not None:
            runs["parser"] = "float"
        return runs, ({"swapper": self.precision.why} if self.precision.why else {})

    def calibration_faces(self, seen: list[Frame]) -> CalibrationFaces:
        """The int8 copy's calibration faces: the source photo's face, aligned to the swapper's crop,
        and the crops the swapper was given (`seen`), with the source's embedding. FaceError
        without a source face."""
        from vcamd.files.images import read_image
        from vcamd.models.quantize import CalibrationFaces

        current = self._source
        if current is None:
            raise FaceError("no source face is set", fix="set one; the int8 copy is calibrated on it")
        photo, _ = self.swapper.crop.align(read_image(current.identity.path, "source face"), current.identity.face.kps)
        return CalibrationFaces([photo, *seen], current.identity.embedding)

    def use_int8(self, session: onnxruntime.InferenceSession, precision: Choice) -> None:
        """Run the swapper on its checked int8 copy's `session` from the next swap (the loop's thread,
        between two frames: the swap worker reads the session once per run)."""
        self.swapper.session = session
        self.precision = precision
        self.seen = None

    def set_enhancer(self, enabled: bool, strength: float, weight: float | None = None) -> None:
        """Switch the enhancer on/off or change its strength (and CodeFormer's fidelity `weight`)
        (hot reload); it applies from the next swap. The model is loaded the first time it is
        switched on. Raises ModelError when missing."""
        if not enabled:
            self.enhancer = None
            return
        if self.enhancer is not None:
            self.enhancer.strength = float(strength)
            if weight is not None:
                self.enhancer.weight = float(weight)
            return
        if self._load_enhancer is None:
            raise VcamdError("this face engine was built without an enhancer loader", fix="restart `vcamd run`")
        self.enhancer = self._load_enhancer(strength, 0.5 if weight is None else weight)

    # ---- identities (once per photo, never per frame) -------------------------------------------

    @property
    def source(self) -> SourceIdentity | None:
        current = self._source
        return current.identity if current else None

    def set_source_face(self, path: Path | str) -> SourceIdentity:
        """Use the face in this photo. Embeds it only if the file differs from the current source
        (path, modification time or size changed). Raises FaceError; the old source stays on error."""
        from vcamd.faces.identity import load_source_identity

        stamp = _file_stamp(Path(path))
        current = self._source
        if current is not None and current.stamp == stamp:
            return current.identity
        return self._use_source(stamp, load_source_identity(path, self.detector, self.recognizer, "source face"))

    def _use_source(self, stamp: tuple[Path, int, int], identity: SourceIdentity) -> SourceIdentity:
        self._source = _Source(identity, self.swapper.source_for(identity), stamp)
        return identity

    @property
    def needs_source(self) -> bool:
        """False for a swapper with its own trained identity (DeepFaceLab): it swaps without a photo."""
        return self.swapper.needs_source

    def set_reference_face(self, path: Path | str) -> None:
        """With selection "reference": swap the face most like the one in this photo."""
        from vcamd.faces.identity import load_source_identity

        self._reference = load_source_identity(path, self.detector, self.recognizer, "reference face").embedding

    def _latent(self) -> Latent | None:
        """The swapper's source input; None for a swapper that takes none. FaceError when one is needed and not set."""
        if not self.swapper.needs_source:
            return None
        current = self._source
        if current is None:
            raise FaceError("no source face is set", fix="set [swap] source_face in the config, or pass --face PHOTO")
        return current.latent

    # ---- the pieces -------------------------------------------------------------------------------

    def detect_size(self, level: Level) -> int:
        """Detector input size at this level (`quality.detect_size`: smaller on the rungs with reduced detection)."""
        return detect_size(self.detector.size, level, self.lowres_scale)

    def detect(self, frame: Frame, input_size: int | None = None, threshold: float | None = None) -> list[Face]:
        return self.detector.detect(frame, input_size, threshold)

    def select(self, faces: list[Face], frame: Frame) -> list[Face]:
        """The faces to swap: the largest, all, or the one most like the reference photo."""
        if not faces:
            return []
        if self.selection == FaceSelection.all:
            return list(faces)
        if self.selection == FaceSelection.reference:
            from vcamd.faces.identity import pick_reference

            if self._reference is None:
                raise FaceError("face_selection is \"reference\" but no reference face is loaded", fix="set [swap] reference_face")
            picked = pick_reference(faces, frame, self._reference, self.recognizer)
            return [picked] if picked is not None else []
        return [max(faces, key=lambda f: f.area)]

    def swap_faces(self, frame: Frame, faces: list[Face], level: Level = BEST, timer: StageTimer | None = None) -> list[SwappedFace]:
        """Align, swap (one batch) and — on a rung with the enhancer, when one is set — restore each face.

        Reads `frame`, never writes it. The results hold aligned crops only (see SwappedFace).
        """
        timer = timer if timer is not None else StageTimer()
        latent = self._latent()
        # Read once: a hot reload may switch the enhancer off (set_enhancer, the loop's thread)
        # while this runs on the swap worker.
        enhancer = self.enhancer
        spec = boost.boosted(self.swapper.crop, self.pixel_boost if rung(level).pixel_boost else self.swapper.crop.size)
        with timer("align"):
            # Many faces: every crop cut from one 4-channel copy of the frame (the same crops, cheaper).
            source = for_warps(frame, len(faces), spec.size)
            aligned = [spec.align(source, face.kps) for face in faces]
        with timer("swap"):
            if latent is not None and self.weight != 0.5 and self.swapper.spec.source.blend != "none":
                # `[swap] weight`: each face's own identity mixed into the source's (one recognizer run a face).
                latent = np.concatenate([self.swapper.blended(latent, self.recognizer.embed_raw(frame, face), self.weight) for face in faces])
            crops = self._swap(spec, [crop for crop, _ in aligned], latent)
        if enhancer is None or not rung(level).enhancer or not faces:
            swapped = [SwappedFace(crop, spec.template, face.kps) for crop, face in zip(crops, faces)]
            originals = [original for original, _ in aligned]
            out_spec = spec
        else:
            with timer("enhance"):
                made = [self._enhanced(enhancer, source, face, crop, original, m) for crop, face, (original, m) in zip(crops, faces, aligned)]
            swapped, originals, out_spec = [sw for sw, _ in made], [original for _, original in made], enhancer.crop
        parser = self.parser  # read once, like the enhancer
        if parser is None or not faces:
            return swapped
        with timer("parse"):  # on the crops the pasted faces are aligned to, from the camera's pixels
            parsed = parser.parse(originals, out_spec)
        return [replace(sw, keep=p.mask, shown=parser.shown(p)) for sw, p in zip(swapped, parsed)]

    def _swap(self, spec: CropSpec, crops: list[Frame], latent: Latent | None) -> list[Frame]:
        """The swapped crops at `spec`'s size: the swapper's own, or — pixel boost — each face's
        k² polyphase tiles swapped in one batch and interleaved back (`faces/boost.py`). `latent`:
        one source row for all, or one per face."""
        k = boost.factor(spec.size, self.swapper.crop.size)
        seen = self.seen  # read once: the loop may stop recording meanwhile
        if k == 1:
            if seen is not None:
                seen.offer(crops)
            return self.swapper.swap(crops, latent)
        if latent is not None and latent.shape[0] > 1:  # one row per face: each of its tiles gets it
            latent = np.repeat(latent, k * k, axis=0)
        tiles = [tile for crop in crops for tile in boost.split(crop, k)]
        if seen is not None:
            seen.offer(tiles)
        tiles = self.swapper.swap(tiles, latent)
        return [boost.merge(tiles[i * k * k : (i + 1) * k * k], k) for i in range(len(crops))]

    def _enhanced(self, enhancer: Enhancer, frame: Frame, face: Face, swapped: Frame, original: Frame,
                  m_swap: Affine) -> tuple[SwappedFace, Frame]:
        """Put the swapped crop into the face's FFHQ enhancer crop and restore that (`frame`: the
        frame as `swap_faces` cuts its crops from, see `align.for_warps`); with the camera's own
        FFHQ crop (what the face parser looks at)."""
        canvas, m_enhance = enhancer.crop.align(frame, face.kps)
        camera = canvas.copy() if self.parser is not None else canvas
        # enhancer-crop pixel → frame → swap-crop pixel: the swap crop's matrix seen from the enhancer crop.
        m_inner = _compose(m_swap, invert_affine(m_enhance))
        self._blend_into_enhance.paste(canvas, swapped, m_inner, original_crop=original)
        return SwappedFace(enhancer.enhance_aligned(canvas), enhancer.crop.template, face.kps, enhanced=True), camera

    def composite(self, frame: Frame, swapped: SwappedFace, face: Face, *, original_crop: Frame | None = None) -> PasteRegion | None:
        """Paste a swapped crop into `frame` (in place) at this face's current keypoints.

        `original_crop`: the frame's own aligned crop of the face at the same size, if already at
        hand (saves one crop-sized warp for colour correction).
        """
        m = estimate_affine(face.kps, swapped.size, swapped.template)
        blender = self._blend_enhanced if swapped.enhanced else self._blend_swap
        return blender.paste(frame, swapped.crop, m, original_crop=original_crop, mouth_kps=face.kps, keep=swapped.keep)

    # ---- the whole path -------------------------------------------------------------------------

    def process_frame(self, frame: Frame, level: Level = BEST, *, follow: FollowedFace | None = None, index: int = 0) -> FrameResult:
        """Swap the selected faces of one frame, obscure the others (unless `others` is "show").
        Modifies `frame` in place (copy it first to keep it). A video's frames pass one `follow`
        and their `index`: "largest" then keeps the face it chose, as live."""
        timer = StageTimer()
        self._latent()  # fail before detecting when there is no source face
        with timer("detect"):
            faces = self.detect(frame, self.detect_size(level))
        with timer("select"):
            targets = follow.select(self, faces, frame, index) if follow is not None else self.select(faces, frame)
        swapped = self.swap_faces(frame, targets, level, timer)
        with timer("blend"):  # the camera's own privacy rule decides what each face gets
            composed = rule.compose(frame_scene(frame, faces, targets, swapped, self.others), self.composite)
        for stage in ("align", "swap", "enhance"):
            timer.ms.setdefault(stage, 0.0)
        return FrameResult(frame=composed.frame, faces=faces, swapped=composed.faces.count(FaceOutcome.swapped),
                           stage_ms=dict(timer.ms))


def frame_scene(frame: Frame, faces: list[Face], targets: list[Face], swapped: list[SwappedFace], others: Others) -> Scene:
    """One frame of `vcamd swap` as the privacy rule takes it (`vcamd.privacy.rule.Scene`): every
    position is known (the faces were just detected at this frame); each target gets its swap, or
    none where the face parser saw too little of the face (covered, never left raw) or no swap came
    back; the faces not chosen are obscured unless `[swap] others = "show"`. A photo has no last good
    output to hold, so a face that cannot be swapped is obscured."""
    swaps: list[SwappedFace | None] = [s if s.shown else None for s in swapped[: len(targets)]]
    swaps += [None] * (len(targets) - len(swaps))
    not_chosen = [f for f in faces if not any(f is t for t in targets)] if others is Others.obscure else []
    return Scene(frame=frame, enabled=True, on_miss=OnMiss.blur, known=True, targets=list(targets), swaps=list(swaps),
                 others=not_chosen)


def _compose(outer: Affine, inner: Affine) -> Affine:
    """The 2×3 affine for applying `inner` first, then `outer`."""
    full_outer = np.vstack([np.asarray(outer, np.float64), [0.0, 0.0, 1.0]])
    full_inner = np.vstack([np.asarray(inner, np.float64), [0.0, 0.0, 1.0]])
    composed: Affine = (full_outer @ full_inner)[:2].astype(np.float32)
    return composed

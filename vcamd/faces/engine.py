"""The per-frame face path: detect → select → align → swap → enhance → blend.

`FaceEngine.process_frame` runs it all on one frame (what `vcamd swap` does for every image and
video frame). The live engine runs the same pieces split in two, because the swap model can be far
slower than a camera frame:

    faces = engine.detect(frame, size)           # every frame (or tracked)
    targets = engine.select(faces, frame)
    swapped = engine.swap_faces(frame, targets)  # in a worker, on the newest frame it can take
    engine.composite(frame, swapped[i], face)    # every frame, at the face's CURRENT keypoints

A `SwappedFace` holds only an aligned crop and which template it is aligned to, nothing about the
frame it came from, so it can be pasted again wherever the face has moved since.

Where the enhancer runs: the swapped 128² crop is pasted (colour-corrected) into the face's
FFHQ-aligned 512² crop taken from the frame, and GFPGAN restores that 512² crop. The result is a
SwappedFace in FFHQ-512 space, composited like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vcamd.config import Config, FaceSelection, Others
from vcamd.errors import ConfigError, FaceError, VcamdError
from vcamd.faces import boost
from vcamd.faces.align import Affine, Template, estimate_affine, for_warps, invert_affine
from vcamd.faces.blend import Blender, PasteRegion
from vcamd.faces.specs import ENHANCER_CROP, CropSpec
from vcamd.quality import BEST, Level, detect_size, rung
from vcamd.threads import in_thread
from vcamd.types import Face, Frame, ModelFiles, Points

if TYPE_CHECKING:
    from vcamd.cores import CoreSplit
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.enhance import Enhancer
    from vcamd.faces.following import FollowedFace
    from vcamd.faces.identity import Embedding, Recognizer, SourceIdentity
    from vcamd.faces.parse import FaceParser, FloatMask
    from vcamd.faces.swap import Latent, Swapper
    from vcamd.runtime import Sessions


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
    128²) or the enhancer's ("ffhq" 512², restored). `kps` are the keypoints it was made from.
    """

    crop: Frame
    template: Template
    kps: Points
    keep: FloatMask | None = None
    """Where the swap may show (crop-sized, [0, 1]): the face parser's regions; None: everywhere."""
    shown: bool = True
    """False: the face parser saw too little of the face (a hand over it, a turned head): not to be
    pasted at all — the face is held or obscured like a face that could not be swapped."""

    @property
    def size(self) -> int:
        return int(self.crop.shape[0])

    @property
    def enhanced(self) -> bool:
        return self.template == ENHANCER_CROP.template and self.size == ENHANCER_CROP.size


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
    latent: Latent
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
        self.pixel_boost = pixel_boost if pixel_boost > swap_side else swap_side
        """The side (px) a face is swapped at on the rungs with pixel boost (`faces/boost.py`)."""
        boost.factor(self.pixel_boost, swap_side)  # a size the swapper's crop does not divide is refused here
        # Swapped crops → frame: colour-matched to the frame's face, mouth kept when asked.
        self._blend_swap = Blender(swap_side, mouth_mask=mouth_mask, color_correction=color_correction)
        # Swapped crop → the face's FFHQ enhancer crop, before GFPGAN (the mouth is kept later).
        self._blend_into_enhance = Blender(swap_side, mouth_mask=False, color_correction=color_correction)
        # Restored crops → frame: colours were matched before restoring.
        self._blend_enhanced = Blender(ENHANCER_CROP.size, mouth_mask=mouth_mask, color_correction=False)
        self._source: _Source | None = None
        self._reference: Embedding | None = None
        self._load_enhancer: Callable[[float], Enhancer] | None = None  # set by from_config
        self.remote: Any = None
        """The Triton server's sessions (`vcamd.remote.sessions.RemoteSessions`) when models run there
        (`[models] server`; set by `vcamd.pipeline`): its `server_status()` is shown in the status."""

    @classmethod
    def from_config(cls, cfg: Config, files: ModelFiles, sessions: Sessions | None = None, *,
                    warm_up: Callable[[FaceDetector], None] | None = None) -> FaceEngine:
        """Build every model of `files` (resolved from `[models]`: `vcamd.pipeline.build_face_engine`),
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
        from vcamd.faces.swap import Swapper
        from vcamd.runtime import Sessions

        if cfg.swap.face_selection == FaceSelection.reference and cfg.swap.reference_face is None:
            raise ConfigError("[swap]", ['face_selection = "reference" needs reference_face = "<photo of the person to swap>"'])
        sessions = sessions if sessions is not None else Sessions(list(cfg.models.providers), cfg.models.threads)
        paths = files.paths
        detector_path, recognizer_path, swapper_path = paths["detector"], paths["recognizer"], paths["swapper"]
        enhancer_path = paths.get("enhancer")
        parser_path = paths.get("parser")
        swapper_loaded = in_thread(lambda: Swapper(swapper_path, sessions, keep_optimized=True), "swapper-load")
        detector = FaceDetector(detector_path, sessions, cfg.detection.size, cfg.detection.threshold)
        recognizer = Recognizer(recognizer_path, sessions)
        enhancer = source = reference = parser = None
        later: Exception | None = None  # an error of a part listed after the swapper waits for the swapper's own
        try:
            if enhancer_path is not None:
                enhancer = Enhancer(enhancer_path, sessions, cfg.enhancer.strength)
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
        )
        # Kept so a hot reload can switch the enhancer on without a restart (sessions are cached per file).
        engine._load_enhancer = lambda strength: Enhancer(files.enhancer(), sessions, strength)
        if source is not None:
            engine._use_source(*source)
        engine._reference = reference
        return engine

    @property
    def core_split(self) -> CoreSplit | None:
        """Where the swap worker's models run (`vcamd.cores`): the swapper's, the enhancer's and
        the parser's sessions come from one `Sessions`."""
        return self.swapper.core_split

    @property
    def boosts(self) -> bool:
        """Faces are swapped above the swapper's own size on the rungs with pixel boost."""
        return self.pixel_boost > self.swapper.crop.size

    def set_enhancer(self, enabled: bool, strength: float) -> None:
        """Switch the enhancer on/off or change its strength (hot reload); it applies from the next
        swap. The model is loaded the first time it is switched on. Raises ModelError when missing."""
        if not enabled:
            self.enhancer = None
            return
        if self.enhancer is not None:
            self.enhancer.strength = float(strength)
            return
        if self._load_enhancer is None:
            raise VcamdError("this face engine was built without an enhancer loader", fix="restart `vcamd run`")
        self.enhancer = self._load_enhancer(strength)

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
        self._source = _Source(identity, self.swapper.latent(identity.embedding), stamp)
        return identity

    def set_reference_face(self, path: Path | str) -> None:
        """With selection "reference": swap the face most like the one in this photo."""
        from vcamd.faces.identity import load_source_identity

        self._reference = load_source_identity(path, self.detector, self.recognizer, "reference face").embedding

    def _latent(self) -> Latent:
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
            crops = self._swap(spec, [crop for crop, _ in aligned], latent)
        if enhancer is None or not rung(level).enhancer or not faces:
            swapped = [SwappedFace(crop, spec.template, face.kps) for crop, face in zip(crops, faces)]
            originals = [original for original, _ in aligned]
            out_spec = spec
        else:
            with timer("enhance"):
                made = [self._enhanced(enhancer, source, face, crop, original, m) for crop, face, (original, m) in zip(crops, faces, aligned)]
            swapped, originals, out_spec = [sw for sw, _ in made], [original for _, original in made], ENHANCER_CROP
        parser = self.parser  # read once, like the enhancer
        if parser is None or not faces:
            return swapped
        with timer("parse"):  # on the crops the pasted faces are aligned to, from the camera's pixels
            parsed = parser.parse(originals, out_spec)
        return [replace(sw, keep=p.mask, shown=parser.shown(p)) for sw, p in zip(swapped, parsed)]

    def _swap(self, spec: CropSpec, crops: list[Frame], latent: Latent) -> list[Frame]:
        """The swapped crops at `spec`'s size: the swapper's own, or — pixel boost — each face's
        k² polyphase tiles swapped in one batch and interleaved back (`faces/boost.py`)."""
        k = boost.factor(spec.size, self.swapper.crop.size)
        if k == 1:
            return self.swapper.swap(crops, latent)
        tiles = self.swapper.swap([tile for crop in crops for tile in boost.split(crop, k)], latent)
        return [boost.merge(tiles[i * k * k : (i + 1) * k * k], k) for i in range(len(crops))]

    def _enhanced(self, enhancer: Enhancer, frame: Frame, face: Face, swapped: Frame, original: Frame,
                  m_swap: Affine) -> tuple[SwappedFace, Frame]:
        """Put the swapped crop into the face's FFHQ enhancer crop and restore that (`frame`: the
        frame as `swap_faces` cuts its crops from, see `align.for_warps`); with the camera's own
        FFHQ crop (what the face parser looks at)."""
        canvas, m_enhance = ENHANCER_CROP.align(frame, face.kps)
        camera = canvas.copy() if self.parser is not None else canvas
        # enhancer-crop pixel → frame → swap-crop pixel: the swap crop's matrix seen from the enhancer crop.
        m_inner = _compose(m_swap, invert_affine(m_enhance))
        self._blend_into_enhance.paste(canvas, swapped, m_inner, original_crop=original)
        return SwappedFace(enhancer.enhance_aligned(canvas), ENHANCER_CROP.template, face.kps), camera

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
        with timer("blend"):
            if self.others is Others.obscure:
                from vcamd.live.output.compose import MISS_REGION_SCALE, region
                from vcamd.live.output.obscure import obscure_region

                for face in faces:  # under the swaps, as live
                    if not any(face is t for t in targets):
                        obscure_region(frame, region(frame, [face], MISS_REGION_SCALE))
            for result, face in zip(swapped, targets):
                if result.shown:
                    self.composite(frame, result, face)
                else:  # the parser saw too little of the face: covered, never left raw
                    from vcamd.live.output.obscure import obscure_region

                    obscure_region(frame, _grown_box(face, frame.shape))
        for stage in ("align", "swap", "enhance"):
            timer.ms.setdefault(stage, 0.0)
        return FrameResult(frame=frame, faces=faces, swapped=len(swapped), stage_ms=dict(timer.ms))


def _grown_box(face: Face, shape: tuple[int, ...], scale: float = 2.0) -> tuple[int, int, int, int]:
    """The square `scale` × the face box's larger side around its centre, inside the frame."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    half = scale * max(face.width, face.height) / 2
    h, w = shape[:2]
    return max(0, int(cx - half)), max(0, int(cy - half)), min(w, int(cx + half)), min(h, int(cy + half))


def _compose(outer: Affine, inner: Affine) -> Affine:
    """The 2×3 affine for applying `inner` first, then `outer`."""
    full_outer = np.vstack([np.asarray(outer, np.float64), [0.0, 0.0, 1.0]])
    full_inner = np.vstack([np.asarray(inner, np.float64), [0.0, 0.0, 1.0]])
    return (full_outer @ full_inner)[:2].astype(np.float32)

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

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vcamd.common.errors import ConfigError, FaceError, VcamdError
from vcamd.common.quality import BEST, Level, detect_size, rung
from vcamd.common.threads import in_thread
from vcamd.common.types import Face, Frame, ModelFiles
from vcamd.config.schema import Config, FaceMapEntry, FaceSelection, Others
from vcamd.faces import boost
from vcamd.faces.align import Affine, compose_affine, estimate_affine, for_warps, invert_affine
from vcamd.faces.blend import Blender
from vcamd.faces.footprint import PasteRegion
from vcamd.faces.identity import SourceFace, file_stamp
from vcamd.faces.results import FrameResult, StageTimer, SwappedFace, frame_scene
from vcamd.faces.specs import CropSpec
from vcamd.inference.precision import FLOAT, Choice
from vcamd.privacy import rule
from vcamd.privacy.rule import UNKNOWN_SOURCE, FaceOutcome

if TYPE_CHECKING:

    from vcamd.faces.calibration import CalibrationFaces, SeenFaces
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.enhance import Enhancer
    from vcamd.faces.following import FollowedFace
    from vcamd.faces.identity import Embedding, Recognizer, SourceIdentity
    from vcamd.faces.mapping import FaceMap
    from vcamd.faces.parse import FaceParser
    from vcamd.faces.swap import Latent, Swapper
    from vcamd.inference.cores import CoreSplit
    from vcamd.inference.runtime import Sessions


def require_consent(cfg: Config, flag: bool) -> None:
    """Refuse to swap unless the user confirmed consent (config or command-line flag)."""
    if cfg.swap.source_consent or flag:
        return
    raise VcamdError(
        "refusing to swap: putting someone's face into a photo or video needs the consent of the person in the source photo",
        fix="once you have it, set `source_consent = true` under [swap] in the config, or pass --i-have-consent",
    )


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
        self._source: SourceFace | None = None
        self._reference: Embedding | None = None
        self.face_map: FaceMap | None = None
        """`[[swap.map]]`: who gets which source (`vcamd.faces.mapping`); None: `face_selection` and the source face."""
        self._map_sources: dict[tuple[Path, int, int], SourceFace] = {}  # the mapped sources, by file stamp
        self._load_enhancer: Callable[[float, float], Enhancer] | None = None  # set by from_config
        self.sessions: Sessions | None = None  # set by from_config: where a swapper's int8 copy gets its session
        self.precisions: dict[str, Choice] = {"swapper": FLOAT}
        """The precision each model with an int8 copy runs at, and why, by role (`vcamd.inference.precision`;
        set where it is decided, `vcamd.models.pipeline`): the swapper's, the enhancer's and parser's when loaded."""
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
                source = (file_stamp(Path(cfg.swap.source_face)), load_source_identity(cfg.swap.source_face, detector, recognizer, "source face"))
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
        if cfg.swap.map:
            engine.set_face_map(cfg.swap.map)
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

    @property
    def precision(self) -> Choice:
        """The swapper's precision (`precisions`)."""
        return self.precisions["swapper"]

    def precision_status(self) -> tuple[dict[str, str], dict[str, str]]:
        """What each model runs at ("float" or "int8") by role, and why where there is something to say."""
        from vcamd.inference.precision import precision_status

        return precision_status({role: self.precisions.get(role, FLOAT) for role in ("swapper", "enhancer", "parser", "detector") if getattr(self, role)})

    def calibration_faces(self, seen: list[Frame], crop: CropSpec | None = None) -> CalibrationFaces:
        """An int8 copy's calibration faces aligned to `crop` (default: the swapper's): the source photo's face and
        the crops the swapper was given (`seen`), with the source's embedding. FaceError without a source face."""
        from vcamd.faces.calibration import faces_for

        current = self._source
        if current is None:
            raise FaceError("no source face is set", fix="set one; the int8 copy is calibrated on it")
        return faces_for(current.identity, seen, self.swapper.crop, crop or self.swapper.crop)

    def use_int8(self, session: Any, precision: Choice, role: str = "swapper") -> None:
        """Run the `role` model on its checked int8 copy's `session` from the next swap (the loop's thread,
        between two frames: the swap worker reads a model's session once per run)."""
        model = getattr(self, role)
        if role == "detector":  # one session per input shape (`FaceDetector.copy_sessions`)
            self.detector.use_sessions(session)
        elif model is not None:  # the enhancer switched off meanwhile: its next load gets the copy (`Sessions.copy_session`)
            model.session = session
        self.precisions[role] = precision
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

        stamp = file_stamp(Path(path))
        current = self._source
        if current is not None and current.stamp == stamp:
            return current.identity
        return self._use_source(stamp, load_source_identity(path, self.detector, self.recognizer, "source face"))

    def _use_source(self, stamp: tuple[Path, int, int], identity: SourceIdentity) -> SourceIdentity:
        self._source = SourceFace(identity, self.swapper.source_for(identity), stamp)
        return identity

    @property
    def needs_source(self) -> bool:
        """False for a swapper with its own trained identity (DeepFaceLab), and with a face map."""
        return self.swapper.needs_source and self.face_map is None

    def set_face_map(self, entries: Sequence[FaceMapEntry]) -> FaceMap | None:
        """Map people to source faces (`[[swap.map]]`, `faces/mapping.py`; empty: none); ConfigError naming the entry."""
        from vcamd.faces.mapping import load_face_map

        self.face_map = load_face_map(entries, self.detector, self.recognizer, self.swapper, self._map_sources, self.sessions) if entries else None
        return self.face_map

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

    def swap_faces(self, frame: Frame, faces: list[Face], level: Level = BEST, timer: StageTimer | None = None,
                   sources: list[str] | None = None) -> list[SwappedFace]:
        """Align, swap (one batch) and — on a rung with the enhancer, when one is set — restore each face.
        `sources`: with a face map, each face's source key (each swapped face is labelled with it).

        Reads `frame`, never writes it. The results hold aligned crops only (see SwappedFace).
        """
        if sources is not None and faces and self.face_map is not None:  # each face by its own source (`mapping`)
            return self.face_map.swap(self, frame, faces, level, timer or StageTimer(), sources)
        return self.swap_with(self.swapper, frame, faces, level, timer, self._latent())

    def swap_with(self, swapper: Swapper, frame: Frame, faces: list[Face], level: Level, timer: StageTimer | None,
                  latent: Latent | None) -> list[SwappedFace]:
        """`swap_faces` with this swapper (the engine's, or a mapped person's own model) and source rows."""
        timer = timer or StageTimer()
        enhancer = self.enhancer  # read once: a hot reload may switch it off (the loop's thread) while this runs
        spec = boost.boosted(swapper.crop, self.pixel_boost if rung(level).pixel_boost and swapper is self.swapper else swapper.crop.size)
        with timer("align"):
            # Many faces: every crop cut from one 4-channel copy of the frame (the same crops, cheaper).
            source = for_warps(frame, len(faces), spec.size)
            aligned = [spec.align(source, face.kps) for face in faces]
        with timer("swap"):
            if latent is not None and self.weight != 0.5 and swapper.spec.source.blend != "none":
                # `[swap] weight`: each face's own identity mixed into the source's (one recognizer run a face).
                rows = latent if latent.shape[0] == len(faces) else np.repeat(latent, len(faces), axis=0)
                latent = np.concatenate([swapper.blended(rows[i : i + 1], self.recognizer.embed_raw(frame, face), self.weight)
                                         for i, face in enumerate(faces)])
            crops = self._swap(swapper, spec, [crop for crop, _ in aligned], latent)
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

    def _swap(self, swapper: Swapper, spec: CropSpec, crops: list[Frame], latent: Latent | None) -> list[Frame]:
        """The swapped crops at `spec`'s size: the swapper's own, or — pixel boost — each face's k²
        polyphase tiles swapped in one batch and interleaved back (`faces/boost.py`); one row or one a face."""
        k = boost.factor(spec.size, swapper.crop.size)
        seen = self.seen  # read once: the loop may stop recording meanwhile
        if k == 1:
            if seen is not None:
                seen.offer(crops)
            return swapper.swap(crops, latent)
        if latent is not None and latent.shape[0] > 1:  # one row per face: each of its tiles gets it
            latent = np.repeat(latent, k * k, axis=0)
        tiles = [tile for crop in crops for tile in boost.split(crop, k)]
        if seen is not None:
            seen.offer(tiles)
        tiles = swapper.swap(tiles, latent)
        return [boost.merge(tiles[i * k * k : (i + 1) * k * k], k) for i in range(len(crops))]

    def _enhanced(self, enhancer: Enhancer, frame: Frame, face: Face, swapped: Frame, original: Frame,
                  m_swap: Affine) -> tuple[SwappedFace, Frame]:
        """Put the swapped crop into the face's FFHQ enhancer crop and restore that (`frame`: the
        frame as `swap_faces` cuts its crops from, see `align.for_warps`); with the camera's own
        FFHQ crop (what the face parser looks at)."""
        canvas, m_enhance = enhancer.crop.align(frame, face.kps)
        camera = canvas.copy() if self.parser is not None else canvas
        # enhancer-crop pixel → frame → swap-crop pixel: the swap crop's matrix seen from the enhancer crop.
        m_inner = compose_affine(m_swap, invert_affine(m_enhance))
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
        from vcamd.faces.following import FollowedFace

        timer = StageTimer()
        if self.face_map is None:
            self._latent()  # fail before detecting when there is no source face
        with timer("detect"):
            faces = self.detect(frame, self.detect_size(level))
        with timer("select"):
            picked = (follow or FollowedFace()).pick(self, faces, frame, index)
        known = [i for i, key in enumerate(picked.sources) if key != UNKNOWN_SOURCE]  # who the others are is not known: covered
        keys = [picked.sources[i] or "" for i in known] if self.face_map is not None else None
        made = iter(self.swap_faces(frame, [picked.targets[i] for i in known], level, timer, keys))
        swapped = [next(made) if i in known else None for i in range(len(picked.targets))]
        with timer("blend"):  # the camera's own privacy rule decides what each face gets
            composed = rule.compose(frame_scene(frame, faces, picked.targets, swapped, self.others, picked.sources), self.composite)
        for stage in ("align", "swap", "enhance"):
            timer.ms.setdefault(stage, 0.0)
        return FrameResult(frame=composed.frame, faces=faces, swapped=composed.faces.count(FaceOutcome.swapped),
                           stage_ms=dict(timer.ms))

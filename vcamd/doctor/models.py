"""The model files the config uses: there, intact, of their role, fitting each other, and how the
detector runs at the camera's shapes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vcamd.common.errors import VcamdError
from vcamd.config.schema import Config
from vcamd.doctor.results import CheckResult, Status, ok
from vcamd.modelstore.wayout import how_to_get, ways_out

if TYPE_CHECKING:
    from vcamd.modelstore.store import ModelRow, ModelStore


def check_models(cfg: Config) -> list[CheckResult]:
    try:
        from vcamd.modelstore.store import ModelStore

        store = ModelStore.from_config(cfg.models)
        rows = store.list()
    except VcamdError as err:
        return [CheckResult("models", Status.fail, str(err.message), err.fix or "see `vcamd models list`")]
    from vcamd.modelstore.roles import configured_models
    from vcamd.remote.sessions import remote_placeholders

    elsewhere = remote_placeholders(cfg)  # run on the Triton server: `check_server` checks them there
    results = []
    for value, role in configured_models(cfg):
        if role in elsewhere:
            continue
        result = _model_file_result(store, rows, role, value)
        if result.status is Status.ok:
            result = _signature_result(store, role, value, result, cfg)
        results.append(result)
    return results


def _signature_result(store: ModelStore, role: str, value: str, found: CheckResult, cfg: Config) -> CheckResult:
    """The file is there: load it as `vcamd run` does, so a model in the wrong role fails here too."""
    from vcamd.models.modelcheck import check_signature

    try:
        check_signature(store.path_for(value, role), role, family=cfg.models.swapper_family or None)
    except VcamdError as err:
        return CheckResult(found.name, Status.fail, err.message, err.fix or f"fix [models] {role} in the config")
    return found


def check_models_fit(cfg: Config) -> CheckResult | None:
    """Whether the recognizer's embeddings fit the swapper (`modelcheck.identity_fit`): each may
    pass its own row and every swap still fail. None when either model is not there (its row says so)."""
    from vcamd.models.modelcheck import identity_fit_problem

    try:
        misfit = identity_fit_problem(cfg)
    except VcamdError:
        return None
    if misfit is not None:
        return CheckResult("models fit", Status.fail, misfit.message, misfit.fix or "")
    return None


def check_detector_shapes(cfg: Config) -> CheckResult | None:
    """Whether the detector runs at the camera frame's aspect and at the tracking crops' size, as
    `vcamd run` asks it to, or falls back to its own input shape (an export with shapes fixed
    inside its graph: it works, each run costs a full square input). Probed on a camera-sized
    frame holding the source face photo when there is one (the detections are compared only on a
    frame with a face). None when the detector does not load: `check_models` reports that."""
    import cv2
    import numpy as np

    from vcamd.faces.detect import FaceDetector
    from vcamd.files.images import read_image
    from vcamd.inference.runtime import Sessions
    from vcamd.modelstore.store import ModelStore

    try:
        path = ModelStore.from_config(cfg.models).path_for(cfg.models.detector, "detector")
        detector = FaceDetector(path, Sessions(["cpu"], threads=1), cfg.detection.size, cfg.detection.threshold)
    except VcamdError:
        return None
    frame = np.zeros((cfg.camera.height, cfg.camera.width, 3), np.uint8)
    photo = None
    if cfg.swap.source_face is not None:
        try:
            photo = read_image(Path(cfg.swap.source_face), "[swap] source_face")
        except VcamdError:
            photo = None  # check_source_face reports it
    if photo is not None:
        scale = min(frame.shape[0] / photo.shape[0], frame.shape[1] / photo.shape[1])
        fitted = cv2.resize(photo, (max(1, int(photo.shape[1] * scale)), max(1, int(photo.shape[0] * scale))))
        frame[:fitted.shape[0], :fitted.shape[1]] = fitted
    faces = detector.detect(frame)
    track, side = cfg.detection.track_size, min(frame.shape[:2])
    detector.detect(frame[:side, :side], track)  # a tracking crop: square, at track_size
    name = f"detector input ({path.name})"
    if detector.own_shape_reason is not None:
        h, w = detector.input_shape(frame.shape[:2])
        return CheckResult(
            name, Status.warn,
            f"runs at its own input shape {w}×{h} only, the frame letterboxed into it ({detector.own_shape_reason}); "
            "it finds the faces, each full detection and tracking crop costs a full-size run",
            f"use an SCRFD export that takes any input size (buffalo_l's det_10g: {how_to_get(['buffalo_l'])}), or keep this one: it works, slower",
        )
    h, w = detector.input_shape(frame.shape[:2])
    compared = f"same faces as at its own shape on {cfg.swap.source_face}" if faces else "created and ran (no face in the probe to compare: set [swap] source_face)"
    return ok(name, f"runs at the camera's aspect ({w}×{h} for {cfg.camera.width}×{cfg.camera.height}) and at {track}² tracking crops: {compared}")


def _model_file_result(store: ModelStore, rows: list[ModelRow], role: str, value: str) -> CheckResult:
    """Whether the configured model's file is there and intact (manifest size and hash)."""
    name = f"model {role}"
    row = next((r for r in rows if r.name == value and r.role == role), None)
    if row is None:
        path = Path(value).expanduser()
        if path.is_file():
            return ok(name, f"{path} (a file, not in the manifest: not verified)")
        return CheckResult(name, Status.fail, f"{value!r} is neither a manifest model for {role} nor a file",
                           f"set [models] {role} (see `vcamd models list`)")
    if row.status == "verified":
        return ok(name, f"{value} verified ({row.path})")
    if row.status == "present":
        return _verify(store, value, role, name)
    if row.status == "corrupt":
        return CheckResult(name, Status.fail, f"{value} is damaged ({row.path}: wrong size)", ways_out([value], before="delete it, then "))
    return CheckResult(name, Status.fail, f"{value} is {row.status} ({row.path})", ways_out([value]))


def _verify(store: ModelStore, value: str, role: str, name: str) -> CheckResult:
    """Hash a present, not yet verified model file (once: the store remembers the result)."""
    try:
        outcome = next(r for r in store.verify([value]) if r.role == role)
    except (VcamdError, OSError, StopIteration) as exc:
        return CheckResult(name, Status.fail, f"{value}: cannot verify ({exc})", f"vcamd models verify {value}")
    if outcome.status == "ok":
        return ok(name, f"{value} verified ({outcome.path})")
    if outcome.status == "pinned":
        return ok(name, f"{value} present ({outcome.path}); no published hash, pinned sha256 {outcome.sha256[:12]}…")
    if outcome.status == "mismatch":
        return CheckResult(name, Status.fail, f"{value} is damaged ({outcome.path}: sha256 does not match)",
                           ways_out([value], before="delete it, then "))
    return CheckResult(name, Status.fail, f"{value} is {outcome.status} ({outcome.path})", ways_out([value]))

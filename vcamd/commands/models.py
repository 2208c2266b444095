"""`vcamd models list|pull|verify|quantize`: the model files in the models dir, and the int8 copies of the
swapper, the enhancer and the face parser."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from vcamd.commands import Subcommands, add_config_option

if TYPE_CHECKING:
    from vcamd.config.schema import Config
    from vcamd.models.quantize import Attempt
    from vcamd.modelstore.manifest import ModelEntry
    from vcamd.modelstore.store import ModelStore


def register(subparsers: Subcommands) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list, download and verify the model files",
        description="The model files vcamd needs: where they are, download them, check their SHA-256.",
    )
    actions = parser.add_subparsers(dest="models_action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every model in the manifest, its status and path")
    add_config_option(listing)
    listing.set_defaults(func=_list)

    pull = actions.add_parser(
        "pull",
        help="download models (default: the ones the config uses), resuming partial downloads",
        description="Download, check the SHA-256, move into place. An interrupted download resumes next time.",
    )
    pull.add_argument("names", nargs="*", metavar="NAME", help="manifest names (see `vcamd models list`)")
    pull.add_argument("--all", action="store_true", help="every model in the manifest")
    pull.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_config_option(pull)
    pull.set_defaults(func=_pull)

    verify = actions.add_parser("verify", help="re-hash the model files that are present")
    verify.add_argument("names", nargs="*", metavar="NAME", help="manifest names (default: every model present)")
    add_config_option(verify)
    verify.set_defaults(func=_verify)

    quantize = actions.add_parser(
        "quantize",
        help="build the int8 copies (swapper, enhancer, face parser) now and print their fidelity check against the float models",
        description="Build an int8 copy of the swapper, the enhancer and the face parser the config uses (or of MODEL): ONNX "
                    "Runtime's static quantisation, calibrated on the faces in --face photos, checked against the float model "
                    "on those faces (the swapper and the enhancer: PSNR and the recogniser's identity; the parser: its class "
                    "maps over the face), and kept beside the optimised graphs. `vcamd run` builds them by itself on first use; "
                    "this does it now and shows the figures. [models] precision says when they run.",
    )
    quantize.add_argument("model", nargs="?", metavar="MODEL",
                          help="a swapper, enhancer or face parser: manifest name or .onnx path (default: the config's, each in turn)")
    quantize.add_argument("--face", type=Path, action="append", default=None, metavar="PHOTO",
                          help="a photo to calibrate on; repeat for more (the first one's largest face is the source; "
                               "default: [swap] source_face)")
    quantize.add_argument("--again", action="store_true", help="build and check again even when a copy (or a verdict) is kept")
    add_config_option(quantize)
    quantize.set_defaults(func=_quantize)


def _store(args: argparse.Namespace) -> tuple[ModelStore, Config]:
    from vcamd.config.reading import load_config
    from vcamd.modelstore.store import ModelStore

    config, _ = load_config(args.config)
    return ModelStore.from_config(config.models), config


def _used_by_config(config: Config) -> dict[str, list[str]]:
    """manifest-or-path value → the roles the config uses it for (the enhancer only when enabled)."""
    from vcamd.config.roles import configured_models

    used: dict[str, list[str]] = {}
    for value, role in configured_models(config):
        used.setdefault(value, []).append(role)
    return used


def _size(n: int | None, exact: bool) -> str:
    if n is None:
        return "?"
    return f"{'' if exact else '~'}{n / 1e6:.1f} MB"


def _list(args: argparse.Namespace) -> int:
    store, config = _store(args)
    used = _used_by_config(config)
    rows = store.list()
    table = [("NAME", "ROLE", "STATUS", "SIZE", "PATH")]
    for row in rows:
        spec = store.manifest.entries[row.name].installed()[row.role]
        exact = row.status != "missing" and row.status != "partial" or spec.size is not None
        mark = "*" if row.role in used.get(row.name, []) else ""
        table.append((row.name + mark, row.role, row.status, _size(row.size, exact), str(row.path)))
    widths = [max(len(line[i]) for line in table) for i in range(4)]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[4])
    print()
    print(f"models dir: {store.dir}   (* = used by the config)")
    licences = sorted({row.license for row in rows})
    for licence in licences:
        names = sorted({row.name for row in rows if row.license == licence})
        print(f"licence: {', '.join(names)}: {licence}")
    missing = sorted({row.name for row in rows if row.status in ("missing", "partial") and used.get(row.name)})
    if missing:
        print(f"get the missing ones the config uses: vcamd models pull {' '.join(missing)}")
    absent = list(dict.fromkeys(row.name for row in rows if row.status in ("missing", "partial", "corrupt")))
    if absent:
        print()
        print("no route to the download sites (a proxy, an air-gapped machine)? copy the files in yourself:")
        for name in absent:
            _print_by_hand(store, store.manifest.entries[name])
        print("then check them: vcamd models verify")
    return 0


def _sha_text(sha256: str) -> str:
    return f"SHA-256 {sha256}" if sha256 else "SHA-256 not published (the first `vcamd models verify` records it)"


def _print_by_hand(store: ModelStore, entry: ModelEntry) -> None:
    """Where to fetch one manifest entry by hand and where each of its files goes."""
    print(f"  {entry.name}: {store.url_for(entry)}")
    if not entry.extract:
        print(f"    save as {store.dir / entry.file}  ({_size(entry.display_size, entry.size is not None)}, "
              f"{_sha_text(entry.sha256)})")
        return
    print(f"    a zip ({_size(entry.display_size, entry.size is not None)}, {_sha_text(entry.sha256)}); "
          "take from it:")
    for spec in entry.extract.values():
        print(f"    {spec.file} -> {store.dir / spec.file}  ({_size(spec.display_size, spec.size is not None)}, "
              f"{_sha_text(spec.sha256)})")


def _pull(args: argparse.Namespace) -> int:
    from vcamd.common.errors import VcamdError

    store, config = _store(args)
    if args.all:
        names = list(store.manifest.entries)
    elif args.names:
        names = list(dict.fromkeys(args.names))
    else:
        names = [value for value in _used_by_config(config) if value in store.manifest.entries]
        if not names:
            print("nothing to pull: the config's [models] entries are file paths, not manifest names")
            return 0
        print(f"pulling the models the config uses: {', '.join(names)}")
    if args.all and args.names:
        raise VcamdError("give model names or --all, not both", fix="see `vcamd models pull --help`")
    for result in store.pull(names, progress=not args.no_progress):
        paths = ", ".join(str(p) for p in result.paths)
        checked = "" if result.pinned else ", SHA-256 ok"
        print(f"{result.name}: {result.action}{checked}: {paths}")
        if result.crc32:
            print(f"{result.name}: CRC32 {result.crc32} matches the one its publisher gives ({store.manifest.entries[result.name].crc32_url})")
        for path, sha in result.pinned:
            print(
                f"{result.name}: no published SHA-256 for {path.name}; recorded {sha} in {store.state_path} "
                "— later pulls and `vcamd models verify` check against it"
            )
        licence = store.manifest.entries[result.name].license
        print(f"{result.name}: licence: {licence}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from vcamd.common.errors import ModelError
    from vcamd.common.wayout import ways_out

    store, _ = _store(args)
    results = store.verify(args.names or None)
    if not results:
        from vcamd.common.wayout import ways_out

        print(f"no model files in {store.dir}; to get them, {ways_out(files=2)}")
        return 0
    for r in results:
        detail = {
            "ok": "SHA-256 ok",
            "pinned": f"no published SHA-256; recorded {r.sha256} in {store.state_path}",
            "missing": "missing",
            "mismatch": f"SHA-256 MISMATCH: {r.sha256}, expected {r.expected}",
            "invalid": f"NOT A USABLE MODEL: {r.problem}" + (f"; its recorded SHA-256 was dropped from {store.state_path}" if r.expected else ""),
        }[r.status]
        print(f"{r.name} ({r.role}): {r.path}: {detail}")
    bad = [r for r in results if r.status in ("mismatch", "missing", "invalid")]
    if bad:
        what = ", ".join(f"{r.path.name} {r.status}" for r in bad)
        sys.stdout.flush()
        it = "them" if len(bad) > 1 else "it"
        raise ModelError(f"model check failed: {what}",
                         fix=ways_out([r.name for r in bad], files=len(bad), pull_note=f" to download {it} again"))
    return 0


def _quantize_targets(args: argparse.Namespace, store: ModelStore, config: Config) -> list[tuple[str, Path]]:
    """(role, model file) to build: MODEL's (its role from the manifest or its inputs), or each the config uses."""
    from vcamd.inference.precision import INT8_ROLES
    from vcamd.models.int8roles import role_of

    if args.model:
        entry = store.manifest.entries.get(args.model)
        role = next((r for r in INT8_ROLES if r in entry.roles), None) if entry is not None else None
        if entry is not None and role is None:
            from vcamd.common.errors import ModelError

            raise ModelError(f"{args.model} is a {entry.role}: int8 copies are made of the swapper, the enhancer, the face parser and the detector",
                             fix="name one of those (or leave MODEL out: the config's)")
        path = store.path_for(args.model, role or "swapper").resolve()
        return [(role or role_of(path), path)]
    used = {"swapper": config.models.swapper, "enhancer": config.models.enhancer if config.enhancer.enabled else "",
            "parser": config.models.parser, "detector": config.models.detector}
    return [(role, store.path_for(used[role], role).resolve()) for role in INT8_ROLES if used[role]]


def _quantize(args: argparse.Namespace) -> int:
    from vcamd.common.errors import ModelError, VcamdError
    from vcamd.faces.calibration import CALIBRATION_FACES, faces_from_photos, photo_frames
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Recognizer
    from vcamd.inference.int8recipes import build_key
    from vcamd.inference.precision import choose, int8_units, needs_reduced_range
    from vcamd.inference.runtime import Sessions
    from vcamd.models.int8detector import looks_for
    from vcamd.models.int8roles import calibration_crop
    from vcamd.models.quantize import build_checked

    store, config = _store(args)
    targets = _quantize_targets(args, store, config)
    crops = [None if role == "detector" else calibration_crop(role, model) for role, model in targets]  # a ModelError for a model that is not its role
    photos = args.face or ([config.swap.source_face] if config.swap.source_face else [])
    if not photos:
        raise VcamdError("vcamd models quantize needs photos of faces to calibrate on", fix="pass --face PHOTO (or set [swap] source_face)")
    units = int8_units()
    reduce_range = needs_reduced_range(units)
    sessions = Sessions(["cpu"], config.models.threads)
    detector = FaceDetector(store.path_for(config.models.detector, "detector"), sessions, config.detection.size, config.detection.threshold)
    recognizer = Recognizer(store.path_for(config.models.recognizer, "recognizer"), sessions)
    print(f"this CPU's int8 dot-product units: {units.describe()}" + ("; weights in 7 bits (x86 without VNNI)" if reduce_range else ""))
    failed = []
    looks = looks_for(config)
    for (role, model), crop in zip(targets, crops):
        if crop is None:  # the detector: whole photos, letterboxed as it looks at them
            faces = photo_frames([Path(p) for p in photos])
            count = f"{len(faces.crops)} photo{'s' if len(faces.crops) != 1 else ''}"
        else:
            faces = faces_from_photos([Path(p) for p in photos], detector, recognizer, crop, limit=CALIBRATION_FACES)
            count = f"{len(faces.crops)} face{'s' if len(faces.crops) != 1 else ''}"
        print(f"{role} {model.name}: int8 copy calibrated and checked on {count} from {', '.join(Path(p).name for p in photos)}"
              + (" (more faces, more --face photos, make the check sturdier)" if len(faces.crops) < 4 else ""))
        if args.again:
            _forget_copy(model, build_key(reduce_range, role, looks if role == "detector" else None))
        built = build_checked(model, recognizer.path, faces, role=role, providers=["cpu"], threads=config.models.threads,
                              reduce_range=reduce_range, looks=looks if role == "detector" else None,
                              say=lambda line: print(f"  {line}", flush=True))
        if not built.attempts:
            print(f"  already built and checked ({built.kept.record.get('built_at', '?')}): {built.kept.verdict.summary}")
            print("  (--again builds and checks it again)")
        for attempt in built.attempts:
            _print_attempt(attempt)
        kept = built.kept
        choice = choose(config.models.precision, "CPUExecutionProvider", units, kept.verdict, kept.model)
        print(f"  passed: kept at {kept.model}" if kept.verdict.passed else f"  failed: {kept.verdict.summary}")
        print(f"  with [models] precision = \"{config.models.precision}\" on the CPU the {role} runs in {choice.runs}"
              + (f": {choice.why}" if choice.runs == "float" and choice.why else ""))
        if not kept.verdict.passed:
            failed.append(f"{model.name} ({role})")
    if failed:
        sys.stdout.flush()
        raise ModelError(f"the int8 copy of {', '.join(failed)} failed the fidelity check: the float model stays",
                         fix="nothing to do: vcamd runs the float model; the figures above say how far the int8 copy is off")
    return 0


def _print_attempt(attempt: Attempt) -> None:
    report = attempt.report
    print(f"  {attempt.recipe.name}: float {attempt.float_ms:.0f} ms a face, int8 {attempt.int8_ms:.0f} ms ({attempt.speedup:.1f}× faster)")
    lines = report.table()
    for line in lines[:-1]:
        print(f"    {line}")
    print(f"    {lines[-1]} → {'passed' if report.passed else 'failed: ' + '; '.join(report.failures())}")


def _forget_copy(model: Path, key: str) -> None:
    """--again: the kept copy and verdict of this model file go first (a new build replaces them)."""
    import contextlib

    from vcamd.inference import int8cache
    from vcamd.inference.modelhashes import sha256_of

    entry = int8cache.Entry(sha256_of(model), key)
    for path in (entry.verdict_file, entry.model):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

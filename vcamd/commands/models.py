"""`vcamd models list|pull|verify`: the model files in the models dir."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from vcamd.commands import add_config_option

if TYPE_CHECKING:
    from vcamd.config import Config
    from vcamd.modelstore.manifest import ModelEntry
    from vcamd.modelstore.store import ModelStore


def register(subparsers: argparse._SubParsersAction) -> None:
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


def _store(args: argparse.Namespace) -> tuple[ModelStore, Config]:
    from vcamd.config import load_config
    from vcamd.modelstore.store import ModelStore

    config, _ = load_config(args.config)
    return ModelStore.from_config(config.models), config


def _used_by_config(config: Config) -> dict[str, list[str]]:
    """manifest-or-path value → the roles the config uses it for (the enhancer only when enabled)."""
    from vcamd.modelstore.roles import configured_models

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
    from vcamd.errors import VcamdError

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
        for path, sha in result.pinned:
            print(
                f"{result.name}: no published SHA-256 for {path.name}; recorded {sha} in {store.state_path} "
                "— later pulls and `vcamd models verify` check against it"
            )
        licence = store.manifest.entries[result.name].license
        print(f"{result.name}: licence: {licence}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from vcamd.errors import ModelError
    from vcamd.modelstore.wayout import ways_out

    store, _ = _store(args)
    results = store.verify(args.names or None)
    if not results:
        from vcamd.modelstore.wayout import ways_out

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

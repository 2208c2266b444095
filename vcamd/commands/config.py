"""`vcamd config check|init|path`: validate the settings file, create it from the example."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from vcamd.commands import Subcommands

if TYPE_CHECKING:
    from vcamd.config.schema import Config


def register(subparsers: Subcommands) -> None:
    parser = subparsers.add_parser(
        "config",
        help="check the settings file or create one",
        description="The settings file: every key is documented in config.example.toml (`vcamd config init` copies it).",
    )
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION", required=True)

    check = actions.add_parser(
        "check",
        help="validate a settings file: one line per problem, exit 2 if any",
        description="Prints `FILE: OK`, or one line per problem (key, bad value, what was expected) and exits 2. "
        "Models that are there are loaded as `vcamd run` loads them, so one in the wrong role is a problem too.",
    )
    check.add_argument("file", nargs="?", type=Path, metavar="FILE", help="default: the user config file")
    check.set_defaults(func=_check)

    init = actions.add_parser("init", help="write the documented example settings to the user config file")
    init.add_argument("--force", action="store_true", help="overwrite an existing config file")
    init.set_defaults(func=_init)

    where = actions.add_parser("path", help="print where the user config file is (or would be)")
    where.set_defaults(func=_path)


def example_text() -> str:
    """config.example.toml as shipped inside the package (vcamd/data/config.example.toml)."""
    from importlib import resources

    return (resources.files("vcamd") / "data" / "config.example.toml").read_text(encoding="utf-8")


def _check(args: argparse.Namespace) -> int:
    from vcamd.common.errors import ConfigError
    from vcamd.config.folders import user_config_path
    from vcamd.config.reading import load_config

    if args.file is None and not user_config_path().exists():
        print(f"{user_config_path()}: not found; the defaults apply (create it with `vcamd config init`)")
        return 0
    try:
        config, origin = load_config(args.file)
    except ConfigError as err:
        for problem in err.problems:
            print(f"{err.path}: {problem}")
        return 2
    problems = _missing_files(config) + _model_problems(config)
    for problem in problems:
        print(f"{origin}: {problem}")
    if problems:
        return 2
    print(f"{origin}: OK")
    return 0


def _missing_files(config: Config) -> list[str]:
    """Photos the config names that are not there: valid TOML, but the swap would fail later."""
    problems = []
    swap = config.swap
    for key in ("source_face", "reference_face"):
        path = getattr(swap, key)
        if path is not None and not Path(path).is_file():
            problems.append(f"[swap] {key} = {str(path)!r}: file not found — fix the path or remove the key")
    return problems


def _model_problems(config: Config) -> list[str]:
    """Models that `vcamd run` would refuse for their role (e.g. a GFPGAN file as swapper), or
    that do not fit each other (a 128-d recognizer with a 512-d swapper)."""
    from vcamd.models.modelcheck import identity_fit_problem, wrong_role_problems

    problems = []
    for role, err in wrong_role_problems(config):
        message = err.message if err.message.startswith("[models]") else f"[models] {role}: {err.message}"
        problems.append(message + (f" — {err.fix}" if err.fix else ""))
    misfit = identity_fit_problem(config)
    if misfit is not None:
        problems.append(f"{misfit.message} — {misfit.fix}")
    return problems


def _init(args: argparse.Namespace) -> int:
    from vcamd.common.errors import VcamdError
    from vcamd.config.folders import user_config_path
    from vcamd.files.private_files import private_parent, write_private_atomic

    target = user_config_path()
    if target.exists() and not args.force:
        raise VcamdError(f"{target} already exists", fix="edit it, or run `vcamd config init --force` to replace it with the example")
    try:
        private_parent(target)
        write_private_atomic(target, example_text())  # 0600 (it names your photos), never through a symlink
    except OSError as exc:
        raise VcamdError(f"cannot write {target}: {exc.strerror}", fix="check the folder's permissions and free space") from None
    print(f"wrote {target} — every key with its default and what it does; edit it, then `vcamd config check`")
    return 0


def _path(args: argparse.Namespace) -> int:
    from vcamd.config.folders import user_config_path

    target = user_config_path()
    print(target)
    return 0

"""The order the suite's files start in: its longest files first.

`pytest -n N --dist loadfile` hands each worker whole files, in the order they were collected
(pyproject's `--no-loadscope-reorder`: xdist's own order, the files with the most tests first, put
the long end-to-end files of one or two tests last, where one worker ran them alone while the others
sat idle). Started first, they run beside the many short files, which then fill every worker up to
the end: the longest-first rule of scheduling jobs on parallel machines.

LONG_FILES is measured, not guessed: the 30 longest files of a whole quiet run on a clean clone
(`bash .ci/run` at df04456, `pytest -n 3 --dist loadfile --durations=0`, each file's set-up, call and
tear-down summed: 106 s for test_selection_e2e down to 12 s; 1 139 s for all 140 files), longest
first. Remeasure when files come or grow: test_mapping_e2e (59 s) was missing from the list before
and started wherever collection put it. A file not listed starts after them, in
collection order; a listed file that is moved or renamed only starts later (test_suite_order.py
checks that each still exists). Only when the files start changes, never what a test does."""

from __future__ import annotations

from collections.abc import Sequence

LONG_FILES: tuple[str, ...] = (
    "tests/privacy/test_selection_e2e.py",
    "tests/reliability/test_live_faults.py",
    "tests/privacy/test_mapping_e2e.py",
    "tests/privacy/test_leaks_e2e.py",
    "tests/live/test_engine.py",
    "tests/reliability/test_remote_faults.py",
    "tests/panel/test_security.py",
    "tests/live/test_int8_live.py",
    "tests/privacy/test_cold_start_e2e.py",
    "tests/privacy/test_newcomer_e2e.py",
    "tests/live/test_model_families.py",
    "tests/live/test_unsure_faces.py",
    "tests/live/test_control_plane.py",
    "tests/commands/test_swap_mapping.py",
    "tests/bench/test_bench_scenarios.py",
    "tests/remote/test_serve_process.py",
    "tests/privacy/test_faces_per_round_e2e.py",
    "tests/commands/test_swap.py",
    "tests/panel/test_chromium.py",
    "tests/reliability/test_cli_daemon.py",
    "tests/privacy/test_rule_property.py",
    "tests/control/test_daemon_e2e.py",
    "tests/control/test_server.py",
    "tests/privacy/test_obscure.py",
    "tests/reliability/test_fuzz_config.py",
    "tests/reliability/test_disk_full.py",
    "tests/remote/test_served.py",
    "tests/tray/test_daemon_tray_e2e.py",
    "tests/live/test_reconfigure.py",
    "tests/remote/test_tls.py",
)


def file_of(nodeid: str) -> str:
    """The file part of a test's node id ("tests/a/test_b.py::test_c[x]" -> "tests/a/test_b.py")."""
    return nodeid.split("::", 1)[0]


def longest_first(nodeids: Sequence[str], long_files: Sequence[str] = LONG_FILES) -> list[int]:
    """The positions of `nodeids` in the order to run them: the tests of `long_files` first, file by
    file in that order, then the rest; the tests of one file keep their order (a stable sort)."""
    rank = {name: n for n, name in enumerate(long_files)}
    return sorted(range(len(nodeids)), key=lambda i: rank.get(file_of(nodeids[i]), len(rank)))

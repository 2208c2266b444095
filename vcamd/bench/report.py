"""What `vcamd bench` prints: the tables, and one row per target with the figure, the target and
the ratio. Pure (figures in, text out)."""


from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vcamd.bench.runs import CPU_FROM_FRAME
from vcamd.bench.settings import BenchSettings
from vcamd.bench.targets import (
    TARGET_BACK_S,
    TARGET_CALL_FIRST_FRAME_MS,
    TARGET_CALL_FIRST_SWAP_MS,
    TARGET_CPU_MS,
    TARGET_CROWD_FULL_QUALITY,
    TARGET_DELAY_RTT_MS,
    TARGET_EVERY_FACE,
    TARGET_FIRST_FRAME_MS,
    TARGET_FIRST_SWAP_MS,
    TARGET_FPS_RATIO,
    TARGET_GROUPS_FULL_QUALITY,
    TARGET_GROUPS_P99_MS,
    TARGET_HOP_MS,
    TARGET_INT8_FIRST_SWAP_MS,
    TARGET_INT8_SPEEDUP,
    TARGET_INT8_SWAP_AGE_P95_MS,
    TARGET_INT8_SWAPPED_AFTER_FIRST,
    TARGET_ONE_FACE_CPU_MS,
    TARGET_OVERHEAD_MS,
    TARGET_P99_BUDGET_MS,
    TARGET_RESOLUTION_RATIO,
    TARGET_SWAP_AGE_EXTRA_MS,
    TARGET_SWAP_AGE_P95_MS,
    TARGET_SWAPPED,
    TARGET_SWAPPED_AFTER_FIRST,
    TargetRow,
    lower_share,
    upper,
)
from vcamd.common.quality import BEST

LIVE_COLUMNS = ("light", "inswapper", "inswapper_int8")


def format_table(results: dict[str, dict[str, Any]], settings: BenchSettings) -> str:
    """The live scenarios (light, inswapper) as one table, a column each; then a row per target of
    the groups and resolution scenarios: figure, target, ratio."""
    parts: list[str] = []
    if (models := results.get("models")) is not None:
        parts.append(format_models_table(models["rows"], settings))
    live = {k: results[k] for k in LIVE_COLUMNS if k in results}
    if live:
        parts.append(format_live_table(live, settings))
    parts += [int8_copy_line(r["int8_copy"]) for r in _int8_results(results)]
    targets = target_rows(results, settings)
    if targets:
        parts.append(format_target_rows(targets, settings))
    if (call := results.get("call")) is not None:
        parts.append(format_call_table(call, settings))
    if (remote := results.get("remote")) is not None:
        parts.append(format_remote_table(remote, settings))
    if cpu := format_cpu_table(results):
        parts.append(cpu)
    if (st := results.get("startup", results.get("startup_int8"))) is not None:
        threads = st.get("threads", settings.threads)
        parts.append(
            f"startup: ONNX Runtime threads {threads}{' (all cores)' if threads == 0 else ''} (--threads; a user's default "
            f"config has [models] threads = 0, all cores); `vcamd run` started twice: the first start optimises the "
            f"swapper and keeps its graph, the next start loads it; bytecode written and read as an installed vcamd has it"
        )
    return "\n\n".join(parts)


def _int8_results(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The results that say how their int8 copy was built and checked, once per copy."""
    seen: set[str] = set()
    out = []
    for r in results.values():
        copy = r.get("int8_copy") if isinstance(r, dict) else None
        if copy and copy["model"] not in seen:
            seen.add(copy["model"])
            out.append(r)
    return out


def int8_copy_line(copy: dict[str, Any]) -> str:
    """How the int8 runs' copy was built and what its check said."""
    verdict = "passed" if copy["passed"] else "FAILED (its runs ran the float model)"
    speed = f"; the check's own swaps: float {copy['float_ms']:.0f} ms, int8 {copy['int8_ms']:.0f} ms a face" if copy.get("float_ms") else ""
    return (f"int8 copy of {copy['model']} ({copy.get('recipe') or '-'}; calibrated and checked on {copy['faces']} faces, "
            f"built in {copy['build_s']:.0f} s; CPU int8 units: {copy['units']}): {verdict}: {copy['summary']}{speed}")


def target_rows(results: dict[str, dict[str, Any]], settings: BenchSettings) -> list[TargetRow]:
    rows: list[TargetRow] = []
    if (light := results.get("light")) is not None:
        full = light["levels"].get(BEST.name, 0.0)
        cpu = light["cpu_ms_per_frame"]
        # Below full quality the loop does less work per frame: the figure is only comparable at full.
        note = "" if full >= 0.999 else f" (watchdog at full {100 * full:.0f} %: use --quality full)"
        rows.append(TargetRow("light", f"CPU-ms/frame, one face, {settings.height}p", f"{cpu:.1f}{note}",
                              f"≤ {TARGET_ONE_FACE_CPU_MS:.0f}", round(cpu / TARGET_ONE_FACE_CPU_MS, 2),
                              cpu <= TARGET_ONE_FACE_CPU_MS if not note else None))
    for name, p99_limit, full_share in (("groups", TARGET_GROUPS_P99_MS, TARGET_GROUPS_FULL_QUALITY),
                                        ("crowd", TARGET_P99_BUDGET_MS + 1000.0 / settings.fps, TARGET_CROWD_FULL_QUALITY)):
        if (g := results.get(name)) is None:
            continue
        rows.append(upper(name, "capture→publish p99", g["latency_ms"]["p99"], p99_limit, " ms"))
        ratio = g["fps_ratio"]
        rows.append(TargetRow(name, "published / camera fps", f"{ratio:.2f}×", f"≥ {TARGET_FPS_RATIO:.2f}×",
                              round(ratio / TARGET_FPS_RATIO, 2), ratio >= TARGET_FPS_RATIO))
        rows.append(lower_share(name, "time at full quality", g["full_quality_share"], full_share))
        rows.append(lower_share(name, "frames with every face swapped or held", g["every_face_share"], TARGET_EVERY_FACE))
        rows.append(lower_share(name, "faces swapped or held (per face)", g["face_share"], TARGET_EVERY_FACE,
                                 "needs faces.{swapped,held,obscured} in the stats JSON"))
    if (st := results.get("startup")) is not None:
        starts = [("", st["startup_ms"])]
        if st.get("first_start_ms") is not None:
            starts = [(" (next start)", st["startup_ms"]), (" (first start)", st["first_start_ms"])]
        for which, startup_ms in starts:
            for measure, key, limit in (("first frame", "first_frame", TARGET_FIRST_FRAME_MS), ("first swap", "first_swap", TARGET_FIRST_SWAP_MS)):
                value, label = startup_ms[key], f"{measure}{which}, ms from process start"
                if value is None:
                    rows.append(TargetRow("startup", label, "n/a (never)", f"≤ {limit:.0f} ms", None, False))
                else:
                    rows.append(upper("startup", label, value, limit, " ms"))
    rows += int8_target_rows(results, settings)
    if (r := results.get("resolution")) is not None:
        ratio = r["cpu_ratio"]
        rounds = r.get("round_ratios") or []
        of_rounds = f", median of {len(rounds)} pairs: " + ", ".join("n/a" if x is None else f"{x:.2f}" for x in rounds) if len(rounds) > 1 else ""
        rows.append(TargetRow(
            "resolution", f"CPU-ms/frame 1080p ÷ 480p ({r['quality']}{of_rounds})",
            f"{r['cpu_ms_1080p']:.1f} ÷ {r['cpu_ms_480p']:.1f} = {ratio:.2f}×" if ratio else "n/a",
            f"≤ {TARGET_RESOLUTION_RATIO:.1f}×",
            round(ratio / TARGET_RESOLUTION_RATIO, 2) if ratio else None,
            ratio <= TARGET_RESOLUTION_RATIO if ratio else None,
        ))
        if (own := r.get("own_cpu_ratio")) is not None:
            # Not the target (that is the whole process): where the growth is, counted.
            rows.append(TargetRow(
                "resolution", f"  of which the camera's read + decode: {r['camera_cpu_ms_480p']:.1f} → {r['camera_cpu_ms_1080p']:.1f};"
                " the rest 1080p ÷ 480p",
                f"{r['cpu_ms_1080p'] - r['camera_cpu_ms_1080p']:.1f} ÷ {r['cpu_ms_480p'] - r['camera_cpu_ms_480p']:.1f} = {own:.2f}×",
                "(count)", None, None,
            ))
    if (remote := results.get("remote")) is not None:
        rows += remote_rows(remote, settings)
    return rows


def int8_target_rows(results: dict[str, dict[str, Any]], settings: BenchSettings) -> list[TargetRow]:
    """The int8 issue's targets: swap per face float ÷ int8 in the same run and the quiet swap age
    (inswapper), the daily start's first frame and first swap (startup), and under load the swap
    age, the frames swapped, fps and p99 of the worst loaded int8 run (call)."""
    rows: list[TargetRow] = []
    floats, int8 = results.get("inswapper"), results.get("inswapper_int8")
    if int8 is not None:
        if floats is not None and int8["swap_model_ms_p50"] > 0:
            ratio = floats["swap_model_ms_p50"] / int8["swap_model_ms_p50"]
            rows.append(TargetRow("inswapper", f"swap per face, float ÷ int8 ({int8['ran']} ran), same run",
                                  f"{floats['swap_model_ms_p50']:.0f} ÷ {int8['swap_model_ms_p50']:.0f} ms = {ratio:.2f}×",
                                  f"≥ {TARGET_INT8_SPEEDUP:.1f}×", round(ratio / TARGET_INT8_SPEEDUP, 2), ratio >= TARGET_INT8_SPEEDUP))
        if (p95 := int8.get("swap_age_ms", {}).get("p95")) is not None:
            rows.append(upper("inswapper", f"swap age p95, int8 ({int8['ran']} ran), quiet", p95, TARGET_INT8_SWAP_AGE_P95_MS, " ms"))
    if (st := results.get("startup_int8")) is not None:
        for measure, key, limit in (("first frame", "first_frame", TARGET_FIRST_FRAME_MS), ("first swap", "first_swap", TARGET_INT8_FIRST_SWAP_MS)):
            value, label = st["startup_ms"][key], f"{measure} (daily start, int8: {st['ran']} ran), ms from process start"
            rows.append(TargetRow("startup", label, "n/a (never)", f"≤ {limit:.0f} ms", None, False) if value is None
                        else upper("startup", label, value, limit, " ms"))
    loaded = [r for r in (results.get("call") or {}).get("runs", []) if r.get("precision") == "int8" and r["load"] > 0]
    if loaded:
        of = f"int8, {loaded[0]['load']} busy, worst of {len(loaded)}"
        rows.append(upper("call", f"swap age p95 ({of})", max(r["swap_age_ms"]["p95"] for r in loaded), TARGET_INT8_SWAP_AGE_P95_MS, " ms"))
        shares = [r["swapped_after_first_swap"] for r in loaded]
        rows.append(lower_share("call", f"frames swapped after the first swap ({of})", None if None in shares else min(shares),
                                 TARGET_INT8_SWAPPED_AFTER_FIRST, "no swap in a run"))
        ratio = min(r["fps_ratio"] for r in loaded)
        rows.append(TargetRow("call", f"published / camera fps ({of})", f"{ratio:.2f}×", f"≥ {TARGET_FPS_RATIO:.2f}×",
                              round(ratio / TARGET_FPS_RATIO, 2), ratio >= TARGET_FPS_RATIO))
        rows.append(upper("call", f"capture→publish p99 ({of})", max(r["latency_p99_ms"] for r in loaded),
                           TARGET_P99_BUDGET_MS + 1000.0 / settings.fps, " ms"))
    return rows


def format_target_rows(rows: list[TargetRow], settings: BenchSettings) -> str:
    head = ["scenario", "measure", "figure", "target", "ratio", ""]
    body = [
        [r.scenario, r.measure, r.figure, r.target, "-" if r.ratio is None else f"{r.ratio:.2f}",
         "n/a" if r.met is None else ("met" if r.met else "NOT met")]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt_line: Callable[[Sequence[str]], str] = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    counted = f" (CPU from frame {CPU_FROM_FRAME})" if settings.frames > CPU_FROM_FRAME else ""
    title = (
        f"vcamd bench targets — @ {settings.fps:g} fps, {settings.frames} frames per run{counted}, "
        f"detector {Path(settings.detector).name}, providers {','.join(settings.providers)}"
    )
    return "\n".join([title, fmt_line(head), fmt_line(["-" * w for w in widths]), *(fmt_line(b) for b in body)])


def format_live_table(results: dict[str, dict[str, Any]], settings: BenchSettings) -> str:
    """One table: a row per measure, a column per scenario, and the target."""
    names = list(results)
    interval = 1000.0 / settings.fps
    rows: list[tuple[str, list[str], str]] = []

    def row(label: str, fmt: Callable[[dict[str, Any]], str], target: str = "") -> None:
        rows.append((label, [fmt(results[n]) for n in names], target))

    row("source fps", lambda r: f"{r['source_fps']:.1f}")
    row("published fps", lambda r: f"{r['published_fps']:.1f} ({r['fps_ratio']:.2f}×)", f"≥ {TARGET_FPS_RATIO:.2f}× source")
    row("capture→publish p50 ms", lambda r: f"{r['latency_ms']['p50']:.1f}")
    row("capture→publish p95 ms", lambda r: f"{r['latency_ms']['p95']:.1f}")
    row("capture→publish p99 ms", lambda r: f"{r['latency_ms']['p99']:.1f}", f"≤ {TARGET_P99_BUDGET_MS + interval:.1f}")
    row("overhead ms/frame", lambda r: f"{r['overhead_ms_per_frame']:.2f}", f"≤ {TARGET_OVERHEAD_MS:.0f}")
    row("CPU-ms/frame", lambda r: f"{r['cpu_ms_per_frame']:.1f}", f"≤ {TARGET_CPU_MS:.0f} (light)")
    row("frames swapped", lambda r: f"{100 * r['swapped_share']:.1f} %", f"≥ {100 * TARGET_SWAPPED:.0f} % (light)")
    row("swap model p50 ms", lambda r: f"{r['swap_model_ms_p50']:.1f}")
    row("swap age p50 / p95 ms", lambda r: "/".join(f"{r['swap_age_ms'][k]:.0f}" if r.get("swap_age_ms", {}).get(k) is not None else "-"
                                                       for k in ("p50", "p95")))
    row("swapper ran", lambda r: r.get("ran", "float"))
    row("detector ran", lambda r: r.get("detector_ran", "float"))
    row("detect/track p50 ms", lambda r: f"{r['detect_ms_p50']:.1f}")
    row("watchdog levels", lambda r: ", ".join(f"{k} {v:.0%}" for k, v in r["levels"].items()) or "-")
    row("providers", lambda r: ", ".join(sorted(set(r["stats"]["providers"].values()))) or "-")

    head = ["measure", *(name.replace("_", " ") for name in names), "target"]
    body = [[label, *cells, target] for label, cells, target in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt_line: Callable[[Sequence[str]], str] = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    title = (
        f"vcamd bench — {settings.width}×{settings.height} @ {settings.fps:g} fps, {settings.frames} frames "
        f"({settings.inswapper_frames} for inswapper), "
        f"detector {Path(settings.detector).name}, providers {','.join(settings.providers)}"
        f"{', fp16 swapper' if settings.fp16 else ''}"
        f"{f', watchdog pinned at {settings.quality}' if settings.quality else ''}"
    )
    lines = [title, fmt_line(head), fmt_line(["-" * w for w in widths]), *(fmt_line(b) for b in body)]
    return "\n".join(lines)


def cpu_columns(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Scenario (the resolution scenario's median pair: one column per size) → its stats'
    `cpu_ms_per_frame_by` and, under "process", the whole process's CPU-ms per frame; only the
    runs whose stats have the breakdown."""
    runs: dict[str, dict[str, Any]] = {}
    for name, result in results.items():
        if name == "resolution":
            runs |= {f"resolution {size}": run for size, run in result.get("runs", {}).items()}
        elif isinstance(result.get("stats"), dict):
            runs[name] = result
    return {name: run["stats"]["cpu_ms_per_frame_by"] | {"process": {"whole process": run["stats"]["cpu_ms_per_frame"]}}
            for name, run in runs.items() if "cpu_ms_per_frame_by" in run["stats"]}


def format_cpu_table(results: dict[str, dict[str, Any]]) -> str:
    """Where each scenario's CPU went: CPU-ms per published frame by thread, then by stage (a
    worker thread is one stage; the loop's stages are its own), the whole process last."""
    columns = cpu_columns(results)
    if not columns:
        return ""
    names = list(columns)
    head = ["CPU-ms per frame", *names]
    body: list[list[str]] = []
    for part, title in (("threads", "by thread"), ("stages", "by stage"), ("process", "")):
        keys = list(dict.fromkeys(k for name in names for k in columns[name][part]))
        if title:
            body.append([f"{title}:", *[""] * len(names)])
        for key in keys:
            body.append([f"  {key}" if title else key,
                         *(f"{columns[name][part][key]:.2f}" if key in columns[name][part] else "-" for name in names)])
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt_line: Callable[[Sequence[str]], str] = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt_line(head), fmt_line(["-" * w for w in widths]), *(fmt_line(b) for b in body)])


def format_call_table(call: dict[str, Any], settings: BenchSettings) -> str:
    """The call runs side by side, in the order run (quiet, loaded, quiet, …): a row per measure,
    the target of the loaded runs beside it."""
    runs = call["runs"]
    interval = 1000.0 / settings.fps

    def ms_s(value: float | None) -> str:
        return "never" if value is None else f"{value / 1000.0:.2f} s"

    def share(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.0f} %"

    rows: list[tuple[str, Callable[[dict[str, Any]], str], str]] = [
        ("frames swapped, after the first swap", lambda r: f"{share(r['swapped_after_first_swap'])} ({r['swapped_frames']}/{r['published']})",
         f"≥ {100 * TARGET_SWAPPED_AFTER_FIRST:.0f} %"),
        ("swap age p50 / p95", lambda r: f"{r['swap_age_ms']['p50'] / 1000:.2f} / {r['swap_age_ms']['p95'] / 1000:.2f} s",
         f"p95 ≤ {TARGET_SWAP_AGE_P95_MS / 1000:.1f} s"),
        ("first frame / first swap", lambda r: f"{ms_s(r['first_frame_ms'])} / {ms_s(r['first_swap_ms'])}",
         f"≤ {TARGET_CALL_FIRST_FRAME_MS / 1000:.0f} / {TARGET_CALL_FIRST_SWAP_MS / 1000:.0f} s"),
        ("published fps / p99", lambda r: f"{r['published_fps']:.1f} ({r['fps_ratio']:.2f}×) / {r['latency_p99_ms']:.0f} ms",
         f"≥ {TARGET_FPS_RATIO:.2f}× / ≤ {TARGET_P99_BUDGET_MS + interval:.0f} ms"),
        ("swap model p50", lambda r: f"{r['swap_model_ms_p50']:.0f} ms", ""),
        ("swapper ran", lambda r: r.get("ran", "float"), ""),
        ("watchdog levels", lambda r: ", ".join(f"{k} {v:.0%}" for k, v in r["levels"].items()) or "-", ""),
        ("load average before → after", lambda r: f"{r['loadavg'][0].split()[0]} → {r['loadavg'][1].split()[0]}", ""),
    ]
    head = ["measure", *(f"{_call_label(r['load'])} {r.get('precision', 'float')} #{r['round']}" for r in runs), "target (loaded)"]
    body = [[label, *(fmt(r) for r in runs), target] for label, fmt, target in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt_line: Callable[[Sequence[str]], str] = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    threads = call.get("threads", settings.threads)
    title = (
        f"vcamd bench call — `vcamd run` at {settings.width}×{settings.height} @ {settings.fps:g} fps, {settings.frames} frames a run, "
        f"swapper: light + {call['swap_convs']} heavy convolutions ({call['swap_ms']['measured']:.0f} ms a swap here, quiet; "
        f"--swap-ms {call['swap_ms']['asked']:g}), ONNX Runtime threads {threads}"
        f"{' (all cores)' if threads == 0 else ''}, busy processes at normal priority: {settings.load}"
    )
    return "\n".join([title, fmt_line(head), fmt_line(["-" * w for w in widths]), *(fmt_line(b) for b in body)])


def _call_label(load: int) -> str:
    return "quiet" if load == 0 else f"{load} busy"


def format_models_table(rows: list[dict[str, Any]], settings: BenchSettings) -> str:
    """`--swapper` / `--enhancer`: a row per model: its stand-in's size and compute, and the
    median time a face here (quiet, and under `--load` when asked)."""
    loaded = settings.load > 0
    header = ["model", "family", "params", "GMAC", "file", "ms/face quiet"] + ([f"ms/face, {settings.load} busy"] if loaded else []) + ["layer list"]
    table = [header]
    for r in rows:
        table.append([r["model"], r["family"], f"{r['params_m']:.1f} M", f"{r['gmac']:.1f}", f"{r['file_mb']:.0f} MB", f"{r['quiet_ms']:.0f}"]
                     + ([f"{r['loaded_ms']:.0f}"] if loaded else []) + [("estimate: " if r["estimate"] and not r["layers"].startswith("estimate") else "")
                                                                         + r["layers"]])
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths)) + "  " + line[-1] for line in table]
    threads = settings.threads
    lines.append(f"compute-equivalent stand-ins (random weights), one face, median of {max(1, settings.rounds)} runs after one; "
                 f"providers {','.join(settings.providers)}, ONNX Runtime threads {threads}{' (all cores)' if threads == 0 else ''}")
    return "\n".join(lines)


def remote_rows(r: dict[str, Any], settings: BenchSettings) -> list[Any]:
    """The issue's targets: the hop's cost, 50 ms of added round trip against local, the server killed."""
    scenario = f"remote, {r['load']} busy" if r.get("load") else "remote"

    rows = [upper(scenario, f"a swap through a loopback server − in-process, p50 ({r['swapper']})", r["hop"]["hop_ms"], TARGET_HOP_MS, " ms")]
    delay = r["delay"]
    if "skipped" in delay:
        rows.append(TargetRow(scenario, "50 ms added round trip", f"skipped: {delay['skipped']}", "", None, None))
    else:
        local = next(x for x in delay["rows"] if x["where"] == "local")
        far = next((x for x in delay["rows"] if x.get("added_rtt_ms") == TARGET_DELAY_RTT_MS and "skipped" not in x), None)
        if far is None:
            rows.append(TargetRow(scenario, "50 ms added round trip", "skipped", "", None, None))
        else:
            ratio = far["published_fps"] / local["published_fps"]
            via = delay["how"].split()[0]
            rows.append(TargetRow(scenario, f"+50 ms RTT ({via}): published fps ÷ local's", f"{far['published_fps']:.1f} ÷ {local['published_fps']:.1f} = {ratio:.2f}×",
                                  f"≥ {TARGET_FPS_RATIO:.2f}×", round(ratio / TARGET_FPS_RATIO, 2), ratio >= TARGET_FPS_RATIO))
            rows.append(upper(scenario, f"+50 ms RTT ({via}): capture→publish p99", far["latency_p99_ms"], TARGET_P99_BUDGET_MS + 1000.0 / settings.fps, " ms"))
            limit = local["swap_age_ms"]["p95"] + TARGET_SWAP_AGE_EXTRA_MS
            rows.append(upper(scenario, f"+50 ms RTT ({via}): swap age p95 (local {local['swap_age_ms']['p95']:.0f} + 60)", far["swap_age_ms"]["p95"], limit, " ms"))
    killed = r["killed"]
    if "skipped" in killed:
        rows.append(TargetRow(scenario, "server killed", f"skipped: {killed['skipped']}", "", None, None))
    else:
        raw = killed["raw_face_frames"]
        rows.append(TargetRow(scenario, f"server killed, back {killed['killed_s']:.1f} s later: frames with a raw face (of {killed['checked_frames']})",
                              str(raw), "= 0", None, raw == 0))
        rows.append(upper(scenario, "swapping again after the server's return", killed["swaps_back_s"], TARGET_BACK_S, " s"))
    return rows


def format_remote_table(r: dict[str, Any], settings: BenchSettings) -> str:
    """The measurements behind the rows: the hop, the daemons against one server, the added delay."""
    hop = r["hop"]
    load = f", {r['load']} busy processes throughout" if r.get("load") else ", quiet"
    lines = [f"remote{load}: one face, {r['swapper']} — in-process p50 {hop['local']['p50']:.2f} ms (p95 {hop['local']['p95']:.2f}), "
             f"through the loopback server p50 {hop['remote']['p50']:.2f} ms (p95 {hop['remote']['p95']:.2f}); same output: {hop['same_output']}; "
             f"inside Triton per request: {hop['server_side_ms']}"]
    for row in r["daemons"]["rows"]:
        runs = ", ".join("error" if "error" in x else f"{x['published_fps']:.1f} fps, swap age p95 {x['swap_age_ms']['p95']:.0f} ms"
                         for x in row["runs"])
        lines.append(f"  {row['daemons']} daemon(s) on one server: {runs}; server batches (size: count) {row['batches']}")
    delay = r["delay"]
    if "skipped" in delay:
        lines.append(f"  added delay: skipped ({delay['skipped']})")
    else:
        lines.append(f"  added delay through {delay['how']}:")
        for x in delay["rows"]:
            if "skipped" in x:
                lines.append(f"  +{x['added_rtt_ms']} ms: skipped ({x['skipped']})")
                continue
            where = "models here" if x["where"] == "local" else f"server, +{x['added_rtt_ms']} ms RTT (link's round trip {x.get('rtt_ms')} ms)"
            lines.append(f"  {where}: {x['published_fps']:.1f} fps, p99 {x['latency_p99_ms']:.1f} ms, swap age p50/p95 "
                         f"{x['swap_age_ms']['p50']:.0f}/{x['swap_age_ms']['p95']:.0f} ms, swapped after first {x['swapped_after_first_swap']}")
    k = r["killed"]
    if "skipped" not in k:
        lines.append(f"  server killed {k['killed_s']} s: frames {k['frames']}; swaps back {k['swaps_back_s']} s after it was ready")
    return "\n".join(lines)

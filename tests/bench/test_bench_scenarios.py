"""`vcamd bench`'s groups and resolution scenarios: the camera clip they play, the targets they
print (figure, target, ratio), and the refusals. The timed runs themselves are benchmarks, not tests."""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.cli import one_clear_line, run_vcamd

from vcamd.bench.clips import still_clip
from vcamd.bench.report import format_cpu_table, format_table, target_rows
from vcamd.bench.scenarios import median_pair
from vcamd.bench.settings import BenchSettings
from vcamd.cli import main


def _settings(assets: Path, **overrides) -> BenchSettings:
    values = dict(
        face=assets / "images" / "newton.png", detector=str(assets / "models" / "scrfd_2.5g_kps.onnx"),
        width=1280, height=720, fps=30.0, frames=300, inswapper_frames=900, providers=["cpu"], threads=1,
        fp16=False, group_photo=assets / "images" / "solvay_conference_1927.png",
    )
    values.update(overrides)
    return BenchSettings(**values)


def _groups_summary(**overrides) -> dict:
    summary = {
        "latency_ms": {"p50": 30.0, "p95": 60.0, "p99": 95.0},
        "fps_ratio": 0.71,
        "full_quality_share": 0.12,
        "every_face_share": 0.0,
        "face_share": None,
    }
    summary.update(overrides)
    return summary


def test_the_group_photo_plays_as_a_still_camera_with_all_29_faces(tmp_path: Path, assets: Path) -> None:
    from vcamd.faces.detect import FaceDetector
    from vcamd.files.images import read_image
    from vcamd.inference.runtime import Sessions
    from vcamd.live.capture.sources import VideoFileCamera

    settings = _settings(assets)
    clip = still_clip(read_image(settings.group_photo, "group photo"), settings, tmp_path, (1280, 720))
    camera = VideoFileCamera(clip, loop=False)
    camera.open()
    try:
        assert camera.frame_size == (1280, 720) and camera.fps == 30.0
        first, second = camera.read(), camera.read()
    finally:
        camera.close()
    assert first is not None and second is not None
    detector = FaceDetector(settings.detector, Sessions(["cpu"], 1))
    assert len(detector.detect(first)) == 29
    # a still camera: every frame of the clip (which the camera loops) the same pixels, the first
    # ones too (FFmpeg's MJPEG encoder changed them while its rate control settled)
    assert np.array_equal(first, second)
    cap = cv2.VideoCapture(str(clip))
    frames = []
    while (read := cap.read())[0]:
        frames.append(read[1])
    cap.release()
    assert len(frames) == 120
    assert all(np.array_equal(frames[0], frame) for frame in frames[1:])


def test_a_still_clip_with_sensor_noise_differs_in_every_frame_by_the_noise_only(tmp_path: Path, assets: Path) -> None:
    from vcamd.files.images import read_image

    def decoded(clip: Path) -> list[np.ndarray]:
        cap = cv2.VideoCapture(str(clip))
        frames = []
        while (read := cap.read())[0]:
            frames.append(read[1].astype(np.float64))
        cap.release()
        return frames

    settings = _settings(assets)
    photo = read_image(settings.group_photo, "group photo")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    clip = still_clip(photo, settings, tmp_path / "a", (640, 360), noise=2.0)
    assert clip.read_bytes() == still_clip(photo, settings, tmp_path / "b", (640, 360), noise=2.0).read_bytes()  # seeded
    frames, (clean, *_) = decoded(clip), decoded(still_clip(photo, settings, tmp_path, (640, 360)))
    assert len(frames) == 120
    for a, b in zip(frames, frames[1:]):
        assert 1.5 < np.std(a - b) / np.sqrt(2) < 3.0  # each frame its own noise, about 2 levels
        assert abs(np.mean(a - clean)) < 0.2  # around the noiseless picture: noise, nothing else


def test_groups_targets_print_figure_target_ratio(assets: Path) -> None:
    rows = target_rows({"groups": _groups_summary()}, _settings(assets))
    by_measure = {r.measure: r for r in rows}
    p99 = by_measure["capture→publish p99"]
    assert p99.target == "≤ 40.0 ms" and p99.ratio == pytest.approx(95.0 / 40.0, abs=0.01) and p99.met is False
    fps = by_measure["published / camera fps"]
    assert fps.figure == "0.71×" and fps.ratio == pytest.approx(0.71 / 0.95, abs=0.01) and not fps.met
    assert by_measure["time at full quality"].figure == "12.0 %" and not by_measure["time at full quality"].met
    per_face = by_measure["faces swapped or held (per face)"]
    assert per_face.met is None and "needs faces.{swapped,held,obscured}" in per_face.figure

    met = target_rows({"groups": _groups_summary(latency_ms={"p99": 38.0}, fps_ratio=1.0, full_quality_share=0.95,
                                                 every_face_share=0.97, face_share=0.99)}, _settings(assets))
    assert all(r.met for r in met)
    short = target_rows({"groups": _groups_summary(latency_ms={"p99": 38.0}, fps_ratio=1.0, full_quality_share=0.94,
                                                   every_face_share=0.97, face_share=0.99)}, _settings(assets))
    assert [r.measure for r in short if not r.met] == ["time at full quality"]  # 29 faces: ≥ 95 % at full


def test_crowd_targets_are_the_cameras_rate_a_p99_within_budget_and_full_quality(assets: Path) -> None:
    rows = {r.measure: r for r in target_rows({"crowd": _groups_summary(latency_ms={"p99": 70.0}, fps_ratio=0.96,
                                                                          full_quality_share=0.9, every_face_share=0.97,
                                                                          face_share=0.99)}, _settings(assets))}
    assert rows["capture→publish p99"].target == "≤ 73.3 ms" and rows["capture→publish p99"].met
    assert rows["published / camera fps"].met and rows["time at full quality"].target == "≥ 90 %"
    assert all(r.scenario == "crowd" and r.met for r in rows.values())


def test_the_cpu_table_has_a_row_per_thread_and_stage_and_the_whole_process(assets: Path) -> None:
    by = {"threads": {"loop": 3.0, "full-detector": 5.0, "other threads": 0.5},
          "stages": {"loop: composite": 2.0, "loop: between frames": 1.0, "full detection": 5.0, "other threads": 0.5}}
    light = {"stats": {"cpu_ms_per_frame": 8.5, "cpu_ms_per_frame_by": by}}
    crowd = {"stats": {"cpu_ms_per_frame": 40.0, "cpu_ms_per_frame_by": {"threads": {"loop": 20.0}, "stages": {}}}}
    resolution = {"runs": {"480p": light, "1080p": light}}
    text = format_cpu_table({"light": light, "crowd": crowd, "resolution": resolution, "startup": {"startup_ms": {}}})
    lines = text.splitlines()
    assert lines[0].split() == ["CPU-ms", "per", "frame", "light", "crowd", "resolution", "480p", "resolution", "1080p"]
    rows = {line.rsplit(maxsplit=4)[0].strip(): line.split() for line in lines[2:] if not line.strip().endswith(":")}
    assert rows["loop"][-4:] == ["3.00", "20.00", "3.00", "3.00"]
    assert rows["full-detector"][-4:] == ["5.00", "-", "5.00", "5.00"]  # a thread one scenario lacks
    assert rows["loop: composite"][-4:] == ["2.00", "-", "2.00", "2.00"]
    assert rows["whole process"][-4:] == ["8.50", "40.00", "8.50", "8.50"]
    assert [line.strip() for line in lines if line.strip().endswith(":")] == ["by thread:", "by stage:"]
    assert format_cpu_table({"startup": {"startup_ms": {}}}) == ""  # no run with the breakdown: no table
    table = format_table({"groups": _groups_summary()}, _settings(assets))
    assert "NOT met" in table and "n/a" in table and "ratio" in table.splitlines()[1]


def test_resolution_target_is_the_cpu_ratio(assets: Path) -> None:
    result = {"quality": "full", "cpu_ms_480p": 12.0, "cpu_ms_1080p": 18.0, "cpu_ratio": 1.5}
    (row,) = target_rows({"resolution": result}, _settings(assets))
    assert row.figure == "18.0 ÷ 12.0 = 1.50×" and row.target == "≤ 1.3×"
    assert row.ratio == pytest.approx(1.5 / 1.3, abs=0.01) and row.met is False
    # With the camera's share measured, a second row counts what grows apart from it — never a target.
    counted = result | {"camera_cpu_ms_480p": 1.0, "camera_cpu_ms_1080p": 5.0, "own_cpu_ratio": 13.0 / 11.0}
    target, rest = target_rows({"resolution": counted}, _settings(assets))
    assert target == row
    assert "1.0 → 5.0" in rest.measure and rest.figure == "13.0 ÷ 11.0 = 1.18×" and rest.met is None and rest.ratio is None


def test_the_resolution_figure_is_the_pair_with_the_median_ratio_and_every_pair_is_shown(assets: Path) -> None:
    def pair(low: float, high: float) -> dict:
        return {"quality": "full", "cpu_ms_480p": low, "cpu_ms_1080p": high, "cpu_ratio": round(high / low, 3)}

    pairs = [pair(10.0, 14.3), pair(10.0, 12.6), pair(9.0, 12.6), pair(10.0, 13.0)]  # 1.43, 1.26, 1.40, 1.30
    median = median_pair(pairs)
    # The lower middle of an even count, as a whole pair: its own two figures, not medians of each.
    assert (median["cpu_ms_480p"], median["cpu_ms_1080p"]) == (10.0, 13.0)
    assert median["round_ratios"] == [1.43, 1.26, 1.4, 1.3]
    assert (median_pair(pairs[:3])["cpu_ms_480p"], median_pair(pairs[:3])["cpu_ms_1080p"]) == (9.0, 12.6)
    (row,) = target_rows({"resolution": median}, _settings(assets))
    assert row.figure == "13.0 ÷ 10.0 = 1.30×" and row.met is True
    assert "median of 4 pairs: 1.43, 1.26, 1.40, 1.30" in row.measure
    (single,) = target_rows({"resolution": median_pair(pairs[:1])}, _settings(assets))
    assert "median" not in single.measure and single.met is False


def test_unknown_scenario_and_missing_group_photo_are_refused(assets: Path, tmp_path: Path, capsys) -> None:
    face = str(assets / "images" / "newton.png")
    assert main(["bench", "--face", face, "--scenarios", "crowds"]) == 2
    err = capsys.readouterr().err
    assert "crowds" in err and "groups" in err and err.count("\n") == 1
    assert main(["bench", "--face", face, "--scenarios", "groups", "--group-photo", str(tmp_path / "none.png")]) == 2
    err = capsys.readouterr().err
    assert "none.png" in err and "--group-photo" in err


def test_one_face_cpu_target_only_counts_at_full_quality(assets: Path) -> None:
    light = {"levels": {"full": 1.0}, "cpu_ms_per_frame": 15.3}
    (row,) = target_rows({"light": light}, _settings(assets))
    assert row.figure == "15.3" and row.target == "≤ 9" and row.ratio == pytest.approx(1.7, abs=0.01) and row.met is False
    degraded = {"levels": {"full": 0.2, "frame_skip": 0.8}, "cpu_ms_per_frame": 9.7}
    (row,) = target_rows({"light": degraded}, _settings(assets))
    assert row.met is None and "--quality full" in row.figure  # less work per frame is not a cheaper loop


def test_startup_targets_are_first_frame_and_first_swap_from_the_process_start(assets: Path) -> None:
    rows = target_rows({"startup": {"startup_ms": {"first_frame": 250.0, "first_swap": 4500.0}}}, _settings(assets))
    first_frame, first_swap = rows
    assert first_frame.figure == "250.0 ms" and first_frame.target == "≤ 500.0 ms" and first_frame.ratio == 0.5 and first_frame.met
    assert first_swap.figure == "4500.0 ms" and first_swap.ratio == 1.5 and first_swap.met is False
    (_, never) = target_rows({"startup": {"startup_ms": {"first_frame": 250.0, "first_swap": None}}}, _settings(assets))
    assert never.figure.startswith("n/a") and never.met is False


def test_startup_rows_for_the_first_and_the_next_start_and_the_threads_said(assets: Path) -> None:
    startup = {"startup_ms": {"first_frame": 300.0, "first_swap": 2900.0}, "first_start_ms": {"first_frame": 450.0, "first_swap": 5200.0},
               "threads": 0}
    rows = target_rows({"startup": startup}, _settings(assets, threads=0))
    assert [(r.measure.split(",")[0], r.met) for r in rows] == [
        ("first frame (next start)", True), ("first swap (next start)", True),
        ("first frame (first start)", True), ("first swap (first start)", False),
    ]
    text = format_table({"startup": startup}, _settings(assets, threads=0))
    assert "ONNX Runtime threads 0 (all cores)" in text and "started twice" in text


def test_the_startup_scenario_writes_a_config_vcamd_run_reads_back() -> None:
    import tomllib

    from vcamd.bench.runs import _toml
    from vcamd.config.reading import config_from_dict
    from vcamd.config.schema import Config

    cfg = config_from_dict({"models": {"providers": ["cpu"], "threads": 1}, "swap": {"source_face": "/tmp/a \"quoted\" face.png"}}, "test")
    assert config_from_dict(tomllib.loads(_toml(cfg.model_dump(mode="json", exclude_none=True))), "test") == cfg
    assert cfg != Config()


def test_bench_refuses_frame_rates_and_counts_it_cannot_measure(assets):
    face = assets / "images" / "newton.png"
    base = ("bench", "--face", face, "--scenarios", "light", "--frames", "30")
    for bad, flag in ((("--fps", "0"), "--fps"), (("--fps", "nan"), "--fps"), (("--fps", "1e9"), "--fps"),
                      (("--scenarios", "inswapper", "--inswapper-frames", "0"), "--inswapper-frames"),
                      (("--threads", "-2"), "--threads"), (("--scenarios", "resolution", "--rounds", "0"), "--rounds"),
                      (("--scenarios", "call", "--rounds", "0"), "--rounds"), (("--load", "-1"), "--load"),
                      (("--swap-ms", "0"), "--swap-ms"), (("--swap-ms", "nan"), "--swap-ms")):
        one_clear_line(run_vcamd(*base, *bad, timeout=30), flag)


def test_bench_refuses_a_json_path_it_could_only_fail_to_write_at_the_end(tmp_path, assets):
    folder = tmp_path / "results"
    folder.mkdir()
    proc = run_vcamd("bench", "--face", assets / "images" / "newton.png", "--scenarios", "light", "--json", folder, timeout=30)
    one_clear_line(proc, str(folder), "--json")


def test_the_bench_keeps_optimised_graphs_in_its_own_folder(tmp_path, monkeypatch) -> None:
    from vcamd.bench.scenarios import _cache_dir
    from vcamd.inference import ortcache

    monkeypatch.delenv("VCAMD_CACHE_DIR", raising=False)
    users = ortcache.cache_dir()
    with _cache_dir(tmp_path / "optimized"):
        assert ortcache.cache_dir() == tmp_path / "optimized"
    assert ortcache.cache_dir() == users


# ---- the call scenario under load ---------------------------------------------------------------


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a killed child nobody waited for)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_busy_processes_run_the_busy_loop_and_are_gone_after_the_block_even_when_it_fails() -> None:
    from vcamd.bench.runs import busy_processes

    with busy_processes(2) as pids:
        assert len(set(pids)) == 2
        for pid in pids:
            assert _running(pid)
            assert b"while 1: pass" in Path(f"/proc/{pid}/cmdline").read_bytes()
            assert os.getpgid(pid) == pid  # each leads its own group: the group is what is killed
    assert not any(_running(pid) for pid in pids)
    with pytest.raises(RuntimeError), busy_processes(1) as failed:
        raise RuntimeError("the run failed")
    assert failed and not _running(failed[0])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_bench_call_with_load_prints_quiet_and_loaded_runs_side_by_side_and_leaves_no_busy_process(tmp_path, assets) -> None:
    import json

    out = tmp_path / "call.json"
    # Paths as a user types them, relative to where vcamd runs: the runs' configs are written in a
    # temporary folder, where a relative detector path used to name no file.
    here = Path(os.path.relpath(assets))
    assert not here.is_absolute()
    proc = run_vcamd("bench", "--face", here / "images" / "newton.png", "--detector", here / "models" / "scrfd_500m_kps.onnx",
                     "--providers", "cpu", "--scenarios", "call", "--load", "1", "--rounds", "1", "--frames", "30",
                     "--resolution", "480p", "--swap-ms", "40", "--json", out, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    head = next(line for line in proc.stdout.splitlines() if line.startswith("measure"))
    # Interleaved: float and int8 side by side, quiet then loaded.
    assert head.index("quiet float #1") < head.index("quiet int8 #1") < head.index("1 busy float #1") < head.index("1 busy int8 #1")
    for measure in ("swap age p50 / p95", "first frame / first swap", "published fps / p99", "load average before → after"):
        assert any(line.startswith(measure) for line in proc.stdout.splitlines()), proc.stdout
    call = json.loads(out.read_text())["results"]["call"]
    assert [(run["load"], run["precision"]) for run in call["runs"]] == [(0, "float"), (0, "int8"), (1, "float"), (1, "int8")]
    # What each run's swapper really ran at (a short loaded run may end before the models are in).
    assert all(run["ran"] in (run["precision"], "not loaded") for run in call["runs"]) and call["int8_copy"]["passed"]
    assert "int8 copy of swapper_call" in proc.stdout
    assert all(run["published"] == 30 and run["first_frame_ms"] is not None for run in call["runs"])
    assert len(call["load_pids"]) == 2 and not any(_running(pid) for pid in call["load_pids"])
    # The swapper was built to the asked cost on this machine, and says what it measured.
    assert call["swap_convs"] >= 1 and call["swap_ms"]["asked"] == 40 and call["swap_ms"]["measured"] > 0
    assert f"{call['swap_convs']} heavy convolutions" in proc.stdout and "--swap-ms 40" in proc.stdout


def test_the_call_swapper_gets_as_many_convolutions_as_make_the_asked_cost_here(tmp_path) -> None:
    """`build_call_swapper` from what the light swap and the probe cost (a model's time here from
    its number of heavy convolutions: 2 ms + 30 ms each, as if measured), then the built one timed."""
    import re

    from vcamd.bench.callswapper import MAX_CONVS, PROBE_CONVS, build_call_swapper, convs_for

    def time_model(path: Path) -> float:
        return 2.0 + 30.0 * int(re.search(r"swapper_call(\d+)", path.name).group(1))

    built = build_call_swapper(tmp_path, 370.0, ["cpu"], 1, time_model=time_model)
    assert built.convs == 12 and built.path.name == "swapper_call12.onnx" and built.path.is_file()
    assert built.measured_ms == 362.0 and built.target_ms == 370.0
    assert (tmp_path / f"swapper_call{PROBE_CONVS}.onnx").is_file()
    # A probe that says 30 ms a convolution where many cost 25 each: refined from the built one.
    def uneven(path: Path) -> float:
        n = int(re.search(r"swapper_call(\d+)", path.name).group(1))
        return 2.0 + (30.0 if n <= PROBE_CONVS else 25.0) * n

    refined = build_call_swapper(tmp_path, 370.0, ["cpu"], 1, time_model=uneven)
    assert refined.convs == 15 and refined.measured_ms == 377.0 and refined.path.name == "swapper_call15.onnx"
    assert convs_for(370.0, 2.0, 0.0) == MAX_CONVS  # a device where the probe costs nothing more
    assert convs_for(10.0, 20.0, 5.0) == 1 and convs_for(1e6, 1.0, 1.0) == MAX_CONVS


def test_a_call_row_names_a_change_of_faces_per_round_apart_from_a_rung_change(assets) -> None:
    from vcamd.bench.runs import call_row
    from vcamd.config.schema import WatchdogConfig
    from vcamd.live.measures.watchdog import Watchdog

    now = [0.0]
    dog = Watchdog(WatchdogConfig(), lambda: now[0])
    for _ in range(120):  # on time, two faces 4 s old: the enhancer off, then one face per round
        now[0] += 1 / 30
        dog.observe(12.0, swap_age_ms=4000.0, faces_to_swap=2)
    stats = {"frames": {"published": 120, "swapped": 100}, "swap_age_ms": {}, "startup_ms": {"first_frame": 1.0, "first_swap": 2.0},
             "fps": {"published": 30.0}, "latency_ms": {"p99": 20.0}, "stages_ms": {},
             "degradation": {"level_share": {}, "transitions": dog.history()}, "command": "vcamd run"}
    row = call_row(stats, _settings(assets))
    assert row["transitions"] == ["full→no_enhancer (swap_age)", "faces per round all→1 (swap_age)"]


# ---- float and int8 side by side ------------------------------------------------------------------


def _live(swap_ms: float, ran: str, p95: float) -> dict:
    return {"swap_model_ms_p50": swap_ms, "ran": ran, "swap_age_ms": {"p50": p95 / 2, "p95": p95}}


def test_int8_targets_are_the_swap_per_face_ratio_in_one_run_the_swap_age_and_the_daily_start(assets: Path) -> None:
    results = {
        "inswapper": _live(1620.0, "float", 2900.0), "inswapper_int8": _live(470.0, "int8", 940.0),
        "startup_int8": {"startup_ms": {"first_frame": 410.0, "first_swap": 1620.0}, "first_start_ms": {"first_frame": 500.0, "first_swap": 2000.0},
                         "ran": "int8", "threads": 0},
    }
    rows = [r for r in target_rows(results, _settings(assets)) if "int8" in r.measure]
    ratio, age, first_frame, first_swap = rows
    assert ratio.figure == "1620 ÷ 470 ms = 3.45×" and ratio.target == "≥ 3.0×" and ratio.met
    assert age.figure == "940.0 ms" and age.target == "≤ 1000.0 ms" and age.met
    assert first_frame.met and first_swap.figure == "1620.0 ms" and first_swap.target == "≤ 1500.0 ms" and first_swap.met is False
    assert "daily start" in first_swap.measure
    slow = target_rows({"inswapper": _live(1600.0, "float", 2900.0), "inswapper_int8": _live(800.0, "float", 2000.0)}, _settings(assets))
    assert slow[0].met is False and "(float ran)" in slow[0].measure  # a copy that did not run is said, never counted as int8


def test_the_call_int8_targets_take_the_worst_loaded_int8_run(assets: Path) -> None:
    def run(precision: str, load: int, p95: float, share: float) -> dict:
        return {"precision": precision, "load": load, "round": 1, "swap_age_ms": {"p50": p95 / 2, "p95": p95},
                "swapped_after_first_swap": share, "fps_ratio": 0.99, "latency_p99_ms": 40.0}

    runs = [run("float", 0, 700.0, 0.99), run("int8", 0, 300.0, 0.99), run("float", 2, 1700.0, 0.9), run("int8", 2, 800.0, 0.97),
            run("int8", 2, 1100.0, 0.96)]
    rows = target_rows({"call": {"runs": runs}}, _settings(assets))
    age, swapped, fps, p99 = rows
    assert age.figure == "1100.0 ms" and age.met is False and "int8, 2 busy, worst of 2" in age.measure
    assert swapped.figure == "96.0 %" and swapped.met and fps.met and p99.met


def test_the_int8_copy_is_said_once_with_its_check(assets: Path) -> None:
    copy = {"model": "swapper_inswapper.onnx", "passed": True, "summary": "8 faces: PSNR ≥ 50.1 dB (needs 35)", "build_s": 61.0,
            "faces": 8, "units": "avx512_vnni", "recipe": "every Conv/MatMul/Gemm in int8", "float_ms": 1610.0, "int8_ms": 480.0}
    live = {"source_fps": 30.0, "published_fps": 30.0, "fps_ratio": 1.0, "latency_ms": {"p50": 10.0, "p95": 15.0, "p99": 20.0},
            "overhead_ms_per_frame": 2.0, "cpu_ms_per_frame": 50.0, "swapped_share": 0.9, "swap_model_ms_p50": 1600.0, "detect_ms_p50": 9.0,
            "levels": {"full": 1.0}, "stats": {"providers": {"a.onnx": "CPUExecutionProvider"}}, "swap_age_ms": {"p50": 1900.0, "p95": 2800.0}}
    text = format_table({"inswapper": live | {"ran": "float"}, "inswapper_int8": live | {"ran": "int8", "int8_copy": copy},
                         "startup_int8": {"startup_ms": {"first_frame": 1.0, "first_swap": 2.0}, "ran": "int8", "int8_copy": copy}},
                        _settings(assets))
    assert text.count("int8 copy of swapper_inswapper.onnx") == 1 and "avx512_vnni): passed: 8 faces" in text
    head = next(line for line in text.splitlines() if line.startswith("measure"))
    assert head.index("inswapper") < head.index("inswapper int8")
    assert any(line.startswith("swapper ran") and "float" in line and "int8" in line for line in text.splitlines())


def test_groups_without_a_group_photo_tiles_the_face_into_29(tmp_path: Path, assets: Path) -> None:
    """A newcomer has no group photo beside their face photo (issue 42): the scenario plays 29
    copies of --face instead of refusing, and the real detector finds them."""
    from vcamd.bench.clips import tiled_group
    from vcamd.bench.settings import GROUP_FACES
    from vcamd.faces.detect import FaceDetector
    from vcamd.files.images import read_image
    from vcamd.inference.runtime import Sessions
    from vcamd.live.capture.sources import VideoFileCamera

    settings = _settings(assets, group_photo=None)
    crowd = tiled_group(read_image(settings.face, "bench face"), GROUP_FACES, (1280, 720))
    clip = still_clip(crowd, settings, tmp_path, (1280, 720))
    camera = VideoFileCamera(clip, loop=False)
    camera.open()
    try:
        first = camera.read()
    finally:
        camera.close()
    faces = FaceDetector(settings.detector, Sessions(["cpu"], 1)).detect(first)
    assert len(faces) == GROUP_FACES == 29


def test_a_bad_detector_is_blamed_on_where_it_came_from(assets: Path, tmp_path: Path, capsys) -> None:
    """`--detector` typed wrong said "[models] detector" (issue 42): the flag is named now, and
    the config's own detector, when it is the bad one, is named as such with the flag as a way out."""
    face = str(assets / "images" / "newton.png")
    assert main(["bench", "--face", face, "--detector", str(tmp_path / "nothere.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vcamd: error: --detector {tmp_path / 'nothere.onnx'}: no such file") and "[models]" not in err
    assert main(["bench", "--face", face, "--detector", str(assets / "models" / "mobilefacenet.onnx")]) == 2
    err = capsys.readouterr().err
    assert "--detector" in err and "not an SCRFD detector" in err and "[models] detector" not in err
    config = tmp_path / "config.toml"
    config.write_text(f'[models]\ndir = "{tmp_path / "models"}"\n', encoding="utf-8")
    assert main(["bench", "--config", str(config), "--face", face]) == 2
    err = capsys.readouterr().err
    assert "det_10g.onnx (buffalo_l, the detector) is missing" in err and "vcamd models pull buffalo_l" in err
    assert "copy it in by hand" in err and "or pass --detector PATH.onnx" in err


def test_a_failed_vcamd_run_prints_the_command_to_run_by_hand_and_keeps_its_files(tmp_path: Path, assets: Path) -> None:
    """`--scenarios startup` failed with "run the same vcamd run by hand" and no command (issue
    42); now the error holds the exact command, and the bench's folder stays for it."""
    import subprocess

    from vcamd.bench.clips import sliding_clip
    from vcamd.bench.runs import RunFailed, run_vcamd, scenario_config
    from vcamd.bench.scenarios import _bench_folder
    from vcamd.config.schema import Config
    from vcamd.files.images import read_image

    settings = _settings(assets, frames=0)  # `vcamd run --frames 0` refuses: a failure to reproduce
    with pytest.raises(RunFailed) as failed, _bench_folder() as folder:
        cfg = scenario_config("light", settings, folder, Config())
        clip = sliding_clip(read_image(settings.face, "face"), settings, folder, (320, 240))
        run_vcamd(cfg, settings, clip, folder, "startup")
    assert "--frames 0: must be a positive number of frames" in str(failed.value)
    command = failed.value.fix.removeprefix("run it by hand to see all it says: ").split(" — ")[0]
    assert folder.is_dir() and str(folder) in failed.value.fix  # kept for the command
    by_hand = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    assert by_hand.returncode == 2 and "--frames 0: must be a positive number of frames" in by_hand.stderr
    import shutil

    shutil.rmtree(folder)
    with _bench_folder() as gone:
        pass
    assert not gone.exists()  # removed when nothing failed


# ---- the live rows at the product's default precision ----------------------------------------------


def test_the_live_rows_get_the_int8_copies_a_first_start_would_build_and_then_run_them(tmp_path, assets, monkeypatch) -> None:
    """`prepare_auto_copies` builds exactly what `vcamd run` at precision "auto" would build at its
    first start (its `role_choice` says so): on a CPU with int8 units the detector's and the
    swapper's copies, after which the daemon's own choice follows each copy's check and nothing is
    built again; without them nothing, and the choice says why float runs."""
    from vcamd.bench.clips import sliding_clip
    from vcamd.bench.runs import scenario_config
    from vcamd.bench.scenarios import LIVE_PRECISION, prepare_auto_copies
    from vcamd.config.schema import Config
    from vcamd.inference.precision import int8_units, role_choice
    from vcamd.models.int8detector import looks_for

    monkeypatch.setenv("VCAMD_CACHE_DIR", str(tmp_path / "cache"))
    settings = _settings(assets, detector=str(assets / "models" / "scrfd_500m_kps.onnx"), width=640, height=480)
    cfg = scenario_config("light", settings, tmp_path, Config(), precision=LIVE_PRECISION)
    clip = sliding_clip(cv2.imread(str(settings.face)), settings, tmp_path, (settings.width, settings.height))

    def choices():
        return (role_choice("detector", cfg.models.precision, Path(cfg.models.detector), ["CPUExecutionProvider"], looks=looks_for(cfg)),
                role_choice("swapper", cfg.models.precision, Path(cfg.models.swapper), ["CPUExecutionProvider"]))

    built = prepare_auto_copies(cfg, settings, clip, tmp_path, Config())
    if not int8_units().present:
        assert built == {}
        assert all(c.runs == "float" and "int8 dot-product" in (c.why or "") for c in choices())
        return
    assert set(built) == {"detector", "swapper"}, built
    # Each copy checked, and the daemon's choice follows its check (whether a copy passes is the
    # check's: a loaded machine may find the small detector's copy not faster, and float stays).
    for role, choice in zip(("detector", "swapper"), choices(), strict=True):
        assert not choice.build and choice.verdict is not None, (role, choice)
        assert choice.verdict.passed == built[role]["passed"], (role, choice)
        assert choice.runs == ("int8" if choice.verdict.passed else "float") and (choice.copy is not None) == choice.verdict.passed
    assert prepare_auto_copies(cfg, settings, clip, tmp_path, Config()) == {}  # kept: a second start builds nothing

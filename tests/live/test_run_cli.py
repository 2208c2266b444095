"""`vcamd run` as a user runs it: a real subprocess, a video file as the camera, the file sink."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import tomli_w
from support.cli import one_clear_line, run_vcamd
from support.video import read_video


def write_config(path, cfg) -> None:
    path.write_text(tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True)), encoding="utf-8")


def vcamd(*args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcamd", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_run_publishes_n_frames_to_a_file_and_writes_the_stats(tmp_path, live_config, clip_20fps):
    config = tmp_path / "config.toml"
    write_config(config, live_config())
    out, stats_path = tmp_path / "out.mp4", tmp_path / "stats.json"
    proc = vcamd("run", "--config", config, "--source", clip_20fps, "--loop", "--sink", f"file:{out}",
                 "--frames", 30, "--stats-json", stats_path, "--no-tray")
    assert proc.returncode == 0, proc.stderr
    assert "published 30 frames" in proc.stdout
    stats = json.loads(stats_path.read_text())
    assert set(stats) >= {"frames", "fps", "latency_ms", "stages_ms", "degradation", "queue_depth", "providers", "cpu_ms_per_frame"}
    assert set(stats["frames"]) >= {"captured", "processed", "published", "dropped", "swapped", "held", "blurred", "passthrough"}
    assert stats["frames"]["published"] == 30 and stats["frames"]["passthrough"] == 0
    assert set(stats["latency_ms"]) == {"p50", "p95", "p99"}
    assert set(stats["degradation"]) == {"transitions", "level_share"}
    # [models] threads = 1 leaves the loop a core anyway: the swap model is never moved.
    assert stats["swapper_cores"] == {"loop_core": None, "swapper_cores": None, "worker_cores": None, "every_core_now": False, "every_core_s": 0.0, "changes": 0}
    # The providers really in use, once the models are in. On a busy machine the 30 frames (1.5 s)
    # may all go out covered while the models still load: then none is in use, and none is claimed.
    providers = stats["providers"]
    assert "CPUExecutionProvider" in providers.values() or (providers == {} and stats["startup_ms"]["first_swap"] is None), stats
    frames = read_video(out)
    assert len(frames) == 30
    # The disclosure badge sits in the bottom-right corner of swapped frames: the raw clip has
    # flat grey there.
    corner = frames[-1][-40:, -160:].astype(np.int16)
    assert np.abs(corner - 110).max() > 60


def test_run_without_consent_starts_with_swapping_off_and_says_why(tmp_path, live_config, clip_20fps):
    """Before issue 42 `vcamd run` refused to start without consent; it runs now, swapping off,
    and says what to do — consent in the config, or on the command line."""
    config = tmp_path / "config.toml"
    write_config(config, live_config(swap={"source_consent": False}))
    proc = vcamd("run", "--config", config, "--source", clip_20fps, "--sink", "null", "--frames", 5, "--no-tray")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "no consent for the source face yet" in proc.stderr and "--i-have-consent" in proc.stderr
    assert "swapped 0," in proc.stdout and "swapping off " in proc.stdout
    # ... and swaps from the start once the user confirms it on the command line.
    stats_path = tmp_path / "stats.json"
    proc = vcamd("run", "--config", config, "--source", clip_20fps, "--sink", "null", "--frames", 5, "--no-tray",
                 "--i-have-consent", "--stats-json", stats_path)
    assert proc.returncode == 0, proc.stderr
    assert "no consent" not in proc.stderr
    assert json.loads(stats_path.read_text())["frames"]["off"] == 0


def test_run_without_models_face_or_consent_shows_the_plumbing(tmp_path):
    """A newcomer's first `vcamd run`: no models pulled, no face, no consent, no webcam. The
    synthetic camera goes to the output file with swapping off, and the log says each of the three
    missing pieces with its fix (the models with both ways to get them)."""
    config = tmp_path / "config.toml"
    config.write_text('[models]\ndir = "models"\n', encoding="utf-8")
    out = tmp_path / "out.mp4"
    proc = vcamd("run", "--config", config, "--source", "synthetic", "--sink", f"file:{out}", "--frames", 30, "--no-tray")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "published 30 frames" in proc.stdout and "swapped 0," in proc.stdout
    needs = proc.stderr[proc.stderr.index("to switch it on, it needs:"):]
    assert "3 model files missing" in needs and "`vcamd models pull buffalo_l inswapper_128_fp16`" in needs
    assert "copy them in by hand: `vcamd models list` says where each file comes from and where it goes" in needs
    assert "no consent for the source face yet" in needs and "no source face is set" in needs
    frames = read_video(out)
    assert len(frames) == 30


def test_run_names_a_bad_source(tmp_path, live_config):
    config = tmp_path / "config.toml"
    write_config(config, live_config())
    proc = vcamd("run", "--config", config, "--source", tmp_path / "missing.mp4", "--sink", "null", "--frames", 5)
    assert proc.returncode == 2
    assert "missing.mp4" in proc.stderr and "--source" in proc.stderr and "Traceback" not in proc.stderr


def test_run_says_when_the_models_do_not_fit_under_the_memory_cap(tmp_path, live_config, clip_20fps):
    # A sparse 30 GB "swapper" costs no disk: the check reads the file size before loading anything.
    huge = tmp_path / "inswapper_128.onnx"
    with huge.open("wb") as f:
        f.truncate(30 * 1024**3)
    config = tmp_path / "config.toml"
    write_config(config, live_config(models={"swapper": str(huge)}, runtime={"max_memory_gb": 20}))
    proc = vcamd("run", "--config", config, "--source", clip_20fps, "--sink", "null", "--frames", 5, "--no-tray")
    assert proc.returncode == 2, proc.stderr
    assert "max_memory_gb = 20" in proc.stderr and "inswapper_128.onnx" in proc.stderr and "fp16" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_with_a_folder_as_stats_json_fails_before_the_run(tmp_path):
    # Found out only after the run (a traceback, the stats lost) before the fix.
    folder = tmp_path / "stats"
    folder.mkdir()
    proc = run_vcamd("run", "--stats-json", folder, "--sink", "null", "--source", "synthetic", "--no-tray",
                 "--frames", "1", "--i-have-consent")
    one_clear_line(proc, str(folder), "--stats-json")

"""`vcamd models ...` as a real subprocess, downloading from a real server through `[models] mirror`."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
from support.cli import one_clear_line, run_vcamd

GFPGAN_PATH = "/facefusion/models-3.0.0/resolve/main/gfpgan_1.3.onnx"
FP16_PATH = "/hacksider/deep-live-cam/resolve/main/inswapper_128_fp16.onnx"


@pytest.fixture
def config_file(tmp_path, file_server) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[models]\ndir = "models"\nmirror = "{file_server.base}"\n')
    return path


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock")) if folder.exists() else []


def test_list_shows_every_model_and_what_the_config_uses(config_file, vcamd_cli) -> None:
    result = vcamd_cli("models", "list", "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ROLE", "STATUS", "SIZE", "PATH"]
    rows = [line.split() for line in lines[1:6]]
    models = config_file.parent / "models"
    assert [(r[0], r[1], r[2], r[-1]) for r in rows] == [
        ("inswapper_128_fp16*", "swapper", "missing", str(models / "inswapper_128_fp16.onnx")),
        ("inswapper_128", "swapper", "missing", str(models / "inswapper_128.onnx")),
        ("buffalo_l*", "detector", "missing", str(models / "det_10g.onnx")),
        ("buffalo_l*", "recognizer", "missing", str(models / "w600k_r50.onnx")),
        ("gfpgan_1.4", "enhancer", "missing", str(models / "gfpgan_1.4.onnx")),
    ]
    assert f"models dir: {models}" in result.stdout
    assert "non-commercial research use only" in result.stdout
    assert "vcamd models pull buffalo_l inswapper_128_fp16" in result.stdout


def test_failing_pull_is_one_line_and_exit_2(config_file, file_server, vcamd_cli) -> None:
    result = vcamd_cli("models", "pull", "--no-progress", "--config", str(config_file))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"vcamd: error: buffalo_l: download failed: HTTP 404 Not Found from {file_server.base}"
        "/deepinsight/insightface/releases/download/v0.7/buffalo_l.zip"
        " — check [models] mirror in the config (without one, the file may have moved upstream: see models/README.md), "
        "then run `vcamd models pull buffalo_l` again, or copy it in by hand: `vcamd models list` says where each file "
        "comes from and where it goes"
    ]
    assert result.stdout == "pulling the models the config uses: buffalo_l, inswapper_128_fp16\n"
    assert [h.path for h in file_server.hits] == ["/deepinsight/insightface/releases/download/v0.7/buffalo_l.zip"]
    assert files_in(config_file.parent / "models") == []


def test_pull_with_wrong_bytes_is_refused_and_nothing_stays(config_file, file_server, blob, vcamd_cli) -> None:
    file_server.serve(FP16_PATH, blob(200_000)[0])
    result = vcamd_cli("models", "pull", "inswapper_128_fp16", "--no-progress", "--config", str(config_file))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("vcamd: error: inswapper_128_fp16: the file from ")
    assert "does not match the manifest (SHA-256" in line
    assert files_in(config_file.parent / "models") == []


def test_unknown_name_is_one_line_and_exit_2(config_file, vcamd_cli) -> None:
    result = vcamd_cli("models", "pull", "inswapper_256", "--config", str(config_file))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "vcamd: error: unknown model 'inswapper_256'; did you mean inswapper_128 or inswapper_128_fp16 or simswap_256? "
        "— run `vcamd models list` to see them"
    ]


def test_pull_unpublished_model_records_its_hash_then_verify_uses_it(config_file, file_server, enhancer_onnx, vcamd_cli) -> None:
    data, sha = enhancer_onnx(300_000)
    file_server.serve(GFPGAN_PATH, data)
    crc = format(zlib.crc32(data), "08x")
    file_server.serve(GFPGAN_PATH.replace(".onnx", ".hash"), crc.encode())  # FaceFusion's CRC32 beside the model
    models = config_file.parent / "models"

    pulled = vcamd_cli("models", "pull", "gfpgan_1.3", "--config", str(config_file))
    assert pulled.returncode == 0, pulled.stderr
    assert f"gfpgan_1.3: downloaded: {models / 'gfpgan_1.3.onnx'}\n" in pulled.stdout
    assert f"gfpgan_1.3: CRC32 {crc} matches the one its publisher gives" in pulled.stdout
    assert f"no published SHA-256 for gfpgan_1.3.onnx; recorded {sha} in {models / 'vcamd-models.json'}" in pulled.stdout
    assert (models / "gfpgan_1.3.onnx").read_bytes() == data

    again = vcamd_cli("models", "pull", "gfpgan_1.3", "--config", str(config_file))
    assert f"gfpgan_1.3: already present, SHA-256 ok: {models / 'gfpgan_1.3.onnx'}\n" in again.stdout
    assert [hit.path for hit in file_server.hits] == [GFPGAN_PATH, GFPGAN_PATH.replace(".onnx", ".hash")]  # pinned: not fetched again

    listed = vcamd_cli("models", "list", "--config", str(config_file))
    assert [line.split()[2] for line in listed.stdout.splitlines() if line.startswith("gfpgan_1.3 ")] == ["verified"]

    ok = vcamd_cli("models", "verify", "--config", str(config_file))
    assert (ok.returncode, ok.stdout) == (0, f"gfpgan_1.3 (enhancer): {models / 'gfpgan_1.3.onnx'}: SHA-256 ok\n")

    with (models / "gfpgan_1.3.onnx").open("r+b") as f:
        f.seek(len(data) // 2)  # a byte of its weights: still a loadable model, another hash
        f.write(bytes([data[len(data) // 2] ^ 1]))
    bad = vcamd_cli("models", "verify", "gfpgan_1.3", "--config", str(config_file))
    assert bad.returncode == 2
    assert f"SHA-256 MISMATCH: {_sha_of(models / 'gfpgan_1.3.onnx')}, expected {sha}" in bad.stdout
    assert bad.stderr.splitlines() == [
        "vcamd: error: model check failed: gfpgan_1.3.onnx mismatch — run `vcamd models pull gfpgan_1.3` to download it again, "
        "or copy it in by hand: `vcamd models list` says where each file comes from and where it goes"
    ]


def _sha_of(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bad_mirror_in_config_is_a_config_error(tmp_path, vcamd_cli) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[models]\nmirror = "ftp://mirror"\n')
    result = vcamd_cli("models", "list", "--config", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"vcamd: error: {path}: [models] mirror = 'ftp://mirror': Value error, must be an http:// or https:// URL, or empty"
    ]
    assert os.listdir(tmp_path) == ["config.toml"]


def test_models_pull_into_a_models_dir_that_is_a_file_is_one_line(tmp_path):
    not_a_folder = tmp_path / "models"
    not_a_folder.write_text("I am a file")
    config = tmp_path / "config.toml"
    config.write_text('[models]\ndir = "models"\n')
    for command in (("models", "pull", "buffalo_l"), ("models", "list"), ("models", "verify")):
        proc = run_vcamd(*command, "--config", config)
        one_clear_line(proc, str(not_a_folder), "[models] dir")
    assert not_a_folder.read_text() == "I am a file"


def test_list_says_how_to_copy_the_files_in_by_hand_then_verify_accepts_them(tmp_path, enhancer_onnx, vcamd_cli) -> None:
    """No route to the download sites: `models list` gives each file's address, size, hash and
    place; a file copied there by hand is then checked by `models verify`."""
    config = tmp_path / "config.toml"
    config.write_text('[models]\ndir = "models"\n')
    models = tmp_path / "models"
    listed = vcamd_cli("models", "list", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    by_hand = listed.stdout.split("copy the files in yourself:\n", 1)[1].splitlines()
    assert by_hand[:2] == [
        "  inswapper_128_fp16: https://huggingface.co/hacksider/deep-live-cam/resolve/main/inswapper_128_fp16.onnx",
        f"    save as {models / 'inswapper_128_fp16.onnx'}  (~277.0 MB, "
        "SHA-256 6d51a9278a1f650cffefc18ba53f38bf2769bf4bbff89267822cf72945f8a38b)",
    ]
    assert "  buffalo_l: https://github.com/deepinsight/insightface/releases/download/v0.7/buffalo_l.zip" in by_hand
    assert (f"    w600k_r50.onnx -> {models / 'w600k_r50.onnx'}  (174.4 MB, "
            "SHA-256 4c06341c33c2ca1f86781dab0e829f88ad5b64be9fba56e56bc9ebdefc619e43)") in by_hand
    assert by_hand[-1] == "then check them: vcamd models verify"

    data, sha = enhancer_onnx(300_000)
    models.mkdir()
    (models / "gfpgan_1.3.onnx").write_bytes(data)  # copied in by hand
    verified = vcamd_cli("models", "verify", "--config", str(config))
    assert verified.returncode == 0, verified.stderr
    assert sha in verified.stdout
    again = vcamd_cli("models", "list", "--config", str(config))
    assert "  gfpgan_1.3: " not in again.stdout  # in place: no longer in the by-hand list
    assert [line.split()[2] for line in again.stdout.splitlines() if line.startswith("gfpgan_1.3 ")] == ["verified"]


@pytest.mark.parametrize("command", [("run", "--no-tray", "--source", "synthetic", "--sink", "null", "--frames", "3"),
                                     ("swap", "-i", "IMAGE", "-o", "OUT")])
def test_run_and_swap_name_every_missing_model_file_at_once(tmp_path, assets, vcamd_cli, command) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[models]\ndir = "models"\n[swap]\nsource_consent = true\n')
    photo = assets / "images" / "newton.png"
    args = [str(photo) if a == "IMAGE" else str(tmp_path / "out.png") if a == "OUT" else a for a in command]
    result = vcamd_cli(*args, "--config", str(config), "--face", str(photo))
    models = tmp_path / "models"
    missing = (f"3 model files missing: {models / 'det_10g.onnx'} (buffalo_l); {models / 'w600k_r50.onnx'} "
               f"(buffalo_l); {models / 'inswapper_128_fp16.onnx'} (inswapper_128_fp16) — run `vcamd models pull buffalo_l "
               "inswapper_128_fp16`, or copy them in by hand: `vcamd models list` says where each file comes from and where it goes")
    if command[0] == "swap":
        assert result.returncode == 2
        assert result.stderr.splitlines() == [f"vcamd: error: {missing}"]
    else:  # the daemon starts without them, swapping off, and names them the same way (issue 42)
        assert result.returncode == 0, result.stderr
        assert [line.split(": ", 1)[1].strip() for line in result.stderr.splitlines() if "3 model files missing" in line] == [missing]


def test_faces_names_its_missing_detector_with_the_by_hand_route(tmp_path, assets, vcamd_cli) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[models]\ndir = "models"\n')
    result = vcamd_cli("faces", str(assets / "images" / "newton.png"), "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"vcamd: error: 1 model file missing: {tmp_path / 'models' / 'det_10g.onnx'} (buffalo_l) — run `vcamd models "
        "pull buffalo_l`, or copy it in by hand: `vcamd models list` says where each file comes from and where it goes"
    ]

"""ModelStore against a real HTTP server on 127.0.0.1: download, resume, verify, refuse."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from vcamd.common.errors import ModelError
from vcamd.config.folders import user_data_dir
from vcamd.config.schema import Config, ModelsConfig
from vcamd.modelstore.manifest import Manifest
from vcamd.modelstore.store import ModelStore
from vcamd.modelstore.verify import STATE_FILE

REPO = Path(__file__).resolve().parents[2]
MB = 1_000_000


def store_for(tmp_path: Path, entries: dict, mirror: str = "") -> ModelStore:
    return ModelStore(tmp_path / "models", mirror, {"models": entries})


def leftovers(store: ModelStore) -> list[str]:
    """Files in the models dir other than the state file and lock files."""
    if not store.dir.exists():
        return []
    return sorted(p.name for p in store.dir.iterdir() if p.name != STATE_FILE and not p.name.endswith(".lock"))


def pins(store: ModelStore) -> dict:
    """The recorded hashes of models without a published one ({} when none were ever recorded)."""
    path = store.dir / STATE_FILE
    return json.loads(path.read_text()).get("pinned", {}) if path.exists() else {}


# ---- the real manifest -------------------------------------------------------------------


def test_packaged_manifest_is_the_repo_manifest_and_covers_the_config_defaults() -> None:
    packaged = REPO / "vcamd" / "data" / "manifest.toml"
    assert packaged.resolve() == (REPO / "models" / "manifest.toml").resolve()
    manifest = Manifest.packaged()
    assert {"inswapper_128_fp16", "inswapper_128", "buffalo_l", "gfpgan_1.4", "bisenet_resnet_34"} <= set(manifest.entries)
    defaults = ModelsConfig()
    for role in ("detector", "recognizer", "swapper", "enhancer"):
        name = getattr(defaults, role)
        assert role in manifest.get(name).roles
        assert manifest.default_for(role) == name
    assert manifest.get("buffalo_l").installed()["detector"].file == "det_10g.onnx"
    assert manifest.get("buffalo_l").installed()["recognizer"].file == "w600k_r50.onnx"
    assert manifest.get("inswapper_128").size == 554_253_681
    assert manifest.get("gfpgan_1.4").sha256 == ""  # unpublished: pinned on first download
    assert manifest.get("bisenet_resnet_34").sha256 == "" and "parser" in manifest.get("bisenet_resnet_34").roles
    assert manifest.default_for("parser") is None and ModelsConfig().parser == ""  # off unless asked for
    for entry in manifest.entries.values():
        assert entry.url.startswith(("https://huggingface.co/", "https://github.com/deepinsight/insightface/releases/"))
        assert entry.url.endswith("/" + entry.file)
        assert entry.license
        # No SHA-256 published: FaceFusion's CRC32 beside the file checks the first download.
        assert entry.sha256 or entry.crc32_url == entry.url.removesuffix(".onnx") + ".hash" or entry.role == "parser"


def test_every_model_family_has_its_models_in_the_manifest_and_every_manifest_model_a_family() -> None:
    """One row per family (vcamd/faces/specs.py) names its models; the manifest downloads each of
    them, and each swapper or enhancer there is a model of one family (its file named as the model)."""
    from vcamd.faces.specs import ENHANCERS, SWAPPERS, family_named

    manifest = Manifest.packaged()
    by_role = {role: {name for name, e in manifest.entries.items() if e.role == role} for role in ("swapper", "enhancer", "converter")}
    assert by_role["swapper"] == {model for spec in SWAPPERS for model in spec.models}
    assert by_role["enhancer"] == {model for spec in ENHANCERS for model in spec.models}
    assert by_role["converter"] == {spec.converter for spec in SWAPPERS if spec.converter}
    for name in by_role["swapper"]:
        assert family_named(manifest.get(name).file) is family_named(name) is not None


def test_default_dir_is_user_data_dir_models_and_config_dir_wins(tmp_path: Path) -> None:
    assert ModelStore.from_config(ModelsConfig()).dir == user_data_dir() / "models"
    store = ModelStore.from_config(ModelsConfig(dir=tmp_path, mirror="https://m.example"))
    assert store.dir == tmp_path and store.mirror == "https://m.example"
    assert store.url_for(store.manifest.get("inswapper_128")) == (
        "https://m.example/hacksider/deep-live-cam/resolve/main/inswapper_128.onnx"
    )


# ---- pull --------------------------------------------------------------------------------


def test_pull_downloads_verifies_and_moves_into_place(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(3 * MB)
    url = file_server.serve("/m/swap.onnx", data)
    store = store_for(tmp_path, {"swap": manifest_entry(url, "swap.onnx", sha, len(data))})

    [result] = store.pull(["swap"], progress=False)

    final = store.dir / "swap.onnx"
    assert result.action == "downloaded" and result.paths == (final,)
    assert final.read_bytes() == data
    assert leftovers(store) == ["swap.onnx"]
    assert store.path_for("swap", "swapper") == final
    assert [(r.name, r.status) for r in store.list()] == [("swap", "verified")]
    hits = len(file_server.hits)
    assert store.pull(["swap"], progress=False)[0].action == "already present"
    assert len(file_server.hits) == hits  # a verified file is not fetched again


def test_pull_with_progress_bar_works(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(200_000)
    url = file_server.serve("/p.onnx", data)
    store = store_for(tmp_path, {"p": manifest_entry(url, "p.onnx", sha)})  # no exact size: bar from Content-Length
    store.pull(["p"], progress=True)
    assert (store.dir / "p.onnx").read_bytes() == data


def test_wrong_hash_is_refused_and_leaves_no_file(tmp_path, file_server, blob, manifest_entry) -> None:
    data, _ = blob(1 * MB)
    url = file_server.serve("/bad.onnx", data)
    store = store_for(tmp_path, {"bad": manifest_entry(url, "bad.onnx", "0" * 64)})

    with pytest.raises(ModelError, match=r"bad: the file from .*/bad\.onnx does not match the manifest \(SHA-256") as err:
        store.pull(["bad"], progress=False)
    assert "vcamd models pull bad" in str(err.value)
    assert leftovers(store) == []  # neither bad.onnx nor bad.onnx.part


def test_wrong_size_is_refused_and_leaves_no_file(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(500_000)
    url = file_server.serve("/big.onnx", data)
    store = store_for(tmp_path, {"big": manifest_entry(url, "big.onnx", sha, size=400_000)})
    with pytest.raises(ModelError, match=r"500,000 bytes, expected 400,000"):
        store.pull(["big"], progress=False)
    assert leftovers(store) == []


def test_truncated_body_errors_and_keeps_part_for_resume(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(2 * MB)
    url = file_server.serve("/t.onnx", data, truncate_after=700_000)
    store = store_for(tmp_path, {"t": manifest_entry(url, "t.onnx", sha, len(data))})

    with pytest.raises(ModelError, match=r"t: download (interrupted|ended early).*run `vcamd models pull t` again to resume"):
        store.pull(["t"], progress=False)
    assert not (store.dir / "t.onnx").exists()
    part = store.dir / "t.onnx.part"
    kept = part.stat().st_size
    assert kept == 700_000  # a clean early close delivers every byte sent: all of it is kept
    assert part.read_bytes() == data[:kept]

    file_server.files["/t.onnx"].truncate_after = None  # the server behaves again
    store.pull(["t"], progress=False)
    assert (store.dir / "t.onnx").read_bytes() == data
    assert file_server.hits[-1].range == f"bytes={kept}-"
    assert leftovers(store) == ["t.onnx"]


def test_truncated_body_without_known_size_is_caught_by_content_length(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(1 * MB)
    url = file_server.serve("/u.onnx", data, truncate_after=300_000)
    store = store_for(tmp_path, {"u": manifest_entry(url, "u.onnx", sha)})  # no size in the manifest
    with pytest.raises(ModelError, match=r"u: .*(interrupted|closed the connection)"):
        store.pull(["u"], progress=False)
    assert not (store.dir / "u.onnx").exists()
    assert (store.dir / "u.onnx.part").exists()


def test_http_404_names_status_and_url(tmp_path, file_server, manifest_entry) -> None:
    url = file_server.base + "/nowhere/gone.onnx"
    store = store_for(tmp_path, {"gone": manifest_entry(url, "gone.onnx", "a" * 64)})
    with pytest.raises(ModelError, match=r"gone: download failed: HTTP 404 Not Found from .*/nowhere/gone\.onnx — check \[models\] mirror"):
        store.pull(["gone"], progress=False)
    assert leftovers(store) == []


def test_unreachable_server_is_a_model_error(tmp_path, manifest_entry) -> None:
    store = store_for(tmp_path, {"x": manifest_entry("http://127.0.0.1:9/x.onnx", "x.onnx", "a" * 64)})
    with pytest.raises(ModelError, match=r"x: cannot reach 127\.0\.0\.1:9") as err:
        store.pull(["x"], progress=False)
    # Offline, the fix names both ways out: the pull once the network is back, and the copy by
    # hand with where `vcamd models list` says the file comes from and goes (issue 42).
    assert err.value.fix == (
        "check the network connection and [models] mirror in the config, then run `vcamd models pull x` again, "
        "or copy it in by hand: `vcamd models list` says where each file comes from and where it goes"
    )


def test_dropped_connection_then_resume_with_range(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(3 * MB)
    url = file_server.serve("/r.onnx", data, reset_after=1_200_000)
    store = store_for(tmp_path, {"r": manifest_entry(url, "r.onnx", sha, len(data))})

    with pytest.raises(ModelError, match=r"r: download interrupted at .* of 3\.0 MB .*resume"):
        store.pull(["r"], progress=False)
    part = store.dir / "r.onnx.part"
    kept = part.stat().st_size
    assert 0 < kept <= 1_200_000
    assert [(r.name, r.status) for r in store.list()] == [("r", "partial")]

    [result] = store.pull(["r"], progress=False)

    assert result.action == "downloaded"
    assert (store.dir / "r.onnx").read_bytes() == data
    second = file_server.hits[-1]
    assert second.range == f"bytes={kept}-"
    assert second.status == 206 and second.body_bytes == len(data) - kept
    assert leftovers(store) == ["r.onnx"]


def test_server_ignoring_range_restarts_cleanly(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(2 * MB)
    url = file_server.serve("/n.onnx", data, reset_after=800_000, honour_range=False)
    store = store_for(tmp_path, {"n": manifest_entry(url, "n.onnx", sha, len(data))})
    with pytest.raises(ModelError):
        store.pull(["n"], progress=False)
    store.pull(["n"], progress=False)
    assert file_server.hits[-1].range is not None and file_server.hits[-1].status == 200
    assert (store.dir / "n.onnx").read_bytes() == data


def test_complete_part_file_is_finished_without_refetching(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(300_000)
    url = file_server.serve("/c.onnx", data)
    store = store_for(tmp_path, {"c": manifest_entry(url, "c.onnx", sha, len(data))})
    store.dir.mkdir(parents=True)
    (store.dir / "c.onnx.part").write_bytes(data)  # crashed after the last byte, before the rename
    store.pull(["c"], progress=False)
    assert file_server.hits[-1].status == 416
    assert (store.dir / "c.onnx").read_bytes() == data and leftovers(store) == ["c.onnx"]


def test_corrupt_file_in_place_is_downloaded_again(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(300_000)
    url = file_server.serve("/k.onnx", data)
    store = store_for(tmp_path, {"k": manifest_entry(url, "k.onnx", sha)})
    store.dir.mkdir(parents=True)
    (store.dir / "k.onnx").write_bytes(b"x" * 300_000)
    assert store.pull(["k"], progress=False)[0].action == "downloaded"
    assert (store.dir / "k.onnx").read_bytes() == data


def test_unknown_name_fails_before_any_download(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(1000)
    store = store_for(tmp_path, {"ok": manifest_entry(file_server.serve("/ok.onnx", data), "ok.onnx", sha)})
    with pytest.raises(ModelError, match=r"unknown model 'nope'; the manifest has ok — run `vcamd models list`"):
        store.pull(["ok", "nope"], progress=False)
    assert file_server.hits == []


@pytest.mark.parametrize("bad_file", ["../evil.onnx", "/tmp/evil.onnx", "sub/evil.onnx", "..", "c:evil.onnx", "a\\..\\evil.onnx"])
def test_manifest_file_names_outside_the_models_dir_are_refused(tmp_path, manifest_entry, bad_file) -> None:
    entry = manifest_entry("http://127.0.0.1:9/evil.onnx", bad_file, "a" * 64)
    with pytest.raises(ModelError, match=r"\[models\.evil\] file: .*must be a plain file name inside the models dir"):
        store_for(tmp_path, {"evil": entry})
    pack = manifest_entry(
        "http://127.0.0.1:9/p.zip", "p.zip", "a" * 64, role="detector",
        extract={"detector": {"file": bad_file, "sha256": "b" * 64}},
    )
    with pytest.raises(ModelError, match=r"\[models\.evil\] extract\.detector\.file"):
        store_for(tmp_path, {"evil": pack})


def test_traversal_model_names_and_mirrors_are_refused(tmp_path, manifest_entry) -> None:
    with pytest.raises(ModelError, match=r"\[models\.\.\./x\]"):
        store_for(tmp_path, {"../x": manifest_entry("http://h/x.onnx", "x.onnx", "a" * 64)})
    store = store_for(tmp_path, {"x": manifest_entry("http://h/x.onnx", "x.onnx", "a" * 64)})
    with pytest.raises(ModelError, match="unknown model '../../etc/passwd'"):
        store.pull(["../../etc/passwd"], progress=False)
    for mirror in ("file:///etc", "http://h/../..", "ftp://h", "http://h/?q=1"):
        with pytest.raises(ModelError, match=r"\[models\] mirror = .* is not a usable base URL"):
            ModelStore(tmp_path, mirror, {"models": {"x": manifest_entry("http://h/x.onnx", "x.onnx", "a" * 64)}})
    assert list(tmp_path.iterdir()) == []


def test_mirror_replaces_scheme_and_host(tmp_path, file_server, blob, manifest_entry) -> None:
    data, sha = blob(100_000)
    file_server.serve("/owner/repo/resolve/main/m.onnx", data)
    entry = manifest_entry("https://huggingface.co/owner/repo/resolve/main/m.onnx", "m.onnx", sha)
    store = store_for(tmp_path, {"m": entry}, mirror=file_server.base + "/")
    store.pull(["m"], progress=False)
    assert file_server.hits[-1].path == "/owner/repo/resolve/main/m.onnx"
    assert (store.dir / "m.onnx").read_bytes() == data


def test_unpublished_hash_is_recorded_then_enforced(tmp_path, file_server, enhancer_onnx, manifest_entry) -> None:
    data, sha = enhancer_onnx(400_000)
    url = file_server.serve("/gfp.onnx", data)
    store = store_for(tmp_path, {"gfp": manifest_entry(url, "gfp.onnx", "", role="enhancer", approx_size=400_000)})

    [result] = store.pull(["gfp"], progress=False)
    assert result.pinned == ((store.dir / "gfp.onnx", sha),)
    state = json.loads((store.dir / STATE_FILE).read_text())
    assert state["pinned"]["gfp.onnx"]["sha256"] == sha

    assert store.pull(["gfp"], progress=False)[0].pinned == ()  # recorded once, not again
    assert [(r.status, r.sha256) for r in store.verify(["gfp"])] == [("ok", sha)]

    # The file changes on disk (a byte of its weights): verify reports it against the recorded hash.
    middle = len(data) // 2
    (store.dir / "gfp.onnx").write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:])
    [bad] = store.verify(["gfp"])
    assert bad.status == "mismatch" and bad.expected == sha

    # Upstream now serves different bytes: the pull is refused against the recorded hash.
    (store.dir / "gfp.onnx").unlink()
    file_server.serve("/gfp.onnx", enhancer_onnx(400_000)[0])
    with pytest.raises(ModelError, match=rf"does not match the hash recorded in .*{STATE_FILE}"):
        store.pull(["gfp"], progress=False)
    assert leftovers(store) == []


def test_verify_pins_a_hand_copied_unpublished_model(tmp_path, enhancer_onnx, manifest_entry) -> None:
    store = store_for(tmp_path, {"gfp": manifest_entry("http://h/gfp.onnx", "gfp.onnx", "", role="enhancer")})
    store.dir.mkdir(parents=True)
    data, sha = enhancer_onnx(50_000)
    (store.dir / "gfp.onnx").write_bytes(data)
    [r] = store.verify()
    assert r.status == "pinned" and r.sha256 == sha
    assert store.verify()[0].status == "ok"


def test_verify_never_pins_a_hand_copied_file_that_is_not_a_model_of_its_role(tmp_path, enhancer_onnx, manifest_entry) -> None:
    store = store_for(tmp_path, {"gfp": manifest_entry("http://h/gfp.onnx", "gfp.onnx", "", role="enhancer")})
    store.dir.mkdir(parents=True)
    data, _ = enhancer_onnx(50_000)
    (store.dir / "gfp.onnx").write_bytes(data[: len(data) // 2])  # half of a real model
    [r] = store.verify()
    assert r.status == "invalid" and "cannot be loaded by ONNX Runtime" in r.problem
    assert "gfp.onnx" not in pins(store)


def test_verify_reports_present_missing_and_corrupt(tmp_path, file_server, blob, manifest_entry) -> None:
    a, sha_a = blob(50_000)
    b, sha_b = blob(50_000)
    store = store_for(tmp_path, {
        "a": manifest_entry(file_server.serve("/a.onnx", a), "a.onnx", sha_a),
        "b": manifest_entry(file_server.serve("/b.onnx", b), "b.onnx", sha_b, role="enhancer"),
    })
    assert store.verify() == []  # nothing present: nothing to check
    store.pull(["a"], progress=False)
    assert [(r.name, r.status) for r in store.verify(["a", "b"])] == [("a", "ok"), ("b", "missing")]
    (store.dir / "a.onnx").write_bytes(b)
    assert [(r.name, r.status) for r in store.verify()] == [("a", "mismatch")]
    assert [r.status for r in store.list()] == ["present", "missing"]


# ---- zip packs (buffalo_l) --------------------------------------------------------------


def make_pack(blob, members: dict[str, int]) -> tuple[bytes, str, dict[str, tuple[bytes, str]]]:
    contents = {name: blob(size) for name, size in members.items()}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, (data, _) in contents.items():
            zf.writestr(f"pack/{name}", data)
    raw = buf.getvalue()
    return raw, hashlib.sha256(raw).hexdigest(), contents


def test_zip_pack_is_verified_then_its_members_extracted(tmp_path, file_server, blob, manifest_entry) -> None:
    raw, sha, contents = make_pack(blob, {"det.onnx": 120_000, "rec.onnx": 90_000, "extra.onnx": 1000})
    (det, det_sha), (rec, rec_sha) = contents["det.onnx"], contents["rec.onnx"]
    entry = manifest_entry(
        file_server.serve("/pack.zip", raw), "pack.zip", sha, len(raw), role="detector+recognizer",
        extract={"detector": {"file": "det.onnx", "sha256": det_sha, "size": len(det)},
                 "recognizer": {"file": "rec.onnx", "sha256": rec_sha, "approx_size": 100_000}},
    )
    store = store_for(tmp_path, {"pack": entry})

    store.pull(["pack"], progress=False)

    assert store.path_for("pack", "detector").read_bytes() == det
    assert store.path_for("pack", "recognizer").read_bytes() == rec
    assert leftovers(store) == ["det.onnx", "rec.onnx"]  # the zip is gone, extra.onnx not extracted
    assert [(r.role, r.status) for r in store.list()] == [("detector", "verified"), ("recognizer", "verified")]
    assert [r.status for r in store.verify(["pack"])] == ["ok", "ok"]
    with pytest.raises(ModelError, match=r"\[models\] swapper = 'pack' is not a swapper model"):
        store.path_for("pack", "swapper")


def test_zip_pack_member_with_wrong_hash_leaves_nothing(tmp_path, file_server, blob, manifest_entry) -> None:
    raw, sha, contents = make_pack(blob, {"det.onnx": 50_000, "rec.onnx": 50_000})
    entry = manifest_entry(
        file_server.serve("/pack.zip", raw), "pack.zip", sha, role="detector+recognizer",
        extract={"detector": {"file": "det.onnx", "sha256": contents["det.onnx"][1]},
                 "recognizer": {"file": "rec.onnx", "sha256": "c" * 64}},
    )
    store = store_for(tmp_path, {"pack": entry})
    with pytest.raises(ModelError, match=r"pack: rec\.onnx in pack\.zip has SHA-256 .*expected cccccccccccc"):
        store.pull(["pack"], progress=False)
    assert leftovers(store) == []


# ---- path_for ----------------------------------------------------------------------------


def test_path_for_names_the_missing_file_and_the_fix(tmp_path) -> None:
    store = ModelStore(tmp_path / "models")
    with pytest.raises(ModelError) as err:
        store.path_for("buffalo_l", "recognizer")
    assert str(err.value) == (
        f"model file {tmp_path / 'models' / 'w600k_r50.onnx'} (buffalo_l, the recognizer) is missing"
        " — run `vcamd models pull buffalo_l`, or copy it in by hand: `vcamd models list` says where each file comes from and where it goes (or fix [models] recognizer in the config)"
    )
    with pytest.raises(ModelError, match=r"\[models\] swapper = 'mine\.onnx': no such file.*inswapper_128_fp16, inswapper_128"):
        store.path_for("mine.onnx", "swapper")


def test_path_for_takes_a_file_path_and_checks_exact_sizes(tmp_path) -> None:
    own = tmp_path / "own.onnx"
    own.write_bytes(b"x")
    store = ModelStore(tmp_path / "models")
    assert store.path_for(str(own), "detector") == own
    store.dir.mkdir()
    (store.dir / "inswapper_128.onnx").write_bytes(b"short")
    with pytest.raises(ModelError, match=r"is 5 bytes, expected 554,253,681: incomplete or corrupt — run `vcamd models pull inswapper_128`"):
        store.path_for("inswapper_128", "swapper")


def test_config_defaults_name_manifest_models() -> None:
    cfg = Config().models
    manifest = tomllib.loads((REPO / "models" / "manifest.toml").read_text())["models"]
    assert {cfg.detector, cfg.recognizer, cfg.swapper, cfg.enhancer} <= set(manifest)


def test_model_symlinked_from_another_disk_is_accepted(tmp_path, blob, manifest_entry) -> None:
    data, sha = blob(10_000)
    elsewhere = tmp_path / "big-disk" / "s.onnx"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(data)
    store = store_for(tmp_path, {"s": manifest_entry("http://127.0.0.1:9/s.onnx", "s.onnx", sha)})
    store.dir.mkdir(parents=True)
    (store.dir / "s.onnx").symlink_to(elsewhere)
    assert store.path_for("s", "swapper") == store.dir / "s.onnx"
    assert [r.status for r in store.verify()] == ["ok"]
    assert store.pull(["s"], progress=False)[0].action == "already present"


def test_a_second_concurrent_pull_of_the_same_model_is_refused(tmp_path, manifest_entry) -> None:
    fcntl = pytest.importorskip("fcntl")
    store = store_for(tmp_path, {"x": manifest_entry("http://127.0.0.1:9/x.onnx", "x.onnx", "a" * 64)})
    store.dir.mkdir(parents=True)
    with (store.dir / ".x.onnx.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process's pull, as far as the lock can tell
        with pytest.raises(ModelError, match=r"x: another `vcamd models pull` is downloading it right now"):
            store.pull(["x"], progress=False)


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_disk_full_while_downloading_is_a_clear_error(tmp_path, file_server, blob, manifest_entry) -> None:
    """A real write failure: the child process may only write 300 kB per file (RLIMIT_FSIZE)."""
    data, sha = blob(1 * MB)
    entry = manifest_entry(file_server.serve("/full.onnx", data), "full.onnx", sha, len(data))
    code = f"""
import resource, signal
from pathlib import Path
from vcamd.common.errors import ModelError
from vcamd.modelstore.store import ModelStore
store = ModelStore(Path({str(tmp_path / 'models')!r}), "", {{"models": {{"full": {entry!r}}}}})
store.dir.mkdir(parents=True)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG from write() instead of being killed
resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    store.pull(["full"], progress=False)
except ModelError as err:
    print(err)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.startswith(f"full: cannot write {tmp_path / 'models' / 'full.onnx.part'}: File too large"), result
    assert "free some disk space or set [models] dir" in result.stdout
    assert not (tmp_path / "models" / "full.onnx").exists()
    # What was written stays for the resume, and the resume completes it.
    assert (tmp_path / "models" / "full.onnx.part").stat().st_size == 300_000
    store = store_for(tmp_path, {"full": entry})
    store.pull(["full"], progress=False)
    assert (store.dir / "full.onnx").read_bytes() == data
    assert file_server.hits[-1].range == "bytes=300000-"


@pytest.mark.parametrize("planted", ["w.onnx", "w.onnx.part", ".w.onnx.lock", f"{STATE_FILE}.tmp"])
def test_pull_never_writes_through_a_planted_symlink(tmp_path, file_server, blob, manifest_entry, planted) -> None:
    data, sha = blob(50_000)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep me")
    store = store_for(tmp_path, {"w": manifest_entry(file_server.serve("/w.onnx", data), "w.onnx", sha, len(data))})
    store.dir.mkdir(parents=True)
    (store.dir / planted).symlink_to(outside)
    try:
        store.pull(["w"], progress=False)
    except ModelError as err:
        assert f"{store.dir / planted} is a symlink to {outside} (outside the models dir)" in str(err)
    assert outside.read_bytes() == b"keep me"


def _pack_of(members: dict[str, bytes]) -> tuple[bytes, str]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(f"pack/{name}", data)
    return buf.getvalue(), hashlib.sha256(buf.getvalue()).hexdigest()


def test_zip_member_without_published_hash_is_recorded(tmp_path, file_server, assets, manifest_entry) -> None:
    detector = (assets / "models" / "scrfd_500m_kps.onnx").read_bytes()  # a real SCRFD detector
    raw, sha = _pack_of({"det.onnx": detector})
    contents = {"det.onnx": (detector, hashlib.sha256(detector).hexdigest())}
    entry = manifest_entry(
        file_server.serve("/p.zip", raw), "p.zip", sha, role="detector",
        extract={"detector": {"file": "det.onnx", "sha256": ""}},
    )
    store = store_for(tmp_path, {"p": entry})
    [result] = store.pull(["p"], progress=False)
    assert result.pinned == ((store.dir / "det.onnx", contents["det.onnx"][1]),)
    assert [r.status for r in store.verify()] == ["ok"]
    assert leftovers(store) == ["det.onnx"]


def test_zip_member_without_published_hash_that_is_no_model_of_its_role_leaves_nothing(
    tmp_path, file_server, assets, manifest_entry
) -> None:
    recognizer = (assets / "models" / "mobilefacenet.onnx").read_bytes()  # a real model, the wrong role
    raw, sha = _pack_of({"det.onnx": recognizer})
    entry = manifest_entry(
        file_server.serve("/p.zip", raw), "p.zip", sha, role="detector",
        extract={"detector": {"file": "det.onnx", "sha256": ""}},
    )
    store = store_for(tmp_path, {"p": entry})
    with pytest.raises(ModelError, match=r"p: det\.onnx in p\.zip is not a usable detector model \(.*not an SCRFD detector"):
        store.pull(["p"], progress=False)
    assert leftovers(store) == []
    assert "det.onnx" not in pins(store)


def test_every_model_fix_in_the_code_names_both_ways_out() -> None:
    """Issue 42: an offline `models pull` named only the network, doctor only the pull. Every fix
    that sends the user to `vcamd models pull` must name the copy by hand too — through
    `modelstore.wayout`, the one wording (a literal "models pull" in a fix would bypass it)."""
    import ast

    from vcamd.modelstore.wayout import how_to_get, ways_out

    assert "vcamd models list" in ways_out() and "vcamd models pull" in ways_out()
    assert "vcamd models list" in how_to_get(["x"]) and "`vcamd models pull x`" in how_to_get(["x"])
    package = Path(__file__).resolve().parents[2] / "vcamd"
    literal = []
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "fix":
                value = node.value
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "fix" for t in node.targets):
                value = node.value
            else:
                continue
            text = ast.unparse(value)
            if "models pull" in text.replace("models pull --help", "") and "ways_out" not in text and "how_to_get" not in text:
                literal.append(f"{source.relative_to(package)}:{value.lineno}: {text[:90]}")
    assert not literal, "\n".join(literal)

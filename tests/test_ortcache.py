"""The optimised-graph cache (`vcamd.inference.ortcache`, `Sessions.get(path, keep_optimized=True)`).

A first load optimises the model and keeps the graph; the next load uses it (optimisations off)
and computes the same outputs. An entry that no longer matches — the model file changed, another
ONNX Runtime — is rebuilt; one that is corrupt is dropped with a warning and rebuilt; a cache that
cannot be written costs nothing but the keeping. Never an error of its own, never a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from vcamd.common.errors import ModelError
from vcamd.inference import ortcache
from vcamd.inference.runtime import Sessions
from vcamd.models.pipeline import build_face_engine

ALL = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
NONE = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache folder of the test's own (the user cache dir follows XDG_CACHE_HOME)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return ortcache.cache_dir()


@pytest.fixture
def model(tmp_path, models_dir) -> Path:
    """A copy of SCRFD: convolutions, so the CPU provider's layout transform applies."""
    path = tmp_path / "models" / "model.onnx"
    path.parent.mkdir()
    shutil.copy(models_dir / "scrfd_500m_kps.onnx", path)
    return path


def load(path: Path):
    session = Sessions(["cpu"], threads=1).get(path, keep_optimized=True)
    return session, session.get_session_options().graph_optimization_level


def outputs(session) -> list[np.ndarray]:
    blob = np.random.default_rng(7).random((1, 3, 640, 640), dtype=np.float32)
    return session.run(None, {"images": blob})


def entries(cache: Path) -> list[str]:
    return sorted(p.suffix for p in cache.iterdir()) if cache.exists() else []


def test_the_first_load_keeps_the_graph_and_the_next_one_uses_it(cache, model):
    first, level = load(model)
    assert level == ALL and entries(cache) == [".json", ".onnx"]
    again, level = load(model)
    assert level == NONE  # loaded from the kept graph: nothing left to optimise
    for a, b in zip(outputs(first), outputs(again)):
        np.testing.assert_array_equal(a, b)
    if os.name == "posix":
        assert stat.S_IMODE(cache.stat().st_mode) == 0o700
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in cache.iterdir())


def test_a_changed_model_file_is_optimised_again(cache, model):
    load(model)
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # replaced (here: touched)
    assert load(model)[1] == ALL
    assert load(model)[1] == NONE
    assert entries(cache) == [".json", ".onnx"]  # one graph per model file


def test_another_onnx_runtime_or_cpu_is_a_miss(cache, model, monkeypatch):
    load(model)
    monkeypatch.setattr(onnxruntime, "__version__", "0.0.1")
    assert load(model)[1] == ALL
    monkeypatch.setattr(ortcache, "cpu_signature", lambda: "another cpu")
    assert load(model)[1] == ALL
    assert load(model)[1] == NONE


@pytest.mark.parametrize("damage", ["garbage", "truncated", "key-garbage", "key-missing"])
def test_a_damaged_entry_is_dropped_and_rebuilt(cache, model, damage, caplog):
    load(model)
    graph = next(cache.glob("*.onnx"))
    if damage == "garbage":  # same size: passes the size check, ONNX Runtime refuses it
        graph.write_bytes(bytes(range(256)) * (graph.stat().st_size // 256) + bytes(graph.stat().st_size % 256))
    elif damage == "truncated":
        graph.write_bytes(graph.read_bytes()[:1000])
    elif damage == "key-garbage":
        graph.with_suffix(".json").write_text("{not json")
    else:
        graph.with_suffix(".json").unlink()
    caplog.set_level(logging.WARNING, logger="vcamd")
    session, level = load(model)
    assert level == ALL and outputs(session)
    if damage == "garbage":  # the size matched: only ONNX Runtime could tell, and that is said
        assert any("unusable" in r.getMessage() and "optimising the model again" in r.getMessage() for r in caplog.records)
    assert load(model)[1] == NONE


def test_gpu_providers_are_not_cached(cache, model):
    assert ortcache.entry_for(model, ["CUDAExecutionProvider", "CPUExecutionProvider"], onnxruntime.__version__) is None
    assert ortcache.entry_for(model, ["CPUExecutionProvider"], onnxruntime.__version__) is not None


def test_a_cache_that_cannot_be_written_only_costs_the_keeping(tmp_path, model, monkeypatch, caplog):
    blocked = tmp_path / "xdg-cache"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    caplog.set_level(logging.WARNING, logger="vcamd")
    assert load(model)[1] == ALL
    assert load(model)[1] == ALL
    assert any("cannot keep optimised model graphs" in r.getMessage() for r in caplog.records)


def test_no_room_no_graph(cache, model, monkeypatch):
    monkeypatch.setattr(ortcache.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 1000, 1000))
    assert load(model)[1] == ALL
    assert [p for p in cache.iterdir() if p.suffix in (".onnx", ".json")] == []


def test_onnx_runtime_failing_to_write_the_graph_still_loads_the_model(cache, model, monkeypatch, caplog):
    monkeypatch.setattr(ortcache.Entry, "begin", lambda self: cache / "no-such-folder" / "graph.tmp")
    caplog.set_level(logging.WARNING, logger="vcamd")
    session, level = load(model)
    assert level == ALL and outputs(session)
    assert any("could not write its optimised graph" in r.getMessage() for r in caplog.records)


def test_a_broken_model_is_its_own_error_and_leaves_nothing(cache, tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(ModelError) as info:
        load(broken)
    assert str(broken) in str(info.value) and "\n" not in info.value.message
    assert not cache.exists() or [p for p in cache.iterdir()] == []


def test_entries_of_models_that_are_gone_are_removed(cache, model, tmp_path):
    other = tmp_path / "models" / "other.onnx"
    shutil.copy(model, other)
    load(other)
    other.unlink()
    load(model)
    keys = [json.loads(p.read_text())["key"]["model"] for p in cache.glob("*.json")]
    assert keys == [str(model.resolve())] and len(list(cache.glob("*.onnx"))) == 1


def test_swapping_keeps_the_swapper_s_graph_and_checking_a_file_does_not(cache, standins, assets, tmp_path):
    """`vcamd run` / `vcamd swap` (FaceEngine.from_config) keep the swapper's optimised graph;
    `vcamd doctor`, `config check` and a download's verification only look at the file."""
    from vcamd.config.reading import config_from_dict
    from vcamd.modelstore.signature import check_signature

    swapper = tmp_path / "swapper.onnx"
    shutil.copy(standins.swapper, swapper)
    check_signature(swapper, "swapper")
    assert entries(cache) == []
    cfg = config_from_dict({
        "models": {"detector": str(standins.detector), "recognizer": str(standins.recognizer), "swapper": str(swapper),
                   "providers": ["cpu"], "threads": 1},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
    })
    levels = [build_face_engine(cfg).swapper.session.get_session_options().graph_optimization_level for _ in range(2)]
    # The graph, its key, emap; the folder `faces/` (the source photo's face, `faces/source_cache.py`) and `hashes/`
    # (the model hashes it is keyed by, `inference/modelhashes.py`).
    assert levels == [ALL, NONE] and entries(cache) == ["", "", ".json", ".npz", ".onnx"]
    assert (cache / "faces").is_dir() and (cache / "hashes").is_dir()


def test_an_array_read_from_the_model_is_kept_and_read_again_only_when_stale(cache, model, caplog):
    calls: list[int] = []

    def compute() -> np.ndarray:
        calls.append(1)
        return np.arange(6, dtype=np.float32).reshape(2, 3) + len(calls)

    kept = lambda: ortcache.kept_array(model.resolve(), "emap", compute, (2, 3))  # noqa: E731
    first = kept()
    np.testing.assert_array_equal(kept(), first)
    assert len(calls) == 1
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the model changed: read again
    assert kept()[0, 0] == 2 and len(calls) == 2
    (array,) = cache.glob("*.emap.npz")
    array.write_bytes(b"not an npz")
    caplog.set_level(logging.INFO, logger="vcamd")
    assert kept()[0, 0] == 3 and len(calls) == 3  # unreadable: read again, said, no error
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    assert ortcache.kept_array(model.resolve(), "emap", compute, (3, 2))[0, 0] == 4  # misshapen: read again
    if os.name == "posix":
        assert stat.S_IMODE(array.stat().st_mode) == 0o600


def test_a_kept_array_is_never_a_pickle(cache, model):
    ortcache.kept_array(model.resolve(), "emap", lambda: np.ones((2, 2), np.float32), (2, 2))
    (array,) = cache.glob("*.emap.npz")
    np.savez(array, value=np.array([{"a": 1}], dtype=object), key=np.array("x"))  # a pickled object array
    value = ortcache.kept_array(model.resolve(), "emap", lambda: np.zeros((2, 2), np.float32), (2, 2))
    np.testing.assert_array_equal(value, np.zeros((2, 2)))


def test_the_swapper_s_emap_is_kept_with_its_graph(cache, standins, tmp_path, monkeypatch):
    """The next start reads `emap` from the cache, not from the model file (which a start that
    loads the kept graph would otherwise read only for it)."""
    import vcamd.faces.swap as swap
    from vcamd.inference.onnxwire import last_initializer

    path = tmp_path / "swapper.onnx"
    shutil.copy(standins.swapper, path)
    first = swap.Swapper(path, Sessions(["cpu"], threads=1), keep_optimized=True)
    np.testing.assert_array_equal(first.emap, last_initializer(path))

    def unread(*args):
        raise AssertionError("the model file was walked for emap again")

    monkeypatch.setattr(swap, "_read_emap", unread)
    again = swap.Swapper(path, Sessions(["cpu"], threads=1), keep_optimized=True)
    np.testing.assert_array_equal(again.emap, first.emap)
    assert again.session.get_session_options().graph_optimization_level == NONE


def test_kept_arrays_of_models_that_are_gone_are_removed(cache, model, tmp_path):
    other = tmp_path / "models" / "other.onnx"
    shutil.copy(model, other)
    ortcache.kept_array(other.resolve(), "emap", lambda: np.ones(2, np.float32), (2,))
    other.unlink()
    load(model)  # keeping a graph prunes
    assert list(cache.glob("*.npz")) == []

"""`vcamd bench --scenarios remote`: the swap on a Triton server (`vcamd serve`).

- **hop**: one face swapped through a loopback server against the same model in-process (the light
  stand-in), interleaved in blocks: the cost per swap of the hop.
- **daemons**: 1, 2 and 4 `vcamd run` at once against one server: each one's published fps and swap
  age, and the batch sizes the server ran (Triton's statistics).
- **delay**: `vcamd run` with its models here, then on a server with 0, 20 and 50 ms of added round
  trip — `tc netem` on the loopback of a network namespace the bench makes (both ends inside it;
  each direction delayed half the round trip). Skipped, saying why, where namespaces or netem
  cannot be made (not root, no `ip`/`tc`, no sch_netem).
- **killed**: `vcamd run` (a file sink) on a server killed for 5 s mid-run and started again: every
  published frame checked for the camera's real face by the real detectors and recogniser
  (`vcamd.bench.leaks`), and how long after the server's return the swaps came back.

The server runs from its own environment (`vcamd.bench.serving`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vcamd.bench.settings import BenchSettings

if TYPE_CHECKING:
    import socket

    from vcamd.bench.serving import ServerProcess
    from vcamd.common.types import Frame
    from vcamd.config.schema import Config
    from vcamd.control.client import ControlClient

log = logging.getLogger(__name__)

HOP_SWAPS = 300
HOP_BLOCK = 30
DAEMON_COUNTS = (1, 2, 4)
ADDED_RTT_MS = (0, 20, 50)
KILLED_S = 5.0


def run_remote(settings: BenchSettings, image: Frame, clip: Path, tmpdir: Path, base: Config) -> dict[str, Any]:
    """Every part, with `settings.load` busy processes running throughout (`--load`: a call's load)."""
    from vcamd.bench.runs import busy_processes, scenario_config

    cfg = scenario_config("light", settings, tmpdir, base)
    server_cfg = _server_config(cfg, tmpdir / "serve.toml")
    out: dict[str, Any] = {"swapper": Path(cfg.models.swapper).name, "load": settings.load}
    with busy_processes(settings.load) as pids:
        out["load_pids"] = pids
        out["hop"] = hop_cost(cfg, server_cfg, image, tmpdir)
        out["daemons"] = many_daemons(cfg, server_cfg, settings, clip, tmpdir)
        out["delay"] = added_delay(cfg, server_cfg, settings, clip, tmpdir)
        out["killed"] = killed_server(cfg, settings, image, tmpdir)
    return out


def _server_config(cfg: Config, path: Path, swapper: Path | None = None) -> Path:
    path.write_text(f'[models]\nswapper = "{swapper or cfg.models.swapper}"\nproviders = {json.dumps(list(cfg.models.providers))}\n'
                    f"threads = {cfg.models.threads}\n", encoding="utf-8")
    return path


@contextlib.contextmanager
def _server(config: Path, tmpdir: Path, name: str, *extra: str, prefix: tuple[str, ...] = ()) -> Iterator[ServerProcess]:
    from vcamd.bench.serving import ServerProcess
    server = ServerProcess(config, *extra, log=tmpdir / f"serve-{name}.log", prefix=prefix).start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _with_server(cfg: Config, url: str) -> Config:
    return cfg.model_copy(update={"models": cfg.models.model_copy(update={"server": url})})


# -- the hop -----------------------------------------------------------------------------------------


def hop_cost(cfg: Config, server_cfg: Path, image: Frame, tmpdir: Path) -> dict[str, Any]:
    """Swap one real aligned face crop `HOP_SWAPS` times in-process and through a loopback server, in
    alternating blocks; the medians' difference is what the hop costs a swap."""
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.swap import Swapper
    from vcamd.inference.runtime import Sessions
    from vcamd.models.pipeline import make_sessions, model_files

    local_sessions = Sessions(list(cfg.models.providers), cfg.models.threads)
    local = Swapper(cfg.models.swapper, local_sessions)
    face = FaceDetector(_detector_path(cfg), local_sessions).detect(image)[0]
    crop, _ = local.align(image, face)
    latent = local.latent(np.random.default_rng(0).standard_normal(512).astype(np.float32))
    with _server(server_cfg, tmpdir, "hop") as server:
        remote_cfg = _with_server(cfg, server.url)
        # With [models] server: RemoteSessions, which stands where Sessions stands (the Swapper takes either).
        remote_sessions: Any = make_sessions(remote_cfg, model_files(remote_cfg))
        try:
            remote_sessions.link.wait_up(60)
            remote = Swapper(model_files(remote_cfg).paths["swapper"], remote_sessions)
            for swapper in (local, remote):  # warm both
                for _ in range(10):
                    swapper.swap([crop], latent)
            times: dict[str, list[float]] = {"local": [], "remote": []}
            for _ in range(HOP_SWAPS // HOP_BLOCK):
                for name, swapper in (("local", local), ("remote", remote)):
                    for _ in range(HOP_BLOCK):
                        t0 = time.perf_counter()
                        swapper.swap([crop], latent)
                        times[name].append((time.perf_counter() - t0) * 1000.0)
            same = bool(np.array_equal(local.swap([crop], latent)[0], remote.swap([crop], latent)[0]))
            stats = remote_sessions.link.statistics(remote.session.served.name)
        finally:
            remote_sessions.close()
    summary = {name: {"p50": round(float(np.median(t)), 2), "p95": round(float(np.percentile(t, 95)), 2)} for name, t in times.items()}
    return {**summary, "hop_ms": round(summary["remote"]["p50"] - summary["local"]["p50"], 2), "swaps": HOP_SWAPS,
            "same_output": same, "server_side_ms": _server_side_ms(stats)}


def _server_side_ms(stats: dict[str, Any]) -> dict[str, Any]:
    """Where a request's time went inside Triton (per request, ms): queue, inputs in, the model (the Python backend's hop to its stub included), outputs out."""
    s = stats["model_stats"][0]["inference_stats"]
    out = {}
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        count = int(s.get(key, {}).get("count", 0))
        out[key] = round(int(s.get(key, {}).get("ns", 0)) / 1e6 / count, 2) if count else None
    return out


def _detector_path(cfg: Config) -> Path:
    from vcamd.modelstore.store import ModelStore

    return ModelStore.from_config(cfg.models).path_for(cfg.models.detector, "detector")


# -- several daemons, one server -------------------------------------------------------------------


def many_daemons(cfg: Config, server_cfg: Path, settings: BenchSettings, clip: Path, tmpdir: Path) -> dict[str, Any]:
    from vcamd.bench.runs import call_row, run_vcamd

    rows = []
    with _server(server_cfg, tmpdir, "daemons") as server:
        from vcamd.config.address import ServerAddress
        from vcamd.remote.link import ServerLink

        link = ServerLink(ServerAddress.parse(server.url))
        try:
            link.wait_up(60)
            remote_cfg = _with_server(cfg, server.url)
            name = next(m for m in link.served_models() if not m.endswith(".emap"))
            for count in DAEMON_COUNTS:
                before = _batch_counts(link.statistics(name))
                results: list[dict[str, Any]] = [{} for _ in range(count)]

                def one(i: int, count: int = count, results: list[dict[str, Any]] = results) -> None:
                    try:
                        results[i] = call_row(run_vcamd(remote_cfg, settings, clip, tmpdir, f"daemons{count}-{i}"), settings)
                    except Exception as exc:  # noqa: BLE001 — reported in the row
                        results[i] = {"error": str(exc)}

                threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                after = _batch_counts(link.statistics(name))
                batches = {size: after.get(size, 0) - before.get(size, 0) for size in sorted(after) if after.get(size, 0) - before.get(size, 0)}
                rows.append({"daemons": count, "runs": results, "batches": batches})
        finally:
            link.close()
    return {"rows": rows, "frames": settings.frames}


def _batch_counts(stats: dict[str, Any]) -> dict[int, int]:
    entries = stats["model_stats"][0].get("batch_stats", [])
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in entries}


# -- added delay ------------------------------------------------------------------------------------


@contextlib.contextmanager
def network_namespace(added_rtt_ms: float) -> Iterator[tuple[str, ...]]:
    """A network namespace of the bench's own whose loopback delays each packet by half of
    `added_rtt_ms` (`tc netem`); yields the prefix that runs a command inside it."""
    name = f"vcamd-bench-{os.getpid()}-{int(added_rtt_ms)}"
    ip, tc = shutil.which("ip"), shutil.which("tc")
    if ip is None or tc is None:
        raise OSError("`ip` and `tc` (iproute2) are needed")
    _sh([ip, "netns", "add", name])
    try:
        _sh([ip, "-n", name, "link", "set", "lo", "up"])
        if added_rtt_ms > 0:
            _sh([tc, "-n", name, "qdisc", "add", "dev", "lo", "root", "netem", "delay", f"{added_rtt_ms / 2:g}ms"])
        yield (ip, "netns", "exec", name)
    finally:
        subprocess.run([ip, "netns", "del", name], capture_output=True, check=False)


def _sh(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(command)}: {(done.stderr or done.stdout).strip()}")


def added_delay(cfg: Config, server_cfg: Path, settings: BenchSettings, clip: Path, tmpdir: Path) -> dict[str, Any]:
    """Local, then the server at each added round trip: through netem in a namespace where the kernel
    has it; where it does not (no sch_netem), through `DelayRelay`, said so in each row."""
    from vcamd.bench.runs import call_row, run_vcamd

    how = "netem"
    try:
        with network_namespace(max(ADDED_RTT_MS)):
            pass
    except OSError as exc:
        how = f"relay (no netem here: {exc})"
    rows = [{"where": "local", "added_rtt_ms": None} | call_row(run_vcamd(cfg, settings, clip, tmpdir, "delay-local"), settings)]
    for rtt in ADDED_RTT_MS:
        if how == "netem":
            with network_namespace(rtt) as prefix, _server(server_cfg, tmpdir, f"delay{rtt}", prefix=prefix) as server:
                stats = run_vcamd(_with_server(cfg, server.url), settings, clip, tmpdir, f"delay-{rtt}", prefix)
        else:
            with _server(server_cfg, tmpdir, f"delay{rtt}") as server, DelayRelay(server.port, rtt / 2) as port:
                stats = run_vcamd(_with_server(cfg, f"grpc://127.0.0.1:{port}"), settings, clip, tmpdir, f"delay-{rtt}")
        server_rtt = stats.get("server", {}) or {}
        rows.append({"where": "server", "added_rtt_ms": rtt, "rtt_ms": server_rtt.get("rtt_ms")} | call_row(stats, settings))
    return {"rows": rows, "how": how}


class DelayRelay:
    """A TCP relay on 127.0.0.1 that holds every chunk `one_way_ms` before passing it on, each way:
    the added round trip where the kernel has no netem. Order and bytes are kept; bandwidth is not limited."""

    def __init__(self, target_port: int, one_way_ms: float) -> None:
        self._target = target_port
        self._delay = one_way_ms / 1000.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._sockets: list[Any] = []

    def __enter__(self) -> int:
        threading.Thread(target=self._accept, name="delay-relay", daemon=True).start()
        return self.port

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                return
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                self._pipe(a, b)

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        held: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def read() -> None:
            while True:
                try:
                    data = source.recv(1 << 16)
                except OSError:
                    data = b""
                held.put((time.monotonic() + self._delay, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = held.get()
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                if not data:
                    with contextlib.suppress(OSError):
                        sink.shutdown(2)
                    return
                try:
                    sink.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()


# -- the server killed mid-run ------------------------------------------------------------------------


def killed_server(cfg: Config, settings: BenchSettings, image: Frame, tmpdir: Path) -> dict[str, Any]:
    """`vcamd run` (recording every published frame) on a server that is SIGKILLed once the swap is
    steady, for `KILLED_S`, then started again. The swapper puts a real stranger's face on every
    face (`leaks.build_identity_swapper`), so a frame where the real detectors and recogniser find
    the camera's person is a leak — raw face — whatever the outcome counters say."""
    from vcamd.bench import leaks
    from vcamd.control.client import ControlClient

    models = _detector_path(cfg).parent  # the shared assets' models: the checkers are beside the bench's detector
    images = models.parent / "images"
    if not all((models / name).is_file() for name in (*leaks.CHECK_DETECTORS, "mobilefacenet.onnx")):
        return {"skipped": f"the leak checkers' models are not beside the detector, in {models}"}
    detectors, recognizer = leaks.load_checkers(models)
    stranger_crop, stranger_embedding = leaks.stranger(images, detectors[0], recognizer)
    swapper = leaks.build_identity_swapper(tmpdir / "stranger_swapper.onnx", stranger_crop)
    frames_n = max(settings.frames, int(settings.fps * (KILLED_S + 10)))
    clip = leaks.still_clip(tmpdir / "killed.mp4", image, frames=int(settings.fps * 4), fps=settings.fps, detectors=detectors, recognizer=recognizer)
    with _server(_server_config(cfg, tmpdir / "serve-killed.toml", swapper), tmpdir, "killed") as server:
        run_cfg = _with_server(cfg.model_copy(update={"models": cfg.models.model_copy(update={"swapper": str(swapper)})}), server.url)
        config, out, stats_path = tmpdir / "killed.toml", tmpdir / "killed-out.mp4", tmpdir / "killed.json"
        from vcamd.bench.runs import _toml

        config.write_text(_toml(run_cfg.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
        runtime = tmpdir / "rt-killed"
        daemon = subprocess.Popen([sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(clip.path), "--loop",
                                   "--sink", f"file:{out}", "--stats-json", str(stats_path), "--no-tray"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "VCAMD_RUNTIME_DIR": str(runtime)})
        client = ControlClient(runtime, timeout_s=30.0)
        try:
            swapped = _wait_status(client, daemon, lambda s: s["frames"]["swapped"] >= 30, 300)["frames"]["swapped"]
            server.kill()
            t_kill = time.monotonic()
            time.sleep(KILLED_S)
            held = _wait_status(client, daemon, lambda s: True, 30)["frames"]
            server.start()
            t_ready = server.wait_ready()
            mark = held["swapped"]
            back = _wait_status(client, daemon, lambda s: s["frames"]["swapped"] > mark + 1, 120, poll_s=0.02)
            t_back = time.monotonic()
            published_at_return = back["frames"]["published"]
            _wait_status(client, daemon, lambda s: s["frames"]["published"] >= max(frames_n, published_at_return + 60), 300)
            client.quit()
            _, stderr = daemon.communicate(timeout=120)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.communicate()
    stats = json.loads(stats_path.read_text())
    published = leaks.read_video(out)
    found = leaks.find_leaks(published, clip.placements, detectors, recognizer, stranger_embedding)
    return {
        "killed_s": round(t_ready - t_kill, 1), "swapped_before": swapped, "frames": stats["frames"],
        "raw_face_frames": len({leak.frame for leak in found}), "leaks": [str(leak) for leak in found[:5]],
        "checked_frames": len(published), "swaps_back_s": round(t_back - t_ready, 2),
        "swap_age_ms": stats["swap_age_ms"], "latency_ms": stats["latency_ms"],
    }


def _wait_status(client: ControlClient, daemon: subprocess.Popen[str], condition: Callable[[dict[str, Any]], bool], timeout_s: float,
                 poll_s: float = 0.1) -> dict[str, Any]:
    from vcamd.control.protocol import ControlError, DaemonNotRunning

    deadline = time.monotonic() + timeout_s
    while True:
        if daemon.poll() is not None:
            raise RuntimeError(f"the daemon ended (exit {daemon.returncode}): {daemon.stderr.read()[-1500:] if daemon.stderr else ''}")
        status: dict[str, Any] | None
        try:
            status = client.status()
        except (DaemonNotRunning, ControlError):
            status = None
        if status and status.get("frames") and condition(status):
            return status
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not get there in {timeout_s:.0f} s: {status}")
        time.sleep(poll_s)

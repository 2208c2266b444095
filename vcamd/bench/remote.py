"""`vcamd bench --scenarios remote`: the swap on a Triton server (`vcamd serve`, PyTriton).

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
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vcamd.bench.settings import BenchSettings

log = logging.getLogger(__name__)

HOP_SWAPS = 300
HOP_BLOCK = 30
DAEMON_COUNTS = (1, 2, 4)
ADDED_RTT_MS = (0, 20, 50)
KILLED_S = 5.0


def run_remote(settings: BenchSettings, image, clip: Path, tmpdir: Path, base) -> dict:
    """Every part, with `settings.load` busy processes running throughout (`--load`: a call's load)."""
    from vcamd.bench.scenarios import busy_processes, scenario_config

    cfg = scenario_config("light", settings, tmpdir, base)
    server_cfg = _server_config(cfg, tmpdir / "serve.toml")
    out: dict = {"swapper": Path(cfg.models.swapper).name, "load": settings.load}
    with busy_processes(settings.load) as pids:
        out["load_pids"] = pids
        out["hop"] = hop_cost(cfg, server_cfg, image, tmpdir)
        out["daemons"] = many_daemons(cfg, server_cfg, settings, clip, tmpdir)
        out["delay"] = added_delay(cfg, server_cfg, settings, clip, tmpdir)
        out["killed"] = killed_server(cfg, settings, image, tmpdir)
    return out


def _server_config(cfg, path: Path, swapper: Path | None = None) -> Path:
    path.write_text(f'[models]\nswapper = "{swapper or cfg.models.swapper}"\nproviders = {json.dumps(list(cfg.models.providers))}\n'
                    f"threads = {cfg.models.threads}\n", encoding="utf-8")
    return path


@contextlib.contextmanager
def _server(config: Path, tmpdir: Path, name: str, *extra: str, prefix: tuple[str, ...] = ()) -> Iterator:
    from vcamd.bench.serving import ServerProcess

    server = ServerProcess(config, *extra, log=tmpdir / f"serve-{name}.log", prefix=prefix).start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _with_server(cfg, url: str):
    return cfg.model_copy(update={"models": cfg.models.model_copy(update={"server": url})})


# -- the hop -----------------------------------------------------------------------------------------


def hop_cost(cfg, server_cfg: Path, image, tmpdir: Path) -> dict:
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
        remote_sessions = make_sessions(remote_cfg, model_files(remote_cfg))
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


def _server_side_ms(stats: dict) -> dict:
    """Where a request's time went inside Triton (per request, ms): queue, inputs in, the model (PyTriton's proxy included), outputs out."""
    s = stats["model_stats"][0]["inference_stats"]
    out = {}
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        count = int(s.get(key, {}).get("count", 0))
        out[key] = round(int(s.get(key, {}).get("ns", 0)) / 1e6 / count, 2) if count else None
    return out


def _detector_path(cfg) -> Path:
    from vcamd.modelstore.store import ModelStore

    return ModelStore.from_config(cfg.models).path_for(cfg.models.detector, "detector")


# -- several daemons, one server -------------------------------------------------------------------


def many_daemons(cfg, server_cfg: Path, settings: BenchSettings, clip: Path, tmpdir: Path) -> dict:
    from vcamd.bench.scenarios import call_row, run_vcamd

    rows = []
    with _server(server_cfg, tmpdir, "daemons") as server:
        from vcamd.remote.address import ServerAddress
        from vcamd.remote.link import ServerLink

        link = ServerLink(ServerAddress.parse(server.url))
        try:
            link.wait_up(60)
            remote_cfg = _with_server(cfg, server.url)
            name = next(m for m in link.served_models() if not m.endswith(".emap"))
            for count in DAEMON_COUNTS:
                before = _batch_counts(link.statistics(name))
                results: list[dict] = [{} for _ in range(count)]

                def one(i: int, count: int = count, results: list[dict] = results) -> None:
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


def _batch_counts(stats: dict) -> dict[int, int]:
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


def added_delay(cfg, server_cfg: Path, settings: BenchSettings, clip: Path, tmpdir: Path) -> dict:
    """Local, then the server at each added round trip: through netem in a namespace where the kernel
    has it; where it does not (no sch_netem), through `DelayRelay`, said so in each row."""
    from vcamd.bench.scenarios import call_row, run_vcamd

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
        import socket

        self._target = target_port
        self._delay = one_way_ms / 1000.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._sockets: list = []

    def __enter__(self) -> int:
        threading.Thread(target=self._accept, name="delay-relay", daemon=True).start()
        return self.port

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        import socket

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

    def _pipe(self, source, sink) -> None:
        import queue

        held: queue.SimpleQueue = queue.SimpleQueue()

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


def killed_server(cfg, settings: BenchSettings, image, tmpdir: Path) -> dict:
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
        from vcamd.bench.scenarios import _toml

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


def _wait_status(client, daemon, condition, timeout_s: float, poll_s: float = 0.1) -> dict:
    from vcamd.control.protocol import ControlError, DaemonNotRunning

    deadline = time.monotonic() + timeout_s
    while True:
        if daemon.poll() is not None:
            raise RuntimeError(f"the daemon ended (exit {daemon.returncode}): {daemon.stderr.read()[-1500:] if daemon.stderr else ''}")
        try:
            status = client.status()
        except (DaemonNotRunning, ControlError):
            status = None
        if status and status.get("frames") and condition(status):
            return status
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not get there in {timeout_s:.0f} s: {status}")
        time.sleep(poll_s)


# -- what is printed ------------------------------------------------------------------------------------

TARGET_HOP_MS = 5.0
TARGET_DELAY_RTT_MS = 50
TARGET_SWAP_AGE_EXTRA_MS = 60.0
TARGET_BACK_S = 2.0


def remote_rows(r: dict, settings: BenchSettings) -> list:
    """The issue's targets: the hop's cost, 50 ms of added round trip against local, the server killed."""
    from vcamd.bench.report import TARGET_FPS_RATIO, TARGET_P99_BUDGET_MS, TargetRow, _upper

    scenario = f"remote, {r['load']} busy" if r.get("load") else "remote"

    rows = [_upper(scenario, f"a swap through a loopback server − in-process, p50 ({r['swapper']})", r["hop"]["hop_ms"], TARGET_HOP_MS, " ms")]
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
            rows.append(_upper(scenario, f"+50 ms RTT ({via}): capture→publish p99", far["latency_p99_ms"], TARGET_P99_BUDGET_MS + 1000.0 / settings.fps, " ms"))
            limit = local["swap_age_ms"]["p95"] + TARGET_SWAP_AGE_EXTRA_MS
            rows.append(_upper(scenario, f"+50 ms RTT ({via}): swap age p95 (local {local['swap_age_ms']['p95']:.0f} + 60)", far["swap_age_ms"]["p95"], limit, " ms"))
    killed = r["killed"]
    if "skipped" in killed:
        rows.append(TargetRow(scenario, "server killed", f"skipped: {killed['skipped']}", "", None, None))
    else:
        raw = killed["raw_face_frames"]
        rows.append(TargetRow(scenario, f"server killed, back {killed['killed_s']:.1f} s later: frames with a raw face (of {killed['checked_frames']})",
                              str(raw), "= 0", None, raw == 0))
        rows.append(_upper(scenario, "swapping again after the server's return", killed["swaps_back_s"], TARGET_BACK_S, " s"))
    return rows


def format_remote_table(r: dict, settings: BenchSettings) -> str:
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

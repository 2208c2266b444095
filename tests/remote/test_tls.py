"""Mutual TLS (every `vcamd serve` has it, loopback too): a server serves a client paired with its
bundle, and refuses one without the pairing certificate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.triton import TritonProcess

from vcamd.config.address import ServerAddress
from vcamd.faces.swap import Swapper
from vcamd.models.pipeline import make_sessions, model_files

from .conftest import write_server_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tls_server(served_files, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("triton-tls")
    bundle = folder / "bundle.json"
    server = TritonProcess(write_server_config(served_files, folder / "server.toml"), "--pairing-bundle", str(bundle),
                           log=folder / "serve.log").start()
    try:
        server.wait_ready()
        server.bundle = bundle  # type: ignore[attr-defined]
        yield server
    finally:
        server.stop()


def test_the_bundle_is_private_and_names_the_server(tls_server) -> None:
    bundle: Path = tls_server.bundle
    assert bundle.stat().st_mode & 0o077 == 0
    data = json.loads(bundle.read_text())
    assert data["server"] == tls_server.url
    assert "BEGIN CERTIFICATE" in data["certificate"] and "PRIVATE KEY" in data["key"] and "BEGIN CERTIFICATE" in data["ca"]


def test_a_paired_client_swaps_over_mutual_tls(tls_server, served_files, sessions) -> None:
    paired = subprocess.run([sys.executable, "-m", "vcamd", "pair", str(tls_server.bundle), "--server", tls_server.url],
                            capture_output=True, text=True, timeout=60)
    assert paired.returncode == 0, paired.stderr
    assert f'server = "{tls_server.url}"' in paired.stdout
    cfg = served_files.config(server=tls_server.url)
    remote = make_sessions(cfg, model_files(cfg))
    try:
        assert remote.link.tls
        assert remote.link.wait_up(60), remote.link.status()
        served, local = Swapper(Path("swapper"), remote), Swapper(served_files.swapper, sessions)
        crops = [np.random.default_rng(5).integers(0, 256, (128, 128, 3), dtype=np.uint8)]
        latent = local.latent(np.ones(512, np.float32))
        np.testing.assert_array_equal(served.swap(crops, latent)[0], local.swap(crops, latent)[0])
        assert remote.server_status()["tls"] is True
    finally:
        remote.close()


def _swaps_done(bundle: dict, url: str) -> int:
    """The server's count of swapper inferences, asked by a properly paired client."""
    import grpc
    import tritonclient.grpc as grpcclient

    creds = grpc.ssl_channel_credentials(bundle["ca"].encode(), bundle["key"].encode(), bundle["certificate"].encode())
    client = grpcclient.InferenceServerClient(ServerAddress.parse(url).target, creds=creds,
                                              channel_args=[("grpc.ssl_target_name_override", bundle["server_name"])])
    stats = client.get_inference_statistics("swapper", as_json=True)
    client.close()
    return int(stats["model_stats"][0].get("inference_count", 0))


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate", "plaintext"])
def test_a_client_without_the_pairing_certificate_is_refused(tls_server, tmp_path, who: str) -> None:
    import grpc
    import tritonclient.grpc as grpcclient

    bundle = json.loads(tls_server.bundle.read_text())
    before = _swaps_done(bundle, tls_server.url)
    target = ServerAddress.parse(tls_server.url).target
    options = [("grpc.ssl_target_name_override", bundle["server_name"])]
    if who == "no certificate":  # trusts the server, but has no client certificate
        client = grpcclient.InferenceServerClient(target, creds=grpc.ssl_channel_credentials(bundle["ca"].encode()), channel_args=options)
    elif who == "another CA's certificate":
        from vcamd.remote.pairing import server_credentials

        _, other = server_credentials(tmp_path / "other-server")
        creds = grpc.ssl_channel_credentials(bundle["ca"].encode(), other.key, other.certificate)
        client = grpcclient.InferenceServerClient(target, creds=creds, channel_args=options)
    else:
        client = grpcclient.InferenceServerClient(target)
    crop = grpcclient.InferInput("target", [1, 3, 128, 128], "UINT8")
    crop.set_data_from_numpy(np.zeros((1, 3, 128, 128), np.uint8))
    latent = grpcclient.InferInput("source", [1, 512], "FP32")
    latent.set_data_from_numpy(np.ones((1, 512), np.float32))
    with pytest.raises(Exception) as refused:
        client.get_model_metadata("swapper", client_timeout=10)
    assert "UNAVAILABLE" in str(refused.value) or "handshake" in str(refused.value).lower() or "ssl" in str(refused.value).lower(), refused.value
    with pytest.raises(Exception):
        client.infer("swapper", [crop, latent], client_timeout=10)
    client.close()
    assert _swaps_done(bundle, tls_server.url) == before, "the server ran a request of an unpaired client"


def test_the_daemon_refuses_a_plaintext_url_beyond_this_machine(served_files) -> None:
    """No pairing for a host elsewhere: refused before anything is sent (nothing listens at that
    documentation address; the refusal must come from the client, at once)."""
    from vcamd.common.errors import VcamdError

    cfg = served_files.config(server="grpc://192.0.2.10:8001")
    with pytest.raises(VcamdError) as refused:
        make_sessions(cfg, model_files(cfg))
    assert "not on this machine" in str(refused.value) and "vcamd pair" in str(refused.value)



def test_a_link_started_before_the_users_first_server_reaches_it(served_files, tmp_path, monkeypatch) -> None:
    """On loopback the client takes this user's own server's certificates from its state folder; a
    daemon started before the server ever ran (none there yet) reads them again while the server
    is away, and swaps once it runs."""
    from vcamd.remote.link import ServerLink

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # no server has run for this user: no certificates yet
    server = TritonProcess(write_server_config(served_files, tmp_path / "server.toml"), log=tmp_path / "serve.log")
    link = ServerLink(ServerAddress.parse(server.url))
    try:
        assert not link.tls
        server.start().wait_ready()
        assert link.wait_up(60), link.status()
        assert link.tls
    finally:
        link.close()
        server.stop()

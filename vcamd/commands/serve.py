"""`vcamd serve` (a Triton server running this config's face models) and `vcamd pair` (a client
paired with one beyond its machine)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from vcamd.commands import Subcommands, add_config_option

if TYPE_CHECKING:
    from vcamd.config.address import ServerAddress


def register(subparsers: Subcommands) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the face models on this machine for other machines' cameras (NVIDIA Triton Inference Server)",
        description="Start a Triton Inference Server (the nvidia-pytriton wheel's) that runs the swapper, and the enhancer and parser when "
        "set, of this config through ONNX Runtime with this machine's providers, batching the requests of every client. "
        "Clients set [models] server = \"grpc://HOST:PORT\". Listens on 127.0.0.1 unless --listen says otherwise; "
        "any other address uses mutual TLS and writes a pairing bundle for the clients. "
        "--write-repository DIR instead writes a model repository for NVIDIA's Triton container.",
    )
    add_config_option(p)
    p.add_argument("--listen", default="127.0.0.1:8001", metavar="HOST:PORT",
                   help="where Triton's gRPC API listens (default 127.0.0.1:8001; 0.0.0.0:8001 = every interface, with mutual TLS)")
    p.add_argument("--max-batch", type=int, default=8, metavar="N", help="the most requests Triton runs as one batch (default 8)")
    p.add_argument("--queue-delay-us", type=int, default=0, metavar="US",
                   help="how long Triton may hold a request to batch it with others (default 0: never waits)")
    p.add_argument("--instances", type=int, default=1, metavar="N", help="model instances running side by side (default 1)")
    p.add_argument("--pairing-bundle", type=Path, default=None, metavar="FILE",
                   help="where to write the clients' pairing bundle (default: the server's private folder)")
    p.add_argument("--tls", action="store_true", help=argparse.SUPPRESS)  # kept for old scripts: mutual TLS is always on now
    p.add_argument("--new-pairing", action="store_true", help="make new certificates: clients paired before are refused")
    p.add_argument("--write-repository", type=Path, default=None, metavar="DIR",
                   help="write a Triton model repository (config.pbtxt, onnxruntime backend) for NVIDIA's Triton container and exit")
    p.set_defaults(func=handle)

    q = subparsers.add_parser(
        "pair",
        help="pair this client with a `vcamd serve` beyond this machine (its pairing bundle)",
        description="Keep the pairing bundle `vcamd serve --listen` wrote (its CA, and this client's certificate "
        "and key) in a private folder, so [models] server can reach that server over mutual TLS.",
    )
    q.add_argument("bundle", type=Path, metavar="BUNDLE", help="the pairing bundle copied from the server")
    q.add_argument("--server", default=None, metavar="URL",
                   help="the address this client reaches the server by, when not the bundle's (e.g. grpc://gpu-box:8001)")
    q.set_defaults(func=handle_pair)


def _address(text: str, flag: str) -> ServerAddress:
    from vcamd.common.errors import VcamdError
    from vcamd.config.address import ServerAddress

    try:
        return ServerAddress.parse(text if "://" in text else f"grpc://{text}")
    except ValueError as exc:
        raise VcamdError(f"{flag} {text}: {exc}", fix=f"e.g. {flag} 127.0.0.1:8001") from None


def handle(args: argparse.Namespace) -> int:
    from vcamd.common.errors import VcamdError
    from vcamd.config.reading import load_config
    from vcamd.system.logs import setup_logging

    cfg, _ = load_config(args.config)
    setup_logging("debug" if args.verbose else cfg.runtime.log_level)
    for flag, value, low in (("--max-batch", args.max_batch, 1), ("--instances", args.instances, 1), ("--queue-delay-us", args.queue_delay_us, 0)):
        if value < low:
            raise VcamdError(f"{flag} {value}: must be at least {low}")
    if args.write_repository is not None:
        from vcamd.remote.pairing import server_credentials, write_bundle
        from vcamd.remote.repository import write_repository
        from vcamd.remote.serve import public_address

        folder = args.write_repository
        written = write_repository(cfg, folder, max_batch=args.max_batch, instances=args.instances, queue_delay_us=args.queue_delay_us)
        # Mutual TLS for the container too: its certificates beside the repository, the clients' bundle with them.
        tls = folder.parent / f"{folder.name}-tls"
        files, pairing = server_credentials(tls, renew=args.new_pairing)
        listen = _address(args.listen, "--listen")
        bundle = write_bundle(pairing, public_address(listen), args.pairing_bundle or tls / "pairing.json")
        print(f"wrote a Triton model repository to {folder}: {', '.join(written)}")
        print(f"certificates for mutual TLS in {tls}; the clients' pairing bundle: {bundle} (`vcamd pair` it on each client)")
        print(f"run it: docker run --gpus all --rm -p {listen.port}:8001 -v {folder.resolve()}:/models:ro -v {tls.resolve()}:/tls:ro "
              "nvcr.io/nvidia/tritonserver:<YY.MM>-py3 tritonserver --model-repository=/models --allow-http=false "
              "--allow-metrics=false --grpc-use-ssl=true --grpc-use-ssl-mutual=true --grpc-server-cert=/tls/server.pem "
              "--grpc-server-key=/tls/server.key --grpc-root-cert=/tls/ca.pem")
        return 0
    from vcamd.remote.serve import ServeOptions, serve

    options = ServeOptions(_address(args.listen, "--listen"), max_batch=args.max_batch, queue_delay_us=args.queue_delay_us,
                           instances=args.instances, renew_pairing=args.new_pairing, bundle=args.pairing_bundle)
    try:
        serve(cfg, options, announce=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        pass
    return 0


def handle_pair(args: argparse.Namespace) -> int:
    from vcamd.remote.pairing import install_bundle

    server = _address(args.server, "--server") if args.server else None
    path, address = install_bundle(args.bundle, server)
    print(f"paired with {address} (kept in {path})")
    print(f'set it in the config: [models] server = "{address}"')
    return 0

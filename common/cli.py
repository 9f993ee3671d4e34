"""The `astrai` command line: serve, gateway, worker, keys, bench."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from common.wire import DEFAULT_WORKER_BIND

if TYPE_CHECKING:  # each command loads its side on demand, the gateway included
    from gateway.config import GatewayConfig

DTYPES = ("auto", "float32", "bfloat16", "float16")
# worker.engine.options has the same; the cli must not import torch.
QUANTIZATIONS = ("auto", "none", "int8", "int4", "q4_1")


def _gateway_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (loopback)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=os.environ.get("ASTRAI_API_KEY"))
    parser.add_argument(
        "--routing", default="cache_aware", choices=("cache_aware", "least_loaded", "round_robin")
    )
    parser.add_argument("--heartbeat-timeout", type=float, default=3.0, metavar="SECONDS")
    parser.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--max-in-flight", type=int, default=256)
    parser.add_argument("--max-queued", type=int, default=512)
    parser.add_argument("--queue-timeout", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--drain-timeout", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="a client that takes longer to send its request line and headers gets 408",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a client that takes longer to send its request body gets 408",
    )
    parser.add_argument("--curve-secret-key", default=None, help="gateway .key_secret (CURVE)")
    parser.add_argument(
        "--curve-authorized-keys", default=None, help="folder of worker .key files allowed"
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let browser pages from ORIGIN (e.g. http://localhost:3000, or *) call the API; "
        "repeatable; CORS is off without it",
    )
    parser.add_argument(
        "--no-console",
        action="store_true",
        help="do not serve the web console at / (then / is a 404 like any unknown route)",
    )


def _engine_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="HF folder or .gguf (default: SmolLM2-135M)")
    parser.add_argument("--served-model-name", default=None, help="name clients use for it")
    parser.add_argument(
        "--device",
        default="cpu",
        help="cpu, cuda or cuda:K (astrai serve: cuda puts worker i on cuda:i)",
    )
    parser.add_argument("--dtype", default="auto", choices=DTYPES)
    parser.add_argument("--kv-cache-mb", type=int, default=1024)
    parser.add_argument("--max-seqs", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--prefill-token-budget", type=int, default=512)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument(
        "--quantization",
        default="auto",
        choices=QUANTIZATIONS,
        help="auto: a Q4_1 GGUF's own 4-bit codes in native CPU kernels, else none; q4_1: "
        "Q4_1 layers + Q8_0 output layer for any model (CPU); int8: W8A8 linears (less "
        "exact); int4: torch's 4-bit kernel; none: float weights",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the decode step of < 16 sequences (faster; ~1-2 min more at start)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="astrai", description="AstrAI Serve")
    parser.add_argument("--log-level", default="info")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="a gateway plus N local workers")
    _gateway_args(serve)
    _engine_args(serve)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument(
        "--worker-bind", default=None, help="worker socket (default: a free loopback port)"
    )
    serve.add_argument("--startup-timeout", type=float, default=600.0, metavar="SECONDS")

    gateway = sub.add_parser("gateway", help="the HTTP gateway alone")
    _gateway_args(gateway)
    gateway.add_argument("--worker-bind", default=DEFAULT_WORKER_BIND)

    worker = sub.add_parser("worker", help="one worker process that dials a gateway")
    worker.add_argument(
        "--gateway", default=DEFAULT_WORKER_BIND, help="the gateway's worker socket"
    )
    _engine_args(worker)
    worker.add_argument("--worker-id", default=None)
    worker.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    worker.add_argument(
        "--health-port", type=int, default=None, help="serve /live and /ready for probes"
    )
    worker.add_argument("--curve-server-key", default=None, help="the gateway's public .key")
    worker.add_argument("--curve-secret-key", default=None, help="this worker's .key_secret")

    keys = sub.add_parser("keys", help="generate a CURVE key pair for a gateway or worker")
    keys.add_argument("--out", default="keys", help="folder for NAME.key and NAME.key_secret")
    keys.add_argument("--name", default="gateway")

    from bench.cli import add_arguments

    add_arguments(sub.add_parser("bench", help="load generator: sweep a server, report, plot"))
    return parser


def gateway_config(args: argparse.Namespace) -> GatewayConfig:
    """The GatewayConfig of `astrai gateway`'s parsed arguments."""
    from gateway.config import GatewayConfig

    return GatewayConfig(
        host=args.host,
        port=args.port,
        worker_bind=args.worker_bind,
        api_key=args.api_key,
        routing=args.routing,
        heartbeat_timeout_s=args.heartbeat_timeout,
        max_body_bytes=args.max_body_bytes,
        max_in_flight=args.max_in_flight,
        max_queued=args.max_queued,
        queue_timeout_s=args.queue_timeout,
        drain_timeout_s=args.drain_timeout,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        curve_secret_key=args.curve_secret_key,
        curve_authorized_keys=args.curve_authorized_keys,
        cors_origins=tuple(args.cors_origin),
        console=not args.no_console,
    )


def run_gateway(args: argparse.Namespace) -> int:
    from gateway.server import run_gateway as serve

    serve(gateway_config(args), args.log_level)
    return 0


def run_worker(args: argparse.Namespace) -> int:
    import socket
    import uuid

    from worker.engine.inference_engine import InferenceEngine
    from worker.server.process import serve_worker
    from worker.server.worker_config import WorkerConfig

    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    config = WorkerConfig(
        gateway=args.gateway,
        worker_id=worker_id,
        curve_server_key=args.curve_server_key,
        curve_secret_key=args.curve_secret_key,
    )
    engine = InferenceEngine(
        args.model,
        served_model_name=args.served_model_name,
        device=args.device,
        dtype=args.dtype,
        kv_cache_mb=args.kv_cache_mb,
        max_seqs=args.max_seqs,
        max_model_len=args.max_model_len,
        prefill_token_budget=args.prefill_token_budget,
        enable_prefix_caching=not args.no_prefix_caching,
        num_threads=args.threads,
        quantization=args.quantization,
        compile=args.compile,
    )
    serve_worker(engine, config, args.health_port)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    if args.command == "gateway":
        return run_gateway(args)
    if args.command == "worker":
        return run_worker(args)
    if args.command == "keys":
        from pathlib import Path

        from common.curve import generate_keys

        public, secret = generate_keys(Path(args.out), args.name)
        print(f"public key (share it): {public}\nsecret key (keep it):  {secret}")
        return 0
    if args.command == "bench":
        from bench.cli import run

        return run(args)
    from common.supervisor import run_serve

    return run_serve(args)


if __name__ == "__main__":
    sys.exit(main())

"""Command line: `egg-mcp serve | doctor | demo | calibrate | bench`.

Logging goes to stderr: on stdio the protocol owns stdout, and nothing else may write there.
"""

from __future__ import annotations

import argparse
import hmac
import logging
import os
import sys
from pathlib import Path

from egg_mcp import __version__
from egg_mcp.config import ServerConfig

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workspace", type=Path, help="workspace directory (default: user data dir or $EGG_MCP_WORKSPACE)")
    p.add_argument("--kernelbench-dir", type=Path, help="KernelBench checkout for ids like level1/23 "
                   "(or $EGG_MCP_KERNELBENCH_DIR)")
    p.add_argument("--allow-dir", type=Path, action="append", default=[],
                   help="directory whose files start_task may read and export_kernel may write (repeatable)")
    p.add_argument("--interpreter", action="store_true",
                   help="evaluate with the Triton CPU interpreter even when a GPU is present")
    p.add_argument("--log-level", default=os.environ.get("EGG_MCP_LOG_LEVEL", "INFO"),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], type=str.upper,
                   help="server log level, logs go to stderr (default INFO or $EGG_MCP_LOG_LEVEL)")
    p.add_argument("--compile-timeout", type=_seconds, metavar="S",
                   help="limit on loading/compiling a candidate (default 120; $EGG_MCP_COMPILE_TIMEOUT_S)")
    p.add_argument("--run-timeout", type=_seconds, metavar="S",
                   help="ceiling of a verify's run phase (default 300; $EGG_MCP_RUN_TIMEOUT_S); the limit used is "
                        "clamp(100 x eager time x 200 calls, floor, this)")
    p.add_argument("--run-timeout-floor", type=_seconds, metavar="S",
                   help="floor of the derived run limit (default 30; $EGG_MCP_RUN_TIMEOUT_FLOOR_S)")
    p.add_argument("--analysis-timeout", type=_seconds, metavar="S",
                   help="limit on start_task's reference analysis (default 120; $EGG_MCP_ANALYSIS_TIMEOUT_S)")
    p.add_argument("--max-eval-gib", type=_seconds, metavar="GIB",
                   help="largest estimated problem size size_overrides may ask for (default 16; $EGG_MCP_MAX_EVAL_GIB)")


def _add_ray(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", metavar="auto|ADDRESS", default=os.environ.get("EGG_MCP_RAY"),
                   help="cluster mode: evaluation jobs run on one lane per GPU of this Ray cluster ('auto': the "
                        "cluster this machine belongs to; or HEAD:6379 / ray://HEAD:10001; or $EGG_MCP_RAY). "
                        'Needs pip install "egg-mcp[ray]" here and on every node')


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{raw!r} must be a finite number > 0")
    return value


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    cfg = ServerConfig()
    updates: dict = {}
    if args.workspace:
        updates["workspace"] = args.workspace
    if args.kernelbench_dir:
        updates["kernelbench_dir"] = args.kernelbench_dir
    if args.allow_dir:
        updates["allowed_roots"] = cfg.allowed_roots + list(args.allow_dir)
    if args.interpreter:
        updates["force_interpreter"] = True
    for flag, field in (("compile_timeout", "compile_timeout_s"), ("run_timeout", "run_timeout_s"),
                        ("run_timeout_floor", "run_timeout_floor_s"), ("analysis_timeout", "analysis_timeout_s")):
        if getattr(args, flag, None) is not None:
            updates[field] = getattr(args, flag)
    if getattr(args, "ray", None):
        updates["ray_address"] = args.ray
    if getattr(args, "max_eval_gib", None) is not None:
        updates["max_eval_bytes"] = int(args.max_eval_gib * 2**30)
    return cfg.model_copy(update=updates)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egg-mcp", description="MCP server for expert-guided Triton kernel generation")
    parser.add_argument("--version", action="version", version=f"egg-mcp {__version__}")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    _add_common(serve)
    _add_ray(serve)
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port with --http (default 8765)")
    serve.add_argument("--token", default=os.environ.get("EGG_MCP_TOKEN"),
                       help="bearer token required on every HTTP request (required beyond loopback; or $EGG_MCP_TOKEN)")
    serve.add_argument("--allowed-host", action="append", default=[],
                       help="extra Host header value accepted over HTTP (DNS-rebinding protection), e.g. gpu-box:8765")

    doctor = sub.add_parser("doctor", help="what this machine offers: GPUs, Triton, ncu, interpreter; workspace health")
    _add_common(doctor)
    _add_ray(doctor)
    doctor.add_argument("--start-empty", action="store_true",
                        help="recovery: move a damaged workspace database to <workspace>/damaged/ and start empty")

    demo = sub.add_parser("demo", help="drive the whole workflow on a built-in problem with shipped kernels")
    _add_common(demo)
    demo.add_argument("--problem", default="softmax",
                      help="built-in problem with shipped demo kernels (egg_mcp/e2e/demo_kernels/; default softmax)")
    demo.add_argument("--json", type=Path, help="also write the stage table as JSON here")

    calibrate = sub.add_parser("calibrate", help="measure this GPU's ceilings (bandwidths, FLOP rates) and store them")
    _add_common(calibrate)
    calibrate.add_argument("--out", type=Path, help="also write the calibration JSON here")
    calibrate.add_argument("--quick", action="store_true", help="smaller probes (a few seconds; for tests)")
    calibrate.add_argument("--ncu", action="store_true",
                           help="also read each GEMM's pipe busy share and the L2 probe's L2 throughput "
                                "(its row beside ncu's peak for the L2 slices' SM-read path) with ncu, in one job "
                                "(+~10-30 s)")

    bench = sub.add_parser("bench", help="evaluate a folder of solutions against KernelBench-format problems")
    _add_common(bench)
    bench.add_argument("solutions", type=Path, help="folder of <problem-name>.py files defining ModelNew")
    bench.add_argument("--problems", type=Path, help="folder of problems (default: --kernelbench-dir)")
    bench.add_argument("--out", type=Path, default=Path("egg-bench-results"), help="output folder")
    bench.add_argument("--level", action="append", default=[], help="restrict to these levels (repeatable)")
    _add_ray(bench)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        sys.exit(2)
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        sys.exit(serve(args))
    if args.command == "doctor":
        from egg_mcp.doctor import run_doctor

        sys.exit(run_doctor(config_from_args(args), start_empty=args.start_empty))
    if args.command == "demo":
        from egg_mcp.e2e.demo import run_demo_cli

        sys.exit(run_demo_cli(args, config_from_args(args)))
    if args.command == "calibrate":
        from egg_mcp.calibration.cli import run_calibrate_cli

        sys.exit(run_calibrate_cli(args, config_from_args(args)))
    if args.command == "bench":
        from egg_mcp.e2e.bench import run_bench_cli

        sys.exit(run_bench_cli(args, config_from_args(args)))


def _create_server(config: ServerConfig):
    """The server, or None after a clear message when cluster mode cannot start (no Ray, no cluster)."""
    from egg_mcp.cluster.ray_lanes import ClusterError
    from egg_mcp.server import create_server

    try:
        return create_server(config)
    except ClusterError as exc:
        print(f"egg-mcp serve: {exc}", file=sys.stderr)
        return None


def serve(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if not args.http:
        import anyio

        from egg_mcp.transport import run_stdio

        mcp = _create_server(config)
        if mcp is None:
            return 2
        anyio.run(run_stdio, mcp)  # answers malformed JSON-RPC lines (the SDK's stdio drops them)
        return 0
    if args.host not in LOOPBACK and not args.token:
        print(f"refusing to serve on {args.host} without a bearer token: anyone who reaches this port could run "
              "code on this machine. Pass --token (or set EGG_MCP_TOKEN), or bind to 127.0.0.1.", file=sys.stderr)
        return 2
    import uvicorn

    mcp = _create_server(config)
    if mcp is None:
        return 2
    app = build_http_app(mcp, host=args.host, port=args.port, token=args.token, extra_hosts=args.allowed_host)
    logging.getLogger(__name__).info("serving MCP over HTTP at http://%s:%d/mcp", args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def build_http_app(mcp, *, host: str, port: int, token: str | None, extra_hosts: list[str]):
    """Streamable-HTTP app with DNS-rebinding (Host/Origin) protection on, and a bearer-token check in
    front of everything when a token is set."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    if host not in LOOPBACK:
        hosts.append(f"{host}:*")
        origins.append(f"http://{host}:*")
    for extra in extra_hosts:
        hosts.append(extra)
        origins.append(f"http://{extra}")
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    from egg_mcp.transport import CheckedJsonRpcMiddleware

    app = CheckedJsonRpcMiddleware(mcp.streamable_http_app(transport_security=security, host=host))
    return BearerTokenMiddleware(app, token) if token else app


UNAUTHORIZED_BODY = (
    b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": "HTTP 401: missing or wrong bearer '
    b"token: send 'Authorization: Bearer <token>' with the server's --token / EGG_MCP_TOKEN\"}}\n"
)


class BearerTokenMiddleware:
    """Rejects every HTTP request whose `Authorization: Bearer <token>` does not match (constant-time)."""

    def __init__(self, app, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            supplied = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self.expected):
                # A JSON-RPC error body: MCP clients (the SDK's among them) show its message instead of
                # a bare "Server returned an error response".
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
                return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    main()

"""Command line: `egg-mcp serve | doctor | demo | calibrate | bench`.

Logging goes to stderr: on stdio the protocol owns stdout, and nothing else may write there.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from egg_mcp import __version__
from egg_mcp.config import ServerConfig, log_level_setting, ray_setting, token_setting

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workspace", type=Path, help="workspace directory (default: user data dir or $EGG_MCP_WORKSPACE)")
    p.add_argument("--kernelbench-dir", type=Path, help="KernelBench checkout for ids like level1/23 "
                   "(or $EGG_MCP_KERNELBENCH_DIR)")
    p.add_argument("--scratch-dir", type=Path, help="where job folders go (default: $EGG_MCP_SCRATCH, else "
                   "<temp dir>/egg-mcp-<uid>/<workspace hash>, outside the workspace)")
    p.add_argument("--allow-dir", type=Path, action="append", default=[],
                   help="directory whose files start_task may read and export_kernel may write (repeatable)")
    p.add_argument("--interpreter", action="store_true",
                   help="evaluate with the Triton CPU interpreter even when a GPU is present")
    p.add_argument("--log-level", default=log_level_setting(),
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
    p.add_argument("--unsafe-sandbox-floor", choices=["landlock", "env", "none"], default=None, metavar="LEVEL",
                   help="UNSAFE: run candidates even where the runner's sandbox is below the default floor (every "
                        "layer the kernel offers, at least Landlock + user/PID namespaces): landlock (no "
                        "namespaces), env (no filesystem confinement: candidates can read and write what this "
                        "user can) or none; the weak level is said at start and in every result "
                        "($EGG_MCP_UNSAFE_SANDBOX_FLOOR)")
    p.add_argument("--max-eval-gib", type=_seconds, metavar="GIB",
                   help="largest estimated problem size size_overrides may ask for (default 16; $EGG_MCP_MAX_EVAL_GIB)")


def _add_ray(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", metavar="auto|ADDRESS", default=ray_setting(),
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


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{raw!r} must be >= 1")
    return value


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    cfg = ServerConfig()
    updates: dict = {}
    if args.workspace:
        updates["workspace"] = args.workspace
    if args.kernelbench_dir:
        updates["kernelbench_dir"] = args.kernelbench_dir
    if getattr(args, "scratch_dir", None):
        updates["scratch"] = args.scratch_dir
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
    if getattr(args, "unsafe_sandbox_floor", None):
        updates["unsafe_sandbox_floor"] = args.unsafe_sandbox_floor
    if getattr(args, "max_eval_gib", None) is not None:
        updates["max_eval_bytes"] = int(args.max_eval_gib * 2**30)
    return cfg.model_copy(update=updates)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egg-mcp",
                                     description="MCP server for expert-guided Triton kernel generation")
    parser.add_argument("--version", action="version", version=f"egg-mcp {__version__}")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    _add_common(serve)
    _add_ray(serve)
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port with --http (default 8765), 0: any free port")
    serve.add_argument("--uds", metavar="PATH",
                       help="with --http: listen on a unix socket created with mode 0600 instead of TCP (the "
                            "token is still required)")
    serve.add_argument("--token", default=None,
                       help="deprecated: a command line is visible to every local user (ps); set $EGG_MCP_TOKEN "
                            "instead. Without either, serve --http generates a token and prints it once")
    serve.add_argument("--allowed-host", action="append", default=[],
                       help="extra Host header value accepted over HTTP (DNS-rebinding protection), e.g. gpu-box:8765")
    serve.add_argument("--max-connections", type=_positive_int, metavar="N",
                       help="HTTP: open connections in total (default: the file-descriptor limit, raised to its "
                            "hard limit at start, less 256)")
    serve.add_argument("--max-connections-per-client", type=_positive_int, metavar="N",
                       help="HTTP: open connections from one client address (default: the total; a unix socket "
                            "is one client)")
    serve.add_argument("--header-timeout", type=_seconds, default=10.0, metavar="S",
                       help="HTTP: a client must send a complete request head within S seconds (default 10)")
    serve.add_argument("--body-timeout", type=_seconds, default=30.0, metavar="S",
                       help="HTTP: a request body must be complete S seconds after its head (default 30)")

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
        from egg_mcp.calibration.calibrate_command import run_calibrate_cli

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


def sandbox_banner(config: ServerConfig) -> str:
    """What serve states on stderr at start: the runners' sandbox level against the floor, and, below it, why
    candidates will not run and how to fix the host or opt in knowingly."""
    from egg_mcp.sandbox import probe
    from egg_mcp.sandbox.floor import floor_for

    floor = floor_for(probe(), config.unsafe_sandbox_floor)
    text = f"egg-mcp serve: {floor.line()}\n"
    if not floor.runs_candidates:
        text += f"egg-mcp serve: {floor.refusal()}\n"
    return text


def serve(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    sys.stderr.write(sandbox_banner(config))
    sys.stderr.flush()
    if not args.http:
        import anyio

        from egg_mcp.transport.stdio import run_stdio

        mcp = _create_server(config)
        if mcp is None:
            return 2
        anyio.run(run_stdio, mcp)  # answers malformed JSON-RPC lines (the SDK's stdio drops them)
        return 0
    from egg_mcp.transport.auth import resolve_token, token_banner
    from egg_mcp.transport.connection_guard import HttpLimits
    from egg_mcp.transport.http import serve_http, tcp_listener, unix_listener

    if args.token:
        print("egg-mcp serve: --token is visible to every local user in the process list; set EGG_MCP_TOKEN "
              "instead.", file=sys.stderr)
    token, generated = resolve_token(args.token or token_setting())
    if not generated and len(token) < 16:
        print("egg-mcp serve: the token is shorter than 16 characters: easy to guess; a generated one has 43.",
              file=sys.stderr)
    limits = HttpLimits(header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout,
                        max_connections=args.max_connections, max_per_client=args.max_connections_per_client)
    try:
        sock = (unix_listener(args.uds, limits.backlog) if args.uds
                else tcp_listener(args.host, args.port, limits.backlog))
    except OSError as exc:
        print(f"egg-mcp serve: cannot listen on {args.uds or f'{args.host}:{args.port}'}: {exc}", file=sys.stderr)
        return 2
    mcp = _create_server(config)
    if mcp is None:
        return 2
    from egg_mcp.transport.http import install_log_rate_limit

    install_log_rate_limit()
    host = "localhost" if args.uds else args.host
    port = sock.getsockname()[1] if not args.uds else args.port
    app = build_http_app(mcp, host=host, port=port, token=token, extra_hosts=args.allowed_host,
                         max_body_bytes=limits.max_body_bytes)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/mcp" if not args.uds else "http://localhost/mcp"
    sys.stderr.write(token_banner(token, generated, url, uds=args.uds))
    sys.stderr.flush()
    logging.getLogger(__name__).info("serving MCP over HTTP at %s", f"unix:{args.uds}" if args.uds else url)
    serve_http(app, sock, limits)
    return 0


def build_http_app(mcp, *, host: str, port: int, token: str, extra_hosts: list[str],
                   max_body_bytes: int | None = None):
    """Streamable-HTTP app with DNS-rebinding (Host/Origin) protection on, behind a bearer-token check
    that every request passes first (loopback and unix socket included)."""
    from mcp.server.transport_security import TransportSecuritySettings

    from egg_mcp.transport.auth import BearerTokenMiddleware
    from egg_mcp.transport.jsonrpc_check import MAX_BODY_BYTES, CheckedJsonRpcMiddleware

    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", "localhost"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    if host not in LOOPBACK:
        hosts.append(f"{host}:*")
        origins.append(f"http://{host}:*")
    for extra in extra_hosts:
        hosts.append(extra)
        origins.append(f"http://{extra}")
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    app = CheckedJsonRpcMiddleware(mcp.streamable_http_app(transport_security=security, host=host),
                                   max_body_bytes=max_body_bytes or MAX_BODY_BYTES)
    return BearerTokenMiddleware(app, token)


if __name__ == "__main__":
    main()

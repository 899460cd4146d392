"""Slow-client flood against `egg-mcp serve --http`, and authenticated clients timed while it runs.

The flood keeps N sockets open that each send a partial request head and stall (slowloris); a socket
the server closes is reopened at once, so the pressure stays at N. Sources rotate over loopback
addresses (127.0.0.1 .. 127.0.0.K) so both the per-client and the total connection cap are exercised,
with 127.0.0.1 shared with the authenticated client on purpose.

Used by tests/test_http_limits.py and as a benchmark:
    python -m tests.http_flood --flood 20000 --clients 4 --calls 50 \
        --out benchmarks/results/cpu_<date>/http_slow_client_flood_latency_<commit>.json
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

PROTOCOL = "2025-06-18"
PARTIAL_HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: "


def raise_fd_limit(want: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, max(soft, want)) if hard != resource.RLIM_INFINITY else max(soft, want)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def flood(port: int, n: int, seconds: float, sources: int = 8, host: str = "127.0.0.1") -> dict:
    """Hold `n` half-open connections for `seconds`; returns counts seen from the attacker's side."""
    n = min(n, raise_fd_limit(n + 64) - 64)
    sel = selectors.DefaultSelector()
    stats = FLOOD_STATS
    stats.update({"target": n, "attempts": 0, "closed_by_server": 0, "connect_errors": 0, "max_connected": 0,
             "bytes_received": 0})
    connected = 0
    i = 0

    def open_one():
        nonlocal i
        src = f"127.0.0.{1 + i % sources}"
        i += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((src, 0))
        except OSError:
            pass
        stats["attempts"] += 1
        err = s.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS):
            stats["connect_errors"] += 1
            s.close()
            return False
        sel.register(s, selectors.EVENT_WRITE, "connecting")
        return True

    live = 0
    end = time.monotonic() + seconds
    while live < n and time.monotonic() < end:
        if open_one():
            live += 1
    while time.monotonic() < end:
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            assert isinstance(s, socket.socket)  # only sockets are registered
            if key.data == "connecting":
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    stats["connect_errors"] += 1
                    sel.unregister(s)
                    s.close()
                    live -= 1
                    continue
                try:
                    s.send(PARTIAL_HEAD)
                except OSError:
                    pass
                sel.modify(s, selectors.EVENT_READ, "stalled")
                connected += 1
                stats["max_connected"] = max(stats["max_connected"], connected)
                continue
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            stats["bytes_received"] += len(data)
            if data:
                continue
            stats["closed_by_server"] += 1
            sel.unregister(s)
            s.close()
            connected -= 1
            live -= 1
        while live < n and time.monotonic() < end:
            if not open_one():
                break
            live += 1
    for key in list(sel.get_map().values()):
        s = key.fileobj
        assert isinstance(s, socket.socket)
        s.close()
    return stats


def post(url: str, token: str | None, body: dict | bytes, session: str | None = None, timeout: float = 30):
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": PROTOCOL}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    if session:
        headers["mcp-session-id"] = session
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace"), {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace"), {k.lower(): v for k, v in exc.headers.items()}


def messages(body: str) -> list[dict]:
    body = body.strip()
    if body.startswith("{"):
        return [json.loads(body)]
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]


def open_session(url: str, token: str) -> str:
    status, body, headers = post(url, token, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "flood-probe", "version": "1"}}})
    assert status == 200, (status, body)
    session = headers["mcp-session-id"]
    post(url, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    return session


def timed_calls(url: str, token: str, clients: int, calls: int, pause_s: float = 0.05,
                timeout: float = 10, sessions: list[str] | None = None, until: threading.Event | None = None) -> dict:
    """`clients` threads, each with its own session, call tools/list `calls` times (a new connection per
    call, the worst case under a connection flood), or until `until` is set. Latencies in seconds."""
    sessions = sessions or [open_session(url, token) for _ in range(clients)]
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def one(c: int):
        for k in range(calls):
            if until is not None and until.is_set():
                break
            t0 = time.monotonic()
            try:
                status, body, _ = post(url, token, {"jsonrpc": "2.0", "id": k + 1, "method": "tools/list"},
                                       sessions[c], timeout=timeout)
                ok = status == 200 and "start_task" in body
                why = f"HTTP {status}: {body[:200]}"
            except Exception as exc:  # noqa: BLE001 - a timeout or reset is a failure to record
                ok, why = False, repr(exc)
            dt = time.monotonic() - t0
            with lock:
                latencies.append(dt)
                if not ok:
                    failures.append(why)
            time.sleep(pause_s)

    threads = [threading.Thread(target=one, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = sorted(latencies) or [float("nan")]
    return {"clients": clients, "calls_per_client": calls, "n": len(latencies), "failures": len(failures),
            "failure_examples": failures[:3],
            "p50_s": round(statistics.median(lat), 4), "p95_s": round(lat[max(0, int(0.95 * len(lat)) - 1)], 4),
            "max_s": round(lat[-1], 4)}


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def start_server(workspace: Path, stderr_path: Path, *extra: str, env: dict | None = None):
    """`egg-mcp serve --http --port 0`; returns (proc, url, token) read from its banner."""
    repo = Path(__file__).resolve().parents[1]
    err = open(stderr_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "egg_mcp", "serve", "--http", "--port", "0", "--workspace",
                             str(workspace), "--interpreter", *extra], cwd=repo, stdout=subprocess.DEVNULL,
                            stderr=err, env=env)
    err.close()
    deadline = time.time() + 90
    while time.time() < deadline:
        text = stderr_path.read_text(errors="replace")
        if "session manager started" in text or "Application startup complete" in text:
            break
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {text}")
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError("server did not start: " + stderr_path.read_text(errors="replace"))
    text = stderr_path.read_text(errors="replace")
    url = next(w for line in text.splitlines() if "MCP client config" not in line
               for w in line.replace('"', " ").split() if w.startswith("http://") and w.endswith("/mcp"))
    token = None
    for line in text.splitlines():
        if "generated token" in line:
            token = line.rsplit(" ", 1)[-1]
    return proc, url, token or (env or os.environ).get("EGG_MCP_TOKEN")


def run_flood_measure(url: str, pid: int, flood_n: int, clients: int, calls: int, warmup_s: float = 3.0,
                      flood_s: float | None = None) -> dict:
    """Start the flood in a child process, let it build up, time the clients, report both sides."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    sessions = [open_session(url, TOKEN_HOLDER["token"]) for _ in range(clients)]
    flood_s = flood_s or (warmup_s + calls * clients * 0.1 + 60)
    child = subprocess.Popen([sys.executable, "-m", "tests.http_flood", "--flood-only", "--port", str(port),
                              "--flood", str(flood_n), "--seconds", str(flood_s)],
                             cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True)
    built = threading.Event()
    during: dict = {}
    t_start = time.monotonic()
    # calls while the flood is still arriving (a connect burst: the kernel queue can overflow, costing a
    # SYN retransmit), reported apart from the calls under the established flood
    probe = threading.Thread(target=lambda: during.update(
        timed_calls(url, TOKEN_HOLDER["token"], clients, 10**6, sessions=sessions, until=built)))
    probe.start()
    try:
        time.sleep(warmup_s)
        # until the server holds the flood (or its cap): the fd count near the flood, or still for 3 s
        t_build = time.monotonic() + 90
        history: list[int] = []
        while time.monotonic() < t_build:
            history.append(fd_count(pid))
            if history[-1] >= 0.95 * flood_n or (len(history) >= 4 and history[-1] <= 1.01 * history[-4]
                                                 and history[-1] > 0.5 * flood_n):
                break
            time.sleep(1.0)
        build_up_s = round(time.monotonic() - t_start, 1)
        built.set()
        probe.join()
        fds = [fd_count(pid)]
        result = timed_calls(url, TOKEN_HOLDER["token"], clients, calls, sessions=sessions)
        fds.append(fd_count(pid))
    finally:
        child.terminate()
        out, _ = child.communicate(timeout=60)
    side = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    result.update({"flood_target": flood_n, "flood": side, "server_fds_during": fds, "build_up_s": build_up_s,
                   "during_build_up": during})
    return result


TOKEN_HOLDER: dict = {}
FLOOD_STATS: dict = {}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--flood", type=int, default=20000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--port", type=int)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--flood-only", action="store_true")
    p.add_argument("--out", type=Path)
    p.add_argument("server_args", nargs="*", help="extra `egg-mcp serve` flags (after --)")
    args = p.parse_args()
    if args.flood_only:
        import signal

        signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            stats = flood(args.port, args.flood, args.seconds)
        except KeyboardInterrupt:
            stats = FLOOD_STATS
        print(json.dumps(stats), flush=True)
        return
    import signal
    import tempfile

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    tmp = Path(tempfile.mkdtemp(prefix="egg-flood-"))
    proc, url, token = start_server(tmp / "ws", tmp / "server.err", *args.server_args)
    assert token is not None, "the server's banner named no token and EGG_MCP_TOKEN is unset"
    TOKEN_HOLDER["token"] = token
    load_before = os.getloadavg()[0]
    try:
        baseline = timed_calls(url, token, args.clients, args.calls)
        flooded = run_flood_measure(url, proc.pid, args.flood, args.clients, args.calls)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    log = (tmp / "server.err").read_text(errors="replace")
    limits = next((line.split("egg_mcp.http: ", 1)[1] for line in log.splitlines() if "HTTP limits: " in line), None)
    repo = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "egg_mcp", "tests/http_flood.py"], cwd=repo,
                                capture_output=True, text=True).stdout.strip())
    report = {"what": "authenticated tools/list latency (new connection per call) without and under a slow-client "
                      "flood of half-open connections (default limits unless server_args say otherwise); "
                      "during_build_up: calls made while the flood was still connecting",
              "commit": commit + ("+uncommitted" if dirty else ""), "server_args": args.server_args,
              "server_limits": limits, "cpus": os.cpu_count(), "load_avg_1m_before_after": [load_before,
                                                                                            os.getloadavg()[0]],
              "baseline": baseline, "under_flood": flooded, "server_log_bytes": len(log.encode())}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

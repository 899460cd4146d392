"""Probe: can the judge share GPU memory with a sandboxed runner through a file descriptor?

What is left of a large verify's cost is two host copies per trial (runner GPU -> shared host region -> judge GPU:
0.47 s at 6 GiB, benchmarks/results/h200_2026-12-02/verify_sizes_d3f974b.json). A CUDA VMM allocation exported as
a POSIX file descriptor (cuMemCreate + cuMemExportToShareableHandle) can be imported by another process
(cuMemImportFromShareableHandle) without the legacy IPC's shared PID namespace. This probe makes one in the parent
(the judge's role), sends the descriptor over a socket pair (SCM_RIGHTS) to a child started the way runners are
(plain, then under the sandbox's namespace launcher and confined as a runner confines itself), and reports whether
the child could map it, read the parent's pattern, write its own that the parent then reads, and how long each
step and a device-to-device copy out of it took. It drives the product's own `egg_mcp/evaluation/gpu_share.py` (the
run in `probe_gpu_share_02797b5.log` used a copy of the same ctypes calls, made before that module existed).

    python3 benchmarks/probe_gpu_share.py [--gib 1]     (GPU only; prints one JSON line per mode)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from egg_mcp.evaluation.gpu_share import SharedGpuRegion, granularity  # noqa: E402  (the checkout's package)


def _floats(region: SharedGpuRegion):
    return region.bytes_tensor().view(__import__("torch").float32)


def child(fd_sock: int, n_floats: int, confine: bool) -> None:
    import torch

    sock = socket.socket(fileno=fd_sock)
    torch.empty(1, device="cuda")  # the primary context, current on this thread (as the runner's warm-up makes it)
    report: dict = {"pid": os.getpid()}
    if confine:
        from egg_mcp.evaluation import confinement

        private = Path(tempfile.mkdtemp(prefix="egg-probe-share-"))
        applied = confinement.confine(private)
        report["sandbox_level"] = applied.get("level")
    try:
        _, fds, _, _ = socket.recv_fds(sock, 16, 1)
        started = time.perf_counter()
        view = _floats(SharedGpuRegion(n_floats * 4, torch.cuda.current_device(), fds[0]))
        report["import_map_s"] = round(time.perf_counter() - started, 4)
        report["read_parent_pattern"] = bool((view[:1024] == 7.0).all())
        view.fill_(11.0)
        torch.cuda.synchronize()
        report["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the probe reports what failed
        report.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
    sock.sendall(json.dumps(report).encode())
    sock.close()


def parent(gib: float) -> None:
    import torch

    from egg_mcp.evaluation import confinement
    from egg_mcp.evaluation.runner_process import NAMESPACES_ARG

    torch.empty(1, device="cuda")
    device = torch.cuda.current_device()
    step = granularity(device)
    size = (int(gib * (1 << 30)) + step - 1) // step * step
    n = size // 4
    for mode in ("plain", "namespaces+confined"):
        row: dict = {"mode": mode, "bytes": size}
        started = time.perf_counter()
        region = SharedGpuRegion(size, device)
        view = _floats(region)
        view.fill_(7.0)
        torch.cuda.synchronize()
        row["create_export_map_s"] = round(time.perf_counter() - started, 4)
        ours, theirs = socket.socketpair()
        prefix = confinement.spawn_prefix(NAMESPACES_ARG) if mode != "plain" else []
        row["launcher"] = bool(prefix)
        argv = [*prefix, sys.executable, __file__, "--child", str(theirs.fileno()), str(n),
                "1" if mode != "plain" else "0"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), env=env)
        theirs.close()
        socket.send_fds(ours, [b"x"], [region.fd])
        data = b""
        while chunk := ours.recv(65536):
            data += chunk
        proc.wait(timeout=120)
        row["child"] = json.loads(data or b"{}")
        row["parent_reads_child_pattern"] = bool((view[:1024] == 11.0).all()) if row["child"].get("ok") else False
        copy = torch.empty(n, device="cuda")
        torch.cuda.synchronize()
        started = time.perf_counter()
        copy.copy_(view)
        torch.cuda.synchronize()
        row["copy_out_s"] = round(time.perf_counter() - started, 4)
        print(json.dumps(row), flush=True)
        del copy, view
        region.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1")
    else:
        parent(float(sys.argv[sys.argv.index("--gib") + 1]) if "--gib" in sys.argv else 1.0)

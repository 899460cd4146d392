"""The Ray driver in a process of its own, so that a cluster that disappears cannot take the server with it.

Ray terminates a driver whose GCS stays unreachable (~60 s), and a driver shares its process's fate
with the cluster. So the server never imports Ray: `serve --ray` / `bench --ray` start
`python -m egg_mcp.cluster.gateway`, which joins the cluster, starts the lanes (`ray_lanes.connect`)
and runs jobs for the server over JSON lines on its stdin/stdout:

    gateway -> server  {"type": "lanes", "lanes": [info, ...]}  or  {"type": "error", "message": ...}
    server -> gateway  {"id": N, "lane": I, "spec": {...}}
    gateway -> server  {"id": N, "reply": {...}}  |  {"id": N, "lost": "why"}  |  {"type": "cluster", "view": {...}}

On the server side each lane is a `GatewayLane`; when the gateway process ends (the cluster went away,
Ray killed its driver) every pending and later job raises `LaneLost`, and the pool falls back to the
host's own lanes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import subprocess
import sys
import time
from typing import Any, Literal

from egg_mcp.cluster.lanes import LaneLost
from egg_mcp.config import environment_copy

MAX_LINE = 256 * 1024 * 1024
CLUSTER_EVERY_S = 5.0


# -- the gateway process --------------------------------------------------------------------------

async def _serve(address: str, force_interpreter: bool, pythonpath: str | None, max_lanes: int | None,
                 out, engine: dict[str, Any] | None = None) -> None:
    from egg_mcp.cluster.ray_lanes import ClusterError, connect, describe_cluster

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        lanes = connect(address, force_interpreter=force_interpreter, pythonpath=pythonpath, max_lanes=max_lanes,
                        engine=engine)
    except ClusterError as exc:
        send({"type": "error", "message": str(exc)})
        return
    send({"type": "lanes", "lanes": [lane.info for lane in lanes]})

    last_report = [0.0]

    def report_cluster() -> None:
        """With a job's answer, at most every few seconds (nothing unasked: the server reads on demand)."""
        if time.monotonic() - last_report[0] >= CLUSTER_EVERY_S:
            last_report[0] = time.monotonic()
            with contextlib.suppress(Exception):
                send({"type": "cluster", "view": describe_cluster()})

    async def run(message: dict[str, Any]) -> None:
        try:
            reply = await lanes[int(message["lane"])].run(message["spec"])
            send({"id": message["id"], "reply": reply})
        except LaneLost as exc:
            send({"id": message["id"], "lost": str(exc)})
        except Exception as exc:  # a bad spec: the job fails, the gateway serves on
            send({"id": message["id"], "lost": f"gateway: {type(exc).__name__}: {exc}"[:500]})
        report_cluster()

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    report_cluster()
    tasks: set[asyncio.Task] = set()
    while line := await reader.readline():  # the server closed our stdin: done
        task = asyncio.ensure_future(run(json.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    for lane in lanes:
        with contextlib.suppress(Exception):
            await lane.aclose()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m egg_mcp.cluster.gateway")
    parser.add_argument("address")
    parser.add_argument("--interpreter", action="store_true")
    parser.add_argument("--pythonpath")
    parser.add_argument("--max-lanes", type=int)
    parser.add_argument("--engine", default="{}", help="JSON: the server's settings for every lane's engine "
                        "(lanes.engine_settings: protected paths, sandbox floor, bound floors)")
    args = parser.parse_args(argv)
    from egg_mcp.cluster.lanes import engine_settings

    out = os.fdopen(os.dup(1), "w")  # the protocol; whatever Ray prints goes to stderr
    os.dup2(2, 1)
    asyncio.run(_serve(args.address, args.interpreter, args.pythonpath, args.max_lanes, out,
                       engine_settings(json.loads(args.engine))))
    return 0


# -- the server side -------------------------------------------------------------------------------

class Gateway:
    """The server's handle on the gateway process: lanes, pending jobs, the latest cluster view. Started
    synchronously (the server builds its evaluator before its event loop runs); its pipes join the
    event loop on first use."""

    def __init__(self, proc: subprocess.Popen, lanes_info: list[dict[str, Any]]):
        self.proc = proc
        self.lanes_info = lanes_info
        self.pending: dict[int, asyncio.Future] = {}
        self.next_id = 0
        self.view: dict[str, Any] = {}
        self.gone: str | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._attach_lock: asyncio.Lock | None = None

    @classmethod
    def start(cls, address: str, *, force_interpreter: bool = False, pythonpath: str | None = None,
              max_lanes: int | None = None, engine: dict[str, Any] | None = None,
              timeout_s: float = 240.0) -> "Gateway":
        """`engine`: the server's settings for every lane's engine (lanes.engine_settings)."""
        from egg_mcp.cluster.ray_lanes import ClusterError
        from egg_mcp.evaluation.engine_pool import PACKAGE_PARENT

        argv = [sys.executable, "-m", "egg_mcp.cluster.gateway", address]
        argv += ["--interpreter"] if force_interpreter else []
        argv += ["--pythonpath", pythonpath] if pythonpath else []
        argv += ["--max-lanes", str(max_lanes)] if max_lanes else []
        argv += ["--engine", json.dumps(engine)] if engine else []
        env = environment_copy()
        env["PYTHONPATH"] = PACKAGE_PARENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0,
                                start_new_session=True)
        first = b""
        deadline = time.monotonic() + timeout_s
        stdout = proc.stdout
        assert stdout is not None  # stdout=PIPE
        while not first.endswith(b"\n"):
            ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(stdout.fileno(), 1) if ready else b""
            if not chunk:
                break
            first += chunk
        message: dict[str, Any] = json.loads(first) if first.strip() else {
            "type": "error", "message": f"the Ray gateway gave no lanes on {address!r} within {timeout_s:.0f} s or "
            "exited (its messages are on the server's stderr)"}
        if message.get("type") != "lanes":
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            raise ClusterError(message.get("message", "the Ray gateway failed"))
        return cls(proc, message["lanes"])

    async def _attach(self) -> None:
        if self._attach_lock is None:
            self._attach_lock = asyncio.Lock()
        async with self._attach_lock:
            if self._writer is not None:
                return
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=MAX_LINE)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), self.proc.stdout)
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), self.proc.stdin)
            self._writer = asyncio.StreamWriter(transport, protocol, None, loop)
            self._reader_task = asyncio.ensure_future(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                message = json.loads(line)
                if message.get("type") == "cluster":
                    self.view = message["view"]
                    continue
                future = self.pending.pop(message.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(message)
        except Exception as exc:  # noqa: BLE001 - any read failure means the gateway is unusable
            self.gone = f"{type(exc).__name__}: {exc}"
        finally:
            self.gone = self.gone or f"the Ray gateway exited (code {self.proc.poll()})"
            for future in self.pending.values():
                if not future.done():
                    future.set_result({"lost": self.gone})
            self.pending.clear()

    async def run(self, lane: int, spec: dict[str, Any]) -> dict[str, Any]:
        if self.gone:
            raise LaneLost(self.gone)
        await self._attach()
        assert self._writer is not None  # _attach set it
        self.next_id += 1
        job_id = self.next_id
        future = asyncio.get_running_loop().create_future()
        self.pending[job_id] = future
        try:
            self._writer.write((json.dumps({"id": job_id, "lane": lane, "spec": spec}) + "\n").encode())
            await self._writer.drain()
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
            self.pending.pop(job_id, None)
            raise LaneLost(f"the Ray gateway is gone: {exc}") from exc
        message = await future
        if "lost" in message:
            raise LaneLost(message["lost"])
        return message["reply"]

    def describe(self) -> dict[str, Any]:
        if self.gone:
            return {"error": self.gone}
        return self.view or {"note": "no cluster report from the gateway yet (it sends one with its job answers)"}

    async def aclose(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                if self._writer is not None:
                    self._writer.close()
                elif self.proc.stdin is not None:
                    self.proc.stdin.close()
            deadline = time.monotonic() + 15.0
            while self.proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        if self._reader_task is not None:
            self._reader_task.cancel()


class GatewayLane:
    """A lane on the cluster, reached through the gateway process."""

    via: Literal["local", "ray"] = "ray"

    def __init__(self, gateway: Gateway, index: int):
        info = gateway.lanes_info[index]
        self.gateway, self.index, self.info = gateway, index, info
        self.host, self.device_index, self.device_model = info["host"], info["device_index"], info["device_model"]
        where = f"gpu{self.device_index}" if self.device_index is not None else "cpu"
        self.name = f"ray/{info['host']}/{where}/{info['pid']}"

    def has_gpu(self) -> bool:
        return bool(self.info.get("gpu"))

    async def run(self, spec: dict[str, Any], progress=None) -> dict[str, Any]:
        return await self.gateway.run(self.index, spec)

    async def aclose(self) -> None:
        if self.index == 0:  # one gateway for all lanes
            await self.gateway.aclose()


if __name__ == "__main__":
    sys.exit(main())

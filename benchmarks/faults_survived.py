"""Faults survived (issue 28 item 5): kills x storage faults, counting acknowledged tasks lost.

Each round runs a process that acknowledges N tasks (start_task returned) on one workspace and then
SIGKILLs itself; a storage fault is applied to the files it left (WAL deleted, WAL cut, shm deleted,
database 0 bytes, database cut in half, or none); the workspace is reopened as a restart would, and
every task acknowledged so far (over all rounds) must be there. Then a full disk after a job ran
(ENOSPC raised at the result's write): the row must end `interrupted` with "disk full" in its cause
and a concurrent verify of the same source by a second server must return that cause within 20 s.

    python3 benchmarks/faults_survived.py --kills 3 --tasks 4 --out benchmarks/results/cpu_2026-12-02/faults_survived.json
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WRITER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from egg_mcp.problems.builtin import builtin_source
    from tests.workspace_fakes import make_service

    async def main():
        svc = make_service(sys.argv[1])
        for i in range(int(sys.argv[2])):
            task = await svc.start_task(builtin_source("softmax"), k_seeds=1)
            print(task.task_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
""")


def _db(ws: Path, suffix: str = "") -> Path:
    return Path(str(ws / "egg.sqlite3") + suffix)


def _cut(path: Path, keep: float) -> None:
    if path.exists():
        with open(path, "r+b") as fh:
            fh.truncate(int(path.stat().st_size * keep))


FAULTS = {
    "none": lambda ws: None,
    "wal_deleted": lambda ws: _db(ws, "-wal").unlink(missing_ok=True),
    "wal_truncated": lambda ws: _cut(_db(ws, "-wal"), 2 / 3),
    "shm_deleted": lambda ws: _db(ws, "-shm").unlink(missing_ok=True),
    "db_zero_bytes_wal_deleted": lambda ws: (_db(ws, "-wal").unlink(missing_ok=True), _db(ws).write_bytes(b"")),
    "db_half_wal_deleted": lambda ws: (_db(ws, "-wal").unlink(missing_ok=True), _cut(_db(ws), 0.5)),
}


def kill_round(ws: Path, n: int) -> list[str]:
    child = subprocess.run([sys.executable, "-c", WRITER, str(ws), str(n)], cwd=REPO, capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    if child.returncode != -signal.SIGKILL:
        raise RuntimeError(child.stderr[-2000:])
    return child.stdout.split()


def kills_by_fault(kills: int, tasks: int) -> dict:
    from egg_mcp.workspace.store import Workspace

    out = {}
    for name, fault in FAULTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp) / "ws"
            acked: set[str] = set()
            lost_total, restored = 0, 0
            for _ in range(kills):
                acked |= set(kill_round(ws, tasks))
                fault(ws)
                opened = Workspace(ws)
                restored += opened.recovery_note is not None
                present = {r["id"] for r in opened.query("SELECT id FROM tasks")}
                opened.close()
                lost_total = len(acked - present)
            out[name] = {"kills": kills, "tasks_acknowledged": len(acked), "tasks_lost": lost_total,
                         "restores_from_snapshot": restored,
                         "set_aside_files": len(list((ws / "damaged").glob("*"))) if (ws / "damaged").exists() else 0}
    return out


def disk_full_round() -> dict:
    from egg_mcp.problems.builtin import builtin_source
    from tests.workspace_fakes import FakeEvaluator, make_service

    seed = (REPO / "tests" / "fixtures" / "softmax" / "row_per_program.py").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        first = make_service(ws, FakeEvaluator(delay_s=1.0))
        tid = asyncio.run(first.start_task(builtin_source("softmax"), k_seeds=1)).task_id
        asyncio.run(first.verify(tid, seed + "\n# warm\n"))
        real = first.ws.put_text

        def put_text(text: str) -> str:
            if '"verdict"' in text:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(text)

        first.ws.put_text = put_text
        second = make_service(ws, FakeEvaluator(delay_s=1.0))

        async def both():
            a = asyncio.ensure_future(first.verify(tid, seed))
            await asyncio.sleep(0.3)
            b = asyncio.ensure_future(second.verify(tid, seed))
            return await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), timeout=20)

        t0 = time.monotonic()
        try:
            ra, rb = asyncio.run(both())
            hung = False
        except asyncio.TimeoutError:
            ra = rb = None
            hung = True
        rows = first.ws.query("SELECT status, cause FROM candidates WHERE status != 'done'")
        return {"rows_interrupted_with_disk_full": sum(r["status"] == "interrupted" and "disk full" in (r["cause"] or "")
                                                      for r in rows),
                "rows_left_running": sum(r["status"] == "running" for r in rows),
                "waiter_hung": hung, "waiter_answer_s": round(time.monotonic() - t0, 2),
                "error_text": str(ra), "waiter_text": str(rb)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kills", type=int, default=3, help="kill -9 rounds per storage fault")
    ap.add_argument("--tasks", type=int, default=4, help="tasks acknowledged before each kill")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    t0 = time.time()
    by_fault = kills_by_fault(args.kills, args.tasks)
    disk_full = disk_full_round()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    result = {
        "what": "kill -9 after N acknowledged tasks, then a storage fault, then a restart; plus ENOSPC after a job ran",
        "command": " ".join(["python3", "benchmarks/faults_survived.py", *sys.argv[1:]]),
        "host": platform.node(), "python": platform.python_version(), "head": commit,
        "kills_total": sum(v["kills"] for v in by_fault.values()),
        "storage_faults": sorted(FAULTS),
        "tasks_acknowledged_total": sum(v["tasks_acknowledged"] for v in by_fault.values()),
        "tasks_lost_total": sum(v["tasks_lost"] for v in by_fault.values()),
        "by_fault": by_fault,
        "disk_full_after_job": disk_full,
        "wall_s": round(time.time() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("kills_total", "tasks_acknowledged_total", "tasks_lost_total")}))
    ok = result["tasks_lost_total"] == 0 and not disk_full["waiter_hung"] and disk_full["rows_left_running"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""One engine, persistent judge: verify verify_sizes' full-size softmax (4096 x 393216 fp32, 6 GiB in and out) twice
and print each verdict, its phases and its text. Run it with a poll of `nvidia-smi --query-compute-apps=pid,used_memory`
beside it to see what each process (judge, runner, spares) holds. GPU only:

    python3 benchmarks/probe_large_verify.py
"""

import asyncio
import tempfile
import time
from pathlib import Path

from benchmarks.verify_sizes import FULL_TASKS
from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator


async def main() -> None:
    reference, candidate = FULL_TASKS["softmax_full"]
    ev = WorkerEvaluator(scratch_dir=Path(tempfile.mkdtemp()), spare_workers=1, judge="persistent")
    await ev.start_pool()
    try:
        for i in range(2):
            t0 = time.monotonic()
            r = await ev.evaluate(reference, candidate + f"\n# {i}\n", EvalOptions())
            print(i, r.verdict, round(time.monotonic() - t0, 1), r.phase_s, "\n", r.summary[:700], flush=True)
    finally:
        await ev.aclose()


if __name__ == "__main__":
    asyncio.run(main())

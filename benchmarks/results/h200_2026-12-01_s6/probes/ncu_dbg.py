import asyncio, sys, tempfile, os
from pathlib import Path
sys.path.insert(0, os.getcwd())
from egg_mcp.evaluation.api import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.profiling import runner
from egg_mcp.profiling.metrics import metrics_for_stage
from egg_mcp.workflow.stages import Stage
CORRECT = Path("tests/adversarial/correct_row_softmax.py").read_text()
mode = sys.argv[1]
async def main():
    ev = WorkerEvaluator(scratch_dir=Path(tempfile.mkdtemp()), spare_workers=0)
    try:
        ncu = runner.find_ncu()
        log = Path(tempfile.mkdtemp()) / "n.csv"
        argv = runner.ncu_argv(ncu, ["gpu__time_duration.sum"], "regex:.*", str(log))
        payload = runner.build_payload(builtin_source("softmax"), CORRECT, EvalOptions(), device="cuda", profile=True,
                                       timing_iters=runner.TIMING_ITERS_UNDER_NCU)
        out = await ev.run_job(runner.TARGET, payload, timeout_s=120, uses_gpu=True, wrapper_argv=argv)
        print("OK", out.ok, out.exit_code, out.error, "\nSANDBOX", out.sandbox)
        print("STDOUT", out.stdout_tail[-3000:])
        print("STDERR", "\n".join(l for l in out.stderr_tail.splitlines() if "ld.so" not in l)[-5000:])
        print("LDSO lines", sum("ld.so" in l for l in out.stderr_tail.splitlines()))
        print("LOG", log.read_text()[-1500:] if log.exists() else None)
    finally:
        await ev.aclose()
asyncio.run(main())

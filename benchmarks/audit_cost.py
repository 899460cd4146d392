"""What the timed-call checks cost, by part (issue 27's 5 % budget): the runner's commands driven in-process.

One child process per variant and repetition, each with a fresh Triton cache (so the first trial compiles, as
in a verify), runs verify_latency's task (2048x4096 @ 4096x4096 fp32, the IEEE GEMM) through
`CandidateSide` directly: load, five correctness trials, the `time` command (isolated reading on), then the
judge's side of the audit (each audited seed's reference, the comparison). Variants switch one part off:

* `full`: as a verify runs it;
* `no_host_audit`: HostAudit.install does nothing (no audit hook, Tensor wrappers or profiler);
* `no_timed_audit`: `time` gets no audit seeds (nothing refilled or kept);
* `base`: the package in `.base/` (a `git archive` of the tree before the checks), when present.

`--warm` instead runs one child that, after the compile, alternates the `time` command with and without audit
seeds (synchronised wall per command) and times the judge's side step by step (decode, each audited seed's
inputs, reference forward, comparison), with a cProfile of the last round of each.
`--profile` adds a cProfile of the full variant's first trial and `time` command (top functions by own time).
This is an attribution tool; the verify wall time the issue's budget is judged on comes from the
`verify_latency` suite, before and after, in one run.

    python3 benchmarks/audit_cost.py OUT.json [--reps 2] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("full", "no_host_audit", "no_timed_audit", "base")


def _child(variant: str, profile: bool) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    from verify_latency import CANDIDATE, FULL, REFERENCE

    from egg_mcp.evaluation import candidate_side
    from egg_mcp.contract import EvalOptions

    if variant == "no_host_audit":
        from egg_mcp.evaluation.host_audit import HostAudit

        HostAudit.install = lambda self, *a, **k: None  # type: ignore[method-assign]
    torch.set_grad_enabled(False)
    reference = REFERENCE.format(m=FULL["m"], k=FULL["k"], n=FULL["n"])
    candidate = CANDIDATE.format(**FULL["tile"])
    out: dict = {"variant": variant}
    private = Path(tempfile.mkdtemp(prefix="audit-cost-"))
    side = candidate_side.CandidateSide(private, interpreter=False)
    t0 = time.perf_counter()
    side.load({"options": EvalOptions().model_dump(mode="json"), "candidate_source": candidate,
               "reference_source": reference, "init_seed": 1})
    out["load_s"] = time.perf_counter() - t0
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    trials = []
    for seed in range(1, 6):
        t0 = time.perf_counter()
        if prof is not None and seed == 1:
            prof.enable()
        side.trial({"seed": seed, "trial": seed - 1, "stage": "correctness"})
        if prof is not None and seed == 1:
            prof.disable()
        trials.append(time.perf_counter() - t0)
    out["first_trial_s"], out["other_trials_s"] = trials[0], sum(trials[1:])
    side.report({"forwards": 5, "check": True})
    cmd = {"seeds": list(range(100, 164)), "n_runs": None, "isolated": True}
    if variant in ("full", "no_host_audit"):
        cmd["audit_seeds"] = list(range(1000, 1200))
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    answer = side.time(cmd)
    header, blobs = answer if isinstance(answer, tuple) else (answer, [])  # the tree before the checks: a dict
    if prof is not None:
        prof.disable()
    out["time_cmd_s"] = time.perf_counter() - t0
    out["isolated_s"] = header.get("isolated_s")
    stats = header.get("stats", {})
    out["median_ms"], out["n_runs"], out["method"] = stats.get("median_ms"), stats.get("n_runs"), stats.get("method")
    out["readings"] = stats.get("readings") or stats.get("n_readings")
    out["audited_calls"] = len(header.get("audited") or [])
    if header.get("audited"):  # the judge's share: decode, each audited seed's reference, the comparison
        from egg_mcp.evaluation import timed_checks, wire

        t0 = time.perf_counter()
        values = wire.decode_values(header["values"], blobs)
        ref_side = side.problem  # the same reference module; the judge builds its own Model the same way
        ref_model = ref_side.build(ref_side.module.Model, ref_side.init_inputs(1), 1)
        findings, error = timed_checks.audit_findings(header["audited"], values,
                                                      lambda s: ref_model(*ref_side.inputs(s)),
                                                      timed_checks.trial_rules(1e-4, 1e-4))
        torch.cuda.synchronize()
        out["judge_audit_s"] = time.perf_counter() - t0
        out["judge_audit_findings"] = [f.check for f in findings] + ([error] if error else [])
    if prof is not None:
        import io
        import pstats

        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
        buf.write("\n--- by cumulative time ---\n")
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
        out["profile"] = buf.getvalue()[-24000:]
    return out


def _warm_child(rounds: int = 3) -> dict:
    """Per-part costs once everything is compiled and warm (see the module doc, --warm)."""
    import cProfile
    import io
    import pstats

    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from verify_latency import CANDIDATE, FULL, REFERENCE

    from egg_mcp.evaluation import candidate_side, timed_checks, wire
    from egg_mcp.contract import EvalOptions

    torch.set_grad_enabled(False)
    side = candidate_side.CandidateSide(Path(tempfile.mkdtemp(prefix="audit-cost-")), interpreter=False)
    side.load({"options": EvalOptions().model_dump(mode="json"),
               "candidate_source": CANDIDATE.format(**FULL["tile"]),
               "reference_source": REFERENCE.format(m=FULL["m"], k=FULL["k"], n=FULL["n"]), "init_seed": 1})
    for seed in range(1, 6):
        side.trial({"seed": seed, "trial": seed - 1, "stage": "correctness"})
    side.report({"forwards": 5, "check": True})
    problem = side.problem
    ref_model = problem.build(problem.module.Model, problem.init_inputs(1), 1)
    out: dict = {"time_with_audit_s": [], "time_without_s": [], "encode_s": [], "judge": []}
    prof_runner, prof_judge = cProfile.Profile(), cProfile.Profile()
    next_seed = 1000
    for r in range(rounds):
        for audited in (True, False):
            cmd = {"seeds": list(range(100, 164)), "n_runs": None, "isolated": True}
            if audited:
                cmd["audit_seeds"] = list(range(next_seed, next_seed + 200))
                next_seed += 200
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            if audited and r == rounds - 1:
                prof_runner.enable()
            header, blobs = side.time(cmd)
            if audited and r == rounds - 1:
                prof_runner.disable()
            torch.cuda.synchronize()
            out["time_with_audit_s" if audited else "time_without_s"].append(time.perf_counter() - t0)
            if not audited:
                continue
            steps = {"decode": 0.0, "inputs": 0.0, "reference": 0.0, "compare_and_rest": 0.0}
            t0 = time.perf_counter()
            values = wire.decode_values(header["values"], [bytearray(b) for b in blobs])
            steps["decode"] = time.perf_counter() - t0

            def expected(seed: int):
                torch.cuda.synchronize()
                a = time.perf_counter()
                xs = problem.inputs(seed)
                torch.cuda.synchronize()
                b = time.perf_counter()
                y = ref_model(*xs)
                torch.cuda.synchronize()
                steps["inputs"] += b - a
                steps["reference"] += time.perf_counter() - b
                return y

            if r == rounds - 1:
                prof_judge.enable()
            t0 = time.perf_counter()
            findings, error = timed_checks.audit_findings(header["audited"], values, expected,
                                                          timed_checks.trial_rules(1e-4, 1e-4))
            torch.cuda.synchronize()
            total = time.perf_counter() - t0
            if r == rounds - 1:
                prof_judge.disable()
            steps["compare_and_rest"] = total - steps["inputs"] - steps["reference"]
            out["judge"].append({"total_s": total, "audited_calls": len(header["audited"]),
                                 "blob_bytes": sum(len(b) for b in blobs), **steps,
                                 "findings": [f.check for f in findings] + ([error] if error else [])})
    for name, prof in (("runner_time_profile", prof_runner), ("judge_audit_profile", prof_judge)):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
        out[name] = buf.getvalue()[-9000:]
    return out


def _run(variant: str, profile: bool) -> dict:
    env = dict(os.environ)
    if variant == "base":
        if not (ROOT / ".base" / "egg_mcp").is_dir():
            return {"variant": variant, "skipped": "no .base/ tree"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / ".base"), *[p for p in env.get("PYTHONPATH", "").split(
            os.pathsep) if p and Path(p).resolve() != ROOT]])
    with tempfile.TemporaryDirectory(prefix="audit-cost-cache-") as cache:
        env["TRITON_CACHE_DIR"] = cache
        code = ("import json, sys; sys.path.insert(0, %r); import audit_cost; "
                "print('AUDIT-COST ' + json.dumps(audit_cost._child(%r, %r)))" % (
                    str(ROOT / "benchmarks"), variant, profile))
        proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    for line in proc.stdout.splitlines():
        if line.startswith("AUDIT-COST "):
            return json.loads(line[len("AUDIT-COST "):])
    return {"variant": variant, "error": (proc.stderr or proc.stdout)[-3000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--warm", action="store_true")
    args = parser.parse_args()
    if args.warm:
        code = ("import json, sys; sys.path.insert(0, %r); import audit_cost; "
                "print('AUDIT-COST ' + json.dumps(audit_cost._warm_child()))" % str(ROOT / "benchmarks"))
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=400)
        line = [x for x in proc.stdout.splitlines() if x.startswith("AUDIT-COST ")]
        result = json.loads(line[0][len("AUDIT-COST "):]) if line else {"error": (proc.stderr or proc.stdout)[-3000:]}
        for key in ("runner_time_profile", "judge_audit_profile"):
            print(result.pop(key, ""))
        print(json.dumps(result, indent=1))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"what": "audit costs, warm", "command": " ".join(sys.argv),
                                        "commit": os.environ.get("EGG_MCP_GIT_COMMIT"), "result": result}, indent=1))
        return
    variants = [v for v in args.variants.split(",") if v]
    rows = []
    for rep in range(args.reps):
        for variant in variants:  # interleaved, so drift hits every variant alike
            row = _run(variant, profile=args.profile and rep == 0 and variant == "full")
            row["rep"] = rep
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
    summary = {}
    for variant in variants:
        mine = [r for r in rows if r["variant"] == variant and "first_trial_s" in r]
        if mine:
            summary[variant] = {k: round(statistics.median(r[k] for r in mine if r.get(k) is not None), 4)
                                for k in ("load_s", "first_trial_s", "other_trials_s", "time_cmd_s", "isolated_s",
                                          "judge_audit_s", "median_ms") if any(r.get(k) is not None for r in mine)}
    print(json.dumps(summary, indent=1))
    for row in rows:
        if row.get("profile"):
            print(row["profile"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"what": __doc__.splitlines()[0], "command": " ".join(sys.argv),
                                    "commit": os.environ.get("EGG_MCP_GIT_COMMIT"), "summary": summary,
                                    "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

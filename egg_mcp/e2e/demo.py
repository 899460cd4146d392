"""`egg-mcp demo`: the whole EGG workflow, driven over MCP by a scripted client, on a built-in problem.

The demo starts the server as a subprocess on stdio (as Claude Desktop or Cursor would), then
plays the client LLM's part with hand-written kernels shipped under `demo_kernels/<problem>/`:
k structurally different seeds, then one change per stage (dataflow, parallel mapping, tiling
through `propose_tiling`, memory), each committed with a structured decision and its evidence.

It is honest by construction: it never forces a commit. When a stage's kernel is not faster than
the committed one, the previous kernel is committed again with a "no gain" decision (the
regression guard allows a candidate equal to the committed one). On a CPU every kernel is checked
in the Triton interpreter at the problem's reduced sizes and the table says timings need a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from egg_mcp.config import ServerConfig, environment_copy, workspace_setting
from egg_mcp.e2e.demo_output import CandidateRow, DemoReport, StageRow, render_table, write_demo_report
from egg_mcp.e2e.demo_plan import (
    PLANS,
    DemoError,
    DemoPlan,
    Step,
    available_problems,
    carry_tunables,
    kernel_source,
    set_constant,
)

# -- the scripted client ----------------------------------------------------------------------------

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)


class ToolFailed(DemoError):
    def __init__(self, tool: str, message: str):
        super().__init__(f"{tool} failed: {message}")
        self.tool = tool
        self.message = message


class _Driver:
    """Calls tools and keeps what the table needs."""

    def __init__(self, client, plan: DemoPlan, log):
        self.client = client
        self.plan = plan
        self.log = log
        self.task_id = ""
        self.timing = False
        self.report: DemoReport | None = None
        self.kernel_of: dict[str, str] = {}  # candidate id -> kernel label

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args)
        if result.is_error:
            text = result.content[0].text if result.content else "(no message)"
            raise ToolFailed(tool, text)
        if result.structured_content is None:
            raise DemoError(f"{tool} returned no structured content")
        return result.structured_content

    async def verify(self, stage: str, label: str, source: str, note: str) -> dict[str, Any]:
        self.log(f"  verify {label} ...")
        v = await self.call("verify", task_id=self.task_id, source=source, note=note)
        self.kernel_of.setdefault(v["candidate_id"], label)
        assert self.report is not None
        self.report.candidates.append(CandidateRow(
            stage=stage, kernel=label, candidate_id=v["candidate_id"], verdict=v["verdict"], time_ms=v["time_ms"],
            speedup_vs_eager=v["speedup_vs_eager"], speedup_vs_compile=v["speedup_vs_compile"], summary=v["summary"]))
        self.log(f"    {v['verdict']}" + (f", {v['time_ms']:.4g} ms" if v["time_ms"] is not None else "")
                 + ("" if v["verdict"] == "correct" else f": {v['summary']}"))
        return v

    async def profile(self, candidate_id: str) -> dict[str, Any]:
        self.log(f"  profile_ncu {self.kernel_of.get(candidate_id, candidate_id)} ...")
        p = await self.call("profile_ncu", task_id=self.task_id, candidate_id=candidate_id)
        report = p["report"]
        headline = ""
        kernels = report.get("kernels") or []
        if kernels:
            headline = (kernels[0].get("classification") or {}).get("headline", "")
        assert self.report is not None
        self.report.reports.append({"kind": "profile", "report_id": p["report_id"], "candidate_id": candidate_id,
                                    "source": report.get("source"), "summary": report.get("summary", ""),
                                    "headline": headline})
        self.log(f"    [{report.get('source')}] {headline or report.get('summary', '')}")
        return p

    async def commit(self, stage: str, candidate: dict[str, Any] | None, committed: dict[str, Any] | None,
                     step_summary: str, changes: list[str], rationale: str,
                     extra_evidence: list[dict[str, Any]]) -> dict[str, Any]:
        """Commit `candidate` if it is faster than the committed kernel (or timings are unavailable);
        otherwise commit the committed kernel again with a 'no gain' decision. Never forces."""
        keep = False
        evidence = list(extra_evidence)
        before = committed["time_ms"] if committed else None
        if candidate is None:
            keep = True
            why = "no candidate of this stage verified correct"
        elif self.timing and before is not None and candidate["time_ms"] is not None:
            evidence.append({"metric": "median_ms", "before": before, "after": candidate["time_ms"]})
            keep = candidate["time_ms"] >= before
            why = f"{candidate['time_ms']:.4g} ms vs committed {before:.4g} ms"
        else:
            why = "correctness only (no timing without a GPU)"
        if not keep:
            assert candidate is not None
            decision = {"summary": step_summary, "changes": changes, "rationale": f"{rationale}; {why}",
                        "evidence": evidence}
            try:
                return await self._commit(stage, candidate["candidate_id"], decision, kept=False)
            except ToolFailed as exc:  # the guard saw a regression beyond noise: keep the previous kernel
                why = f"refused by the regression guard: {exc.message}"
        if committed is None:
            raise DemoError(f"{stage}: nothing to commit ({why})")
        decision = {"summary": f"no gain: kept the committed kernel ({why})",
                    "changes": [], "rationale": f"tried: {step_summary}; it did not beat the committed kernel",
                    "evidence": evidence}
        return await self._commit(stage, committed["candidate_id"], decision, kept=True)

    async def _commit(self, stage: str, candidate_id: str, decision: dict[str, Any], *, kept: bool) -> dict[str, Any]:
        result = await self.call("commit_stage", task_id=self.task_id, candidate_id=candidate_id, decision=decision,
                                 stage=stage)
        c = result["committed"]
        assert self.report is not None
        self.report.stages.append(StageRow(
            stage=stage, kernel=self.kernel_of.get(candidate_id, candidate_id), candidate_id=candidate_id,
            time_ms=c["time_ms"], speedup_vs_eager=c["speedup_vs_eager"], speedup_vs_compile=c["speedup_vs_compile"],
            changed=decision["summary"], kept_previous=kept, guard=c.get("guard", ""), evidence=decision["evidence"]))
        self.log(f"  commit {stage}: {self.kernel_of.get(candidate_id, candidate_id)}"
                 + (" (kept previous)" if kept else "") + f" -> {result['new_stage']}")
        for w in result.get("warnings") or []:
            self.log(f"    warning: {w}")
        return result


def _best(verified: list[dict[str, Any]], timing: bool) -> dict[str, Any] | None:
    correct = [v for v in verified if v["verdict"] == "correct"]
    if not correct:
        return None
    if timing and all(v["time_ms"] is not None for v in correct):
        return min(correct, key=lambda v: v["time_ms"])
    return correct[0]


async def drive(client, problem: str, *, transport: str, log=lambda msg: None) -> DemoReport:
    """Run the scripted workflow for `problem` through an open MCP client session."""
    if problem not in PLANS:
        raise DemoError(f"no demo for {problem!r}; available: {', '.join(available_problems())}")
    plan = PLANS[problem]
    t0 = time.monotonic()
    d = _Driver(client, plan, log)
    report = await _start(d, problem, plan, transport, log)
    commit, committed = await _seeds(d, problem, plan, log)
    for step in plan.steps:
        commit, committed = await _later_stage(d, problem, step, commit, committed, log)
    await _done(d, report)
    report.wall_s = round(time.monotonic() - t0, 2)
    return report


async def _start(d: _Driver, problem: str, plan: DemoPlan, transport: str, log) -> DemoReport:
    """start_task: the task id, whether kernels are timed here, and the report every later step fills."""
    log(f"start_task {problem}")
    started = await d.call("start_task", reference=problem, k_seeds=len(plan.seeds))
    d.task_id = started["task_id"]
    d.timing = bool(started["timing_available"])
    d.report = report = DemoReport(
        problem=problem, task_id=d.task_id, transport=transport, timing_available=d.timing,
        gpu=started["options"].get("gpu_name"), size_overrides=started["options"].get("size_overrides") or {},
        notes=list(started.get("notes") or []))
    if not d.timing:
        report.notes.append("timings need a GPU: on this machine every kernel was checked for correctness in the "
                            "Triton interpreter only")
    return report


async def _seeds(d: _Driver, problem: str, plan: DemoPlan, log) -> tuple[dict[str, Any], dict[str, Any]]:
    """SEEDS: the baselines, every seed verified, the best one committed; (the commit's reply, the committed seed)."""
    report = d.report
    assert report is not None  # _start made it
    log("SEEDS: generate_seeds")
    seeds = await d.call("generate_seeds", task_id=d.task_id)
    base = seeds.get("baselines") or {}
    report.eager_ms = (base.get("eager") or {}).get("median_ms")
    report.compile_ms = (base.get("compiled") or {}).get("median_ms")
    if base.get("compile_error"):
        report.notes.append(f"torch.compile baseline failed: {base['compile_error']}")
    verified = [await d.verify("SEEDS", f, kernel_source(problem, f), f"seed: {paradigm}") for f,
                paradigm in plan.seeds]
    best = _best(verified, d.timing)
    if best is None:
        raise DemoError("no seed verified correct: " + "; ".join(v["summary"] for v in verified))
    seed_names = {v["candidate_id"]: f for v, (f, _) in zip(verified, plan.seeds)}
    evidence = [{"metric": f"median_ms[{seed_names[v['candidate_id']]}]", "after": v["time_ms"]}
                for v in verified if v["verdict"] == "correct" and v["time_ms"] is not None]
    paradigm = dict(plan.seeds)[seed_names[best["candidate_id"]]]
    commit = await d._commit("SEEDS", best["candidate_id"], {
        "summary": f"seed: {paradigm}",
        "changes": [f"chose {seed_names[best['candidate_id']]} among {len(plan.seeds)} structurally different seeds"],
        "rationale": ("fastest correct seed by measurement" if d.timing
                      else "first correct seed (no timing without a GPU; on a GPU the fastest one is chosen)"),
        "evidence": evidence}, kept=False)
    return commit, best


async def _later_stage(d: _Driver, problem: str, step: Step, commit: dict[str, Any], committed: dict[str, Any],
                       log) -> tuple[dict[str, Any], dict[str, Any]]:
    """One stage after SEEDS: its kernels verified (and tuned), the best committed; (the commit's reply, the
    committed candidate)."""
    report = d.report
    assert report is not None  # _start made it
    status = await d.call("task_status", task_id=d.task_id)
    if status["stage"] != step.stage:
        raise DemoError(f"expected stage {step.stage}, the task is in {status['stage']}")
    log(f"{step.stage}:")
    extra: list[dict[str, Any]] = []
    if step.profile_committed:
        try:
            p = await d.profile(committed["candidate_id"])
            extra.append({"metric": "profile", "before": _profile_line(p), "report_id": p["report_id"]})
        except ToolFailed as exc:  # a profiler failure costs the evidence, not the run
            report.notes.append(f"{step.stage}: {exc}")
            log(f"    {exc}")
    committed_source = commit["context"]["committed_source"] or ""
    changes = list(step.changes)
    summary = step.summary
    verified = await _stage_kernels(d, problem, step, committed_source, changes)
    if step.tiling:
        verified, summary = await _tiling(d, step, verified, extra, changes, summary, log)
    candidate = _best(verified, d.timing)
    if step.tiling and candidate is not None and d.kernel_of.get(candidate["candidate_id"], "").startswith("propose"):
        step_summary = summary
    else:
        step_summary = step.summary
    commit = await d.commit(step.stage, candidate, committed, step_summary, changes, step.rationale, extra)
    committed = {"candidate_id": commit["committed"]["candidate_id"], "time_ms": commit["committed"]["time_ms"]}
    return commit, committed


async def _stage_kernels(d: _Driver, problem: str, step: Step, committed_source: str,
                         changes: list[str]) -> list[dict[str, Any]]:
    """The stage's kernels verified (with the committed tunables carried over, and its GPU variants on a GPU)."""
    verified = []
    for file in step.kernels:
        source = kernel_source(problem, file)
        label = file
        if step.carry_tunables:
            source, carried = carry_tunables(committed_source, source)
            if carried:
                changes.append("kept the committed configuration " + ", ".join(f"{k}={v}" for k, v in carried.items()))
        verified.append(await d.verify(step.stage, label, source, step.summary))
        if d.timing:
            for name, values in step.gpu_variants.items():
                for value in values:
                    verified.append(await d.verify(step.stage, f"{file} {name}={value}",
                                                   set_constant(source, name, value),
                                                   f"{step.summary} ({name}={value})"))
    return verified


async def _tiling(d: _Driver, step: Step, verified: list[dict[str, Any]], extra: list[dict[str, Any]],
                  changes: list[str], summary: str, log) -> tuple[list[dict[str, Any]], str]:
    """propose_tiling on the stage's best kernel and its recommendation verified; (the verified list, the summary)."""
    report = d.report
    assert report is not None  # _start made it
    first = _best(verified, d.timing)
    t = None
    if first is not None:
        log("  propose_tiling ...")
        try:
            t = await d.call("propose_tiling", task_id=d.task_id, candidate_id=first["candidate_id"],
                             max_trials=8, time_budget_s=90.0)
        except ToolFailed as exc:  # keep the stage's own kernel
            report.notes.append(f"{step.stage}: {exc}")
            log(f"    {exc}")
            t = None
    if first is not None and t is not None:
        prop = t["proposal"]
        rec = prop.get("recommended") or {}
        label = ", ".join(f"{k}={v}" for k, v in (rec.get("values") or {}).items()) or "unchanged"
        report.reports.append({"kind": "tiling", "report_id": t["report_id"], "candidate_id": first["candidate_id"],
                               "measured": prop.get("measured"), "recommended": label,
                               "feasible": prop.get("feasible_count"), "pruned": prop.get("pruned_count"),
                               "reason": prop.get("recommended_reason", "")})
        log(f"    recommended {label} ({'measured' if prop.get('measured') else 'analytic ranking only'}; "
            f"{prop.get('feasible_count')} feasible, {prop.get('pruned_count')} pruned)")
        extra.append({"metric": "tiling_recommendation", "after": label, "report_id": t["report_id"]})
        if prop.get("recommended_source"):
            rec_v = await d.verify(step.stage, f"propose_tiling: {label}", prop["recommended_source"],
                                   f"propose_tiling recommendation {label}")
            changes.append(f"propose_tiling recommended {label}")
            if not d.timing and rec_v["verdict"] == "correct":
                # nothing to measure on a CPU: the verified recommendation goes on
                verified = [rec_v]
            else:
                verified.append(rec_v)
            if rec_v["verdict"] == "correct":
                summary = f"{step.summary}: {label}"
    return verified, summary


async def _done(d: _Driver, report: DemoReport) -> None:
    """DONE: the kernel exported and the final status read."""
    exported = await d.call("export_kernel", task_id=d.task_id)
    report.export_path = exported.get("path")
    final = await d.call("task_status", task_id=d.task_id)
    report.final_stage = final["stage"]
    report.status = final
    report.eager_ms = final.get("eager_ms", report.eager_ms)
    report.compile_ms = final.get("compile_ms", report.compile_ms)


def _profile_line(p: dict[str, Any]) -> str:
    report = p["report"]
    kernels = report.get("kernels") or []
    headline = (kernels[0].get("classification") or {}).get("headline") if kernels else None
    return f"[{report.get('source')}] {headline or report.get('summary', '')}"[:300]


def server_command(config: ServerConfig) -> list[str]:
    """`python -m egg_mcp serve` with the demo's workspace and settings."""
    args = ["-m", "egg_mcp", "serve", "--workspace", str(config.workspace), "--log-level", "WARNING"]
    if config.kernelbench_dir:
        args += ["--kernelbench-dir", str(config.kernelbench_dir)]
    for root in config.allowed_roots:
        args += ["--allow-dir", str(root)]
    if config.force_interpreter:
        args.append("--interpreter")
    return [sys.executable, *args]


async def run_demo(problem: str, config: ServerConfig, *, transport: Literal["stdio", "in_process"] = "stdio",
                   log=lambda msg: None) -> DemoReport:
    """Start the server (a stdio subprocess, or in this process for tests) and drive the workflow."""
    from mcp import Client, StdioServerParameters

    if transport == "stdio":
        cmd = server_command(config)
        env = environment_copy()
        env["PYTHONPATH"] = PACKAGE_PARENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        target: Any = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env)
    elif transport == "in_process":
        from egg_mcp.server import create_server

        target = create_server(config)
    else:
        raise ValueError(f"unknown transport {transport!r}; use 'stdio' or 'in_process'")
    async with Client(target, read_timeout_seconds=900) as client:
        return await drive(client, problem, transport=transport, log=log)


def demo_workspace(given: Path | None, env: Mapping[str, str] | None = None) -> tuple[Path, bool]:
    """(workspace, temporary?): `--workspace` or $EGG_MCP_WORKSPACE (in `env`, default this process's environment)
    when given, else a new temporary folder, so the demo never writes its tasks into the user's default workspace."""
    if given is not None:
        return Path(given), False
    named = workspace_setting(env)
    if named:
        return Path(named).expanduser(), False
    return Path(tempfile.mkdtemp(prefix="egg-mcp-demo-")), True


def run_demo_cli(args: argparse.Namespace, config: ServerConfig) -> int:
    """Entry point of `egg-mcp demo`."""
    import anyio

    problem = args.problem
    if problem not in PLANS:
        print(f"no demo for {problem!r}; choose one of: {', '.join(available_problems())}", file=sys.stderr)
        return 2
    workspace, temporary = demo_workspace(getattr(args, "workspace", None))
    if temporary:
        config = config.model_copy(update={"workspace": workspace})
    workspace = config.workspace  # as `serve` will see it
    used = (f"workspace: {workspace} (temporary, kept for inspection; pass --workspace or set EGG_MCP_WORKSPACE "
            "to use another)" if temporary else f"workspace: {workspace}")
    print(used, file=sys.stderr, flush=True)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        report = anyio.run(lambda: run_demo(problem, config, log=log))
    except DemoError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    print(render_table(report))
    print(used)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(report.model_dump_json(indent=2))
        files = write_demo_report(report, args.json.with_suffix(""))
        print(f"wrote {args.json}, " + ", ".join(str(f) for f in files), file=sys.stderr)
    return 0

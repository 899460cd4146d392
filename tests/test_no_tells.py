"""Issue 27 item 5a: nothing a candidate reads as its process's plain facts tells it that it is being verified.

A kernel that computes only when it sees the sandbox's markers passes verify and returns zeros in the user's
process. This candidate looks where such a kernel would: every environment variable (names and values), its
cwd, HOME, TMPDIR and the cache dirs, sys.argv / sys.orig_argv, its own module name and __file__, the
hostname and the user name, and the default temp dir. If any of them contains egg, sandbox, judge, runner,
scratch or candidate (case-insensitive) it returns zeros. It runs in a real runner (WorkerEvaluator on the
CPU) whose scratch dir is deliberately named `egg-mcp-scratch`, and must be `correct`.

What the check leaves out, and why: a value the test's own process has too (PATH, LANG, a hostname or user
name that happen to contain a word) is the user's, not a tell: the user's own process sees the same; and
what needs introspection beyond plain facts (sys.modules' other entries, the stack, /proc/self/cmdline,
the parent process) is the static check's (tests/test_environment_probe.py).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import socket

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.problems.builtin import builtin_source

pytestmark = pytest.mark.slow

WORDS = ("egg", "sandbox", "judge", "runner", "scratch", "candidate")

CANDIDATE = '''
import getpass, json, os, socket, sys, tempfile
import torch
import torch.nn as nn
import triton
import triton.language as tl

WORDS = {words!r}
OWN = {own!r}   # (name, value) pairs the user's own process has too: not tells


def facts():
    out = {{"env:" + k: v for k, v in os.environ.items() if (k, v) not in OWN["env"]}}
    out.update({{"cwd": os.getcwd(), "home": os.path.expanduser("~"), "tmp": tempfile.gettempdir(),
                "argv": " ".join(sys.argv), "orig_argv": " ".join(getattr(sys, "orig_argv", [])),
                "module": __name__, "module_key": next((k for k, m in sys.modules.items()
                                                        if getattr(m, "__file__", None) == __file__), ""),
                "file": __file__}})
    host, user = socket.gethostname(), getpass.getuser()
    if host != OWN["host"]:
        out["hostname"] = host
    if user != OWN["user"]:
        out["user"] = user
    return out


def tells(found):
    return sorted(k for k, v in found.items() if any(w in (k + "=" + str(v)).lower() for w in WORDS))


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        found = facts()
        bad = tells(found)
        print("FACTS " + json.dumps({{"tells": bad, "facts": found}}), flush=True)
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                      BLOCK=triton.next_power_of_2(x.shape[1]))
        return torch.zeros_like(y) if bad else y
'''


def _candidate() -> str:
    own = {"env": sorted((k, v) for k, v in os.environ.items()), "host": socket.gethostname(),
           "user": getpass.getuser()}
    return CANDIDATE.format(words=WORDS, own=own)


def _facts(result) -> dict:
    lines = [ln for ln in (result.stdout_tail or "").splitlines() if ln.startswith("FACTS ")]
    return json.loads(lines[-1][len("FACTS "):]) if lines else {}


def test_a_kernel_sees_an_ordinary_process(tmp_path):
    async def run():
        ev = WorkerEvaluator(scratch_dir=tmp_path / "egg-mcp-scratch", force_interpreter=True, spare_workers=0)
        try:
            return await ev.evaluate(builtin_source("softmax"), _candidate(),
                                     EvalOptions(size_overrides={"batch_size": 8, "dim": 100}, correctness_trials=3))
        finally:
            await ev.aclose()

    result = asyncio.run(run())
    seen = _facts(result)
    assert seen, (result.verdict, result.summary, result.stdout_tail[-2000:], result.error)
    assert seen["tells"] == [], {k: seen["facts"][k] for k in seen["tells"]}
    assert result.verdict == "correct", (result.summary, result.error)
    facts = seen["facts"]
    assert facts["module"] == "model_new" and facts["file"].endswith("/model_new.py")
    assert facts["argv"] == "-c"
    # the sandbox was in force all the same: the markers travelled in argv, not in the environment
    assert result.sandbox and result.sandbox.get("env_allowlist") is True
    if result.sandbox.get("level") == "landlock+ns":
        assert result.sandbox.get("pid_namespace") is True

"""Issue 27 item 5b: a candidate whose source reads the environment, the filesystem, the clock or the process
state gets an `environment_probe` finding, which blocks commit_stage unless forced with a reason; the honest
kernels we ship and test with get none."""

from __future__ import annotations

import asyncio
import glob
from pathlib import Path

import pytest

from egg_mcp.analysis.environment_probes import CHECK, scan
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.workflow.core import WorkflowError
from egg_mcp.workflow.models import StageDecision
from tests.test_regression_guard import _service, src

ROOT = Path(__file__).resolve().parent.parent
HONEST = sorted({*glob.glob(str(ROOT / "egg_mcp/e2e/demo_kernels/**/*.py"), recursive=True),
                 *glob.glob(str(ROOT / "tests/adversarial/correct_*.py")),
                 *glob.glob(str(ROOT / "tests/adversarial/gpu_correct_*.py")),
                 *glob.glob(str(ROOT / "benchmarks/problems/**/*.py"), recursive=True),
                 *glob.glob(str(ROOT / "tests/fixtures/softmax/*.py"))})


def test_honest_kernels_read_nothing():
    assert len(HONEST) >= 10, HONEST
    found = {Path(f).relative_to(ROOT).as_posix(): [p.text() for p in scan(Path(f).read_text())] for f in HONEST}
    assert {f: p for f, p in found.items() if p} == {}


HONEST_BITS = """
import math
import torch, triton, triton.language as tl
B = triton.cdiv(1000, 128)
SCALE = 1.0 / math.sqrt(64)
out = torch.empty(4, device="cpu")
props = torch.cuda.get_device_properties if torch.cuda.is_available() else None
if __name__ == "__main__":
    pass
"""


def test_ordinary_kernel_code_is_no_probe():
    assert scan(HONEST_BITS) == []


@pytest.mark.parametrize("code, kind", [
    ("import os\nX = os.environ.get('HOME')", "environment"),
    ("import os\nX = os.getenv('USER')", "environment"),
    ("from os import environ\nX = 'EGG' in environ", "environment"),
    ("import os\nX = os.uname().nodename", "environment"),
    ("import socket\nX = socket.gethostname()", "environment"),
    ("import getpass\nX = getpass.getuser()", "environment"),
    ("import pwd\nX = pwd.getpwuid(0)", "environment"),
    ("X = open('/etc/hostname').read()", "filesystem"),
    ("from pathlib import Path\nX = Path('.').exists()", "filesystem"),
    ("import os\nX = os.listdir('.')", "filesystem"),
    ("import os\nX = os.path.exists('x')", "filesystem"),
    ("import os\nX = os.stat('.')", "filesystem"),
    ("import glob\nX = glob.glob('*')", "filesystem"),
    ("X = __file__", "filesystem"),
    ("import os\nX = os.getcwd()", "filesystem"),
    ("import time\nX = time.time()", "clock"),
    ("from datetime import datetime\nX = datetime.now()", "clock"),
    ("import os\nX = os.getpid()", "process state"),
    ("import os\nX = os.getppid()", "process state"),
    ("import os\nX = os.getuid()", "process state"),
    ("import sys\nX = sys.argv", "process state"),
    ("import sys\nX = list(sys.modules)", "process state"),
    ("import sys\nX = sys._getframe(1).f_globals", "process state"),
    ("import inspect\nX = inspect.stack()", "process state"),
    ("import threading\nX = threading.current_thread().name", "process state"),
    ("import torch\nX = torch.cuda.is_current_stream_capturing()", "process state"),
    ("from torch.cuda import is_current_stream_capturing as c\nX = c()", "process state"),
    ("import torch\nX = torch.are_deterministic_algorithms_enabled()", "process state"),
    ("import os as o\nX = getattr(o, 'environ')", "environment"),
    ("import os\nX = getattr(os, 'env' + 'iron')", "dynamic code"),
    ("X = __import__('o' + 's')", "dynamic code"),
])
def test_each_kind_of_read_is_a_probe(code, kind):
    probes = scan(code)
    assert probes and kind in {p.what for p in probes}, (code, [p.text() for p in probes])


PROBE = "\nimport os\n_SEEN = 'EGG_MCP_SANDBOX_NS' in os.environ\n"


def _decision():
    return StageDecision(summary="seed", rationale="r")


def test_a_probe_is_shown_by_verify_and_blocks_commit_unless_forced(tmp_path):
    service, _ = _service(tmp_path, {"a": ("correct", 1.0, 0.0)})

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        v = await service.verify(task.task_id, PROBE + src("a"))
        with pytest.raises(WorkflowError, match=CHECK) as refused:
            await service.commit_stage(task.task_id, v.candidate_id, _decision())
        done = await service.commit_stage(task.task_id, v.candidate_id, _decision(), force=True,
                                          force_reason="reads HOME only to find a config file; reviewed")
        return v, str(refused.value), done

    v, refused, done = asyncio.run(scenario())
    assert v.verdict == "correct"
    assert [f.check for f in v.result.integrity if f.check == CHECK] == [CHECK]
    assert "os.environ" in refused and "force_reason" in refused
    assert any(w.startswith(f"{CHECK} overridden by force") for w in done.warnings), done.warnings
    assert done.committed.forced and "reviewed" in (done.committed.force_reason or "")


def test_a_clean_candidate_commits_without_force(tmp_path):
    service, _ = _service(tmp_path, {"a": ("correct", 1.0, 0.0)})

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        v = await service.verify(task.task_id, src("a"))
        return v, await service.commit_stage(task.task_id, v.candidate_id, _decision())

    v, done = asyncio.run(scenario())
    assert not [f for f in v.result.integrity if f.check == CHECK] and not done.committed.forced
    assert not [w for w in done.warnings if CHECK in w]

"""host_audit.py route by route, in a fresh interpreter (the audit hook cannot be removed once added).

Each scenario is a function of a candidate file run under HostAudit.arm("forward"); the child prints the
findings per scenario as JSON. The end-to-end verdicts are in test_evaluation_adversarial.py
(tests/adversarial/host_*, native_*, escape_*).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CANDIDATE = '''
import gc, math, pickle, sys, functools, operator
import numpy as np
import torch
import triton


def legit(x):
    n, d = x.shape
    y = torch.empty_like(x)
    z = torch.zeros(n, device=x.device).view(n, 1).reshape(n).contiguous().to(x.device)
    block = triton.next_power_of_2(d)
    grid = triton.cdiv(n * d, block)
    s = math.sqrt(d) + math.log2(block) + int(x.shape[0]) + x.stride(0) + x.numel() + len(x)
    return y, z, s, x.dtype, x.is_contiguous(), x.data_ptr() % 16


def item(x):
    return x[0, 0].item()


def float_(x):
    return float(x[0, 0])


def repr_(x):
    return f"{x}"


def pickle_(x):
    return pickle.dumps(x)


def methodcaller(x):
    return operator.methodcaller("tolist")(x)


def storage(x):
    return bytes(x.untyped_storage())


def tensorbase_numpy(x):
    return torch._C.TensorBase.numpy(x)


def getframe(x):
    return sys._getframe(1).f_locals


def gc_objects(x):
    return len(gc.get_objects())


def addaudithook(x):
    try:
        sys.addaudithook(lambda *a: None)
    except Exception:
        pass


def exec_(x):
    ns = {}
    exec("def f(t):\\n    return t", ns)
    return ns["f"](x)


def push_guard(x):
    keys = torch._C._dispatch_tls_local_exclude_set()
    torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.Python, True)
    try:
        return torch.exp(x)
    finally:
        torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.Python, False)


def open_reference(x):
    with open(REFERENCE) as f:
        return f.read()
'''

DRIVER = r'''
import json, os, sys
sys.path.insert(0, sys.argv[3])
import torch
from egg_mcp.evaluation.integrity import OpRecorder
from egg_mcp.evaluation.host_audit import HostAudit
from egg_mcp.problems.modules import import_file

audit = HostAudit()
audit.install(reference_path=sys.argv[2])
recorder = OpRecorder()
recorder.__enter__()
audit.arm("import", candidate_path=sys.argv[1])
cand = import_file(sys.argv[1], "cand")
cand.REFERENCE = sys.argv[2]
audit.disarm()
out = {"import": audit.drain()}
x = torch.randn(4, 8)
for name in sys.argv[4].split(","):
    audit.arm("forward")
    try:
        getattr(cand, name)(x)
    except Exception as exc:
        out.setdefault("errors", {})[name] = repr(exc)
    audit.disarm()
    out[name] = audit.drain()
print(json.dumps(out))
'''

EXPECTED = {
    "item": ("host_compute", "Tensor.item"),
    "float_": ("host_compute", "Tensor.__float__"),
    "repr_": ("host_compute", "Tensor.__format__"),
    "pickle_": ("host_compute", "Tensor.__reduce_ex__"),
    "methodcaller": ("host_compute", "Tensor.tolist"),
    "storage": ("host_compute", "Tensor.untyped_storage"),
    "tensorbase_numpy": ("host_compute", "TensorBase.numpy"),
    "getframe": ("dispatch_escape", "sys._getframe"),
    "gc_objects": ("dispatch_escape", "gc.get_objects"),
    "addaudithook": ("dispatch_escape", "sys.addaudithook"),
    "exec_": ("dispatch_escape", "ran compile"),
    "push_guard": ("dispatch_escape", "_dispatch_tls_set_dispatch_key_excluded"),
    "open_reference": ("dispatch_escape", "reference's source file"),
}


@pytest.fixture(scope="module")
def findings(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("host_audit")
    candidate = tmp / "model_new.py"
    candidate.write_text(CANDIDATE)
    reference = tmp / "model.py"
    reference.write_text("class Model: pass\n")
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(candidate), str(reference), root,
                           ",".join(["legit", *EXPECTED])], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_and_legit_glue_give_no_finding(findings):
    assert findings["import"] == []
    assert findings["legit"] == [], findings["legit"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_route_is_reported(findings, name):
    check, words = EXPECTED[name]
    got = findings[name]
    assert any(c == check and words in detail and "candidate line" in detail for c, detail in got), (name, got,
                                                                                                     findings.get("errors"))


def test_instrument_switch_off_is_refused(findings):
    assert "addaudithook" not in findings.get("errors", {})  # refused quietly (RuntimeError from a hook)
    assert any("refused" in detail for _, detail in findings["addaudithook"])


def test_triton_interpreter_use_of_host_methods_is_not_the_candidates():
    """The interpreter itself calls .cpu()/untyped_storage()/numpy on the candidate's tensors: attributed to triton."""
    source = textwrap.dedent('''
        import torch, triton, triton.language as tl

        @triton.jit
        def k(x_ptr, y_ptr, N: tl.constexpr):
            o = tl.arange(0, N)
            tl.store(y_ptr + o, tl.exp(tl.load(x_ptr + o)))

        def legit(x):
            y = torch.empty_like(x)
            k[(1,)](x, y, N=x.numel())
            return y
    ''')
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        candidate = Path(tmp) / "model_new.py"
        candidate.write_text(source)
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        proc = subprocess.run([sys.executable, "-c", DRIVER, str(candidate), str(Path(tmp) / "model.py"), root,
                               "legit"], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["import"] == [] and out["legit"] == [], out

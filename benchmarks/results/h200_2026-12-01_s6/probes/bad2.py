"""mode: none | default | netsig | tmp   ; kind: bad | good"""
import os, sys, json, tempfile
from pathlib import Path
mode, kind = sys.argv[1], sys.argv[2]
import torch, triton, triton.language as tl
torch.cuda.init(); torch.zeros(1, device="cuda")
priv = Path(tempfile.mkdtemp(prefix="priv-", dir=os.environ.get("PRIVROOT", "/tmp")))
os.environ.update(TMPDIR=str(priv), HOME=str(priv), TRITON_CACHE_DIR=str(priv / "triton"))
tempfile.tempdir = str(priv)
if mode != "none":
    from egg_mcp.sandbox import _sys as S
    from egg_mcp.sandbox import landlock as L
    if mode in ("netsig", "tmp"):
        S.SCOPE_ABSTRACT_UNIX_SOCKET = 0
    extra_w = [Path("/tmp")] if mode == "tmp" else []
    keep = [21] if mode == "keep" else []
    rep = L.confine_dict(priv, network=(mode not in ("default", "keep", "drop")), extra_write=extra_w, keep_caps=keep)
    print("CAPS", [l.strip() for l in open("/proc/self/status") if l.startswith("CapEff")], rep.get("capabilities_kept"), rep.get("seccomp_denied"), flush=True)
    print("CONFINE", json.dumps({k: rep[k] for k in ("level", "fs_confined", "signals_scoped", "network_confined")}), flush=True)
@triton.jit
def k(x_ptr, y_ptr, n, EXTRA: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n + EXTRA
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0) * 2, mask=m)
n = 4096
x = torch.randn(n, device="cuda"); y = torch.empty(n, device="cuda")
k[(triton.cdiv(n + 1, 1024),)](x, y, n, EXTRA=1 if kind == "bad" else 0, BLOCK=1024)
torch.cuda.synchronize()
print("DONE", mode, kind, flush=True)

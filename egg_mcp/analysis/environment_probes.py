"""Environment probes in a candidate's source (issue 27 item 5b): code that reads its surroundings can
decide what to compute from them, e.g. compute right only where it sees the verifier, and return zeros in
the user's process. The runner shows candidates an ordinary-looking process (no marker in the environment,
plain paths and names: runner.py `no_tells`), but code that looks further still finds the harness (its
modules, the stack, /proc). So the server parses every candidate (never runs it) and reports each read of

* the environment: os.environ / os.getenv / os.uname, socket.gethostname, getpass, pwd, platform.node;
* the filesystem: open, pathlib, os.listdir / os.path.exists / os.stat, glob, __file__, /proc or /sys paths;
* the clock: time, datetime;
* the process state: os.getpid / getppid / getuid, sys.argv / sys.modules / sys.path / sys._getframe,
  inspect, frames (f_back, f_globals), gc, threading, ctypes, importlib, torch's stream-capture and
  determinism switches (the verifier captures CUDA graphs and turns deterministic mode on), memory stats;
* dynamic code that hides such reads: eval / exec / compile / __import__ / __builtins__ / getattr with a
  computed name on a module.

Honest Triton kernels use none of these (triton.cdiv, torch.empty, math.sqrt of constants, device
properties for tuning are not probes). A finding (check `environment_probe`) blocks commit_stage unless the
client passes force=true with a force_reason, which is recorded with the commit.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from egg_mcp import pysource

CHECK = "environment_probe"

# Modules whose every use is a probe (what they are for is reading the machine, the clock or the process).
_MODULES = {
    "socket": "environment", "getpass": "environment", "pwd": "environment", "grp": "environment",
    "platform": "environment", "pathlib": "filesystem", "glob": "filesystem", "fnmatch": "filesystem",
    "shutil": "filesystem", "tempfile": "filesystem", "fcntl": "filesystem", "time": "clock",
    "datetime": "clock", "calendar": "clock", "inspect": "process state", "threading": "process state",
    "_thread": "process state", "multiprocessing": "process state", "subprocess": "process state",
    "signal": "process state", "resource": "process state", "psutil": "process state", "gc": "process state",
    "ctypes": "process state", "importlib": "process state", "pkgutil": "process state", "site": "process state",
    "traceback": "process state", "__main__": "process state", "builtins": "process state",
    "uuid": "environment", "sysconfig": "environment", "pynvml": "environment",
}
# os: every use but these (they compute on strings or count CPUs, reading nothing that tells).
_OS_HARMLESS = {"os.path.join", "os.path.basename", "os.path.dirname", "os.path.splitext", "os.path.split",
                "os.sep", "os.linesep", "os.pathsep", "os.cpu_count", "os.path.sep"}
_SYS = {"sys.argv", "sys.orig_argv", "sys.modules", "sys._getframe", "sys._current_frames", "sys.path",
        "sys.executable", "sys.gettrace", "sys.getprofile", "sys.prefix", "sys.base_prefix", "sys.exec_prefix",
        "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache", "sys.stdin", "sys.flags",
        "sys.exc_info", "sys.exception", "sys.last_traceback", "sys.getrefcount", "sys.audit", "sys.addaudithook",
        "sys.settrace", "sys.setprofile", "sys.monitoring"}
_TORCH = {
    "torch.cuda.is_current_stream_capturing": "process state", "torch.cuda.graphs.is_current_stream_capturing":
    "process state", "torch._C._cuda_isCurrentStreamCapturing": "process state",
    "torch.cuda.graph_pool_handle": "process state", "torch.are_deterministic_algorithms_enabled": "process state",
    "torch.is_deterministic_algorithms_warn_only_enabled": "process state",
    "torch.get_deterministic_debug_mode": "process state", "torch.utils.deterministic": "process state",
    "torch.cuda.memory_allocated": "process state", "torch.cuda.max_memory_allocated": "process state",
    "torch.cuda.memory_reserved": "process state", "torch.cuda.max_memory_reserved": "process state",
    "torch.cuda.memory_stats": "process state", "torch.cuda.memory_snapshot": "process state",
    "torch.cuda.mem_get_info": "process state", "torch.cuda.list_gpu_processes": "process state",
    "torch.cuda.memory.memory_allocated": "process state", "torch.cuda.memory.mem_get_info": "process state",
    "torch._C._get_tracing_state": "process state", "torch.overrides.has_torch_function": "process state",
    "torch._C._is_torch_function_enabled": "process state", "torch.hub.get_dir": "filesystem",
    "torch.load": "filesystem", "torch.from_file": "filesystem",
    "torch.cuda.utilization": "process state", "torch.cuda.temperature": "environment",
    "torch.cuda.clock_rate": "environment", "torch.cuda.power_draw": "environment",
}
_BUILTINS = {"open": "filesystem", "__file__": "filesystem", "__spec__": "process state",
             "__loader__": "process state", "__cached__": "filesystem", "__builtins__": "dynamic code",
             "__import__": "dynamic code", "eval": "dynamic code", "exec": "dynamic code",
             "compile": "dynamic code", "globals": "process state", "vars": "process state",
             "breakpoint": "process state", "input": "environment"}
_FRAME_ATTRS = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "gi_frame", "cr_frame",
                "ag_frame", "__subclasses__", "__globals__", "__builtins__"}
_PATH_WORDS = ("/proc/", "/sys/", "/etc/", "/dev/", "/tmp", "/home/", "/root", "egg_mcp", "egg-mcp", "EGG_MCP")


@dataclass(frozen=True)
class Probe:
    line: int
    what: str     # environment | filesystem | clock | process state | dynamic code
    name: str     # the dotted name or builtin read

    def text(self) -> str:
        return f"line {self.line}: {self.name} ({self.what})"


class _Scan(ast.NodeVisitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}   # local name -> dotted module path or attribute
        self.bound: set[str] = set()        # names the source defines itself (shadowing a builtin)
        self.found: list[Probe] = []

    # -- names the source binds ---------------------------------------------------------------
    def bind(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
                args = node.args if not isinstance(node, ast.ClassDef) else None
                if args is not None:
                    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                        if a is not None:
                            self.bound.add(a.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.bound.add(node.id)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    local = a.asname or a.name.split(".")[0]
                    self.aliases[local] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def add(self, node: ast.AST, what: str | None, name: str) -> None:
        if what:
            self.found.append(Probe(getattr(node, "lineno", 0), what, name))

    # -- what a dotted name reads ----------------------------------------------------------------
    def classify(self, dotted: str) -> str | None:
        top = dotted.split(".")[0]
        if top in _MODULES:
            return _MODULES[top]
        if top == "os":
            if dotted in ("os", "os.path") or any(dotted == h or dotted.startswith(h + ".") for h in _OS_HARMLESS):
                return None
            if dotted.startswith(("os.environ", "os.getenv", "os.uname", "os.putenv", "os.unsetenv")):
                return "environment"
            if dotted.startswith(("os.getcwd", "os.getcwdb")):
                return "filesystem"
            if dotted.startswith(("os.get", "os.times", "os.kill", "os.fork", "os.exec", "os.spawn", "os.system",
                                  "os.popen", "os.sched_", "os.wait", "os.register_at_fork")):
                return "process state"
            return "filesystem"
        if top == "sys":
            return "process state" if any(dotted == s or dotted.startswith(s + ".") for s in _SYS) else None
        if top == "io" and dotted in ("io.open", "io.FileIO", "io.open_code"):
            return "filesystem"
        for name, what in _TORCH.items():
            if dotted == name or dotted.startswith(name + "."):
                return what
        return None

    def dotted(self, node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value,
                                                                                                  str):
            base = self.dotted(node.args[0])
            return ".".join([base, node.args[1].value, *reversed(parts)]) if base else None
        if not isinstance(node, ast.Name):
            return None
        root = self.aliases.get(node.id)
        if root is None:
            if node.id in ("os", "sys", "torch") or node.id in _MODULES:
                root = node.id  # used without an import we saw (e.g. reached through another module)
            else:
                return None
        return ".".join([root, *reversed(parts)])

    # -- visiting -----------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.add(node, self.classify(a.name), f"import {a.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            for a in node.names:
                self.add(node, self.classify(f"{node.module}.{a.name}"), f"from {node.module} import {a.name}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FRAME_ATTRS:
            self.add(node, "process state", f".{node.attr}")
        dotted = self.dotted(node)
        if dotted is not None:
            what = self.classify(dotted)
            if what:
                self.add(node, what, dotted)
                return  # one finding per chain (os.path.exists, not os.path too)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _BUILTINS and node.id not in self.bound and node.id not in self.aliases:
            self.add(node, _BUILTINS[node.id], node.id)
        elif node.id in self.aliases and isinstance(node.ctx, ast.Load):
            what = self.classify(self.aliases[node.id])
            if what:
                self.add(node, what, self.aliases[node.id])

    def visit_Call(self, node: ast.Call) -> None:
        # getattr(<module>, <computed name>): a read the table cannot see
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr",
                                                                "hasattr") and node.func.id not in self.bound \
                and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
            base = self.dotted(node.args[0]) if isinstance(node.args[0], (ast.Name, ast.Attribute)) else None
            if base is not None and base.split(".")[0] in ("os", "sys", "torch", *_MODULES):
                self.add(node, "dynamic code", f"{node.func.id}({base}, <computed>)")
        elif isinstance(node.func, ast.Name) and node.func.id == "getattr" and node.func.id not in self.bound:
            dotted = self.dotted(node)  # getattr(os, "environ"): os.environ
            if dotted is not None:
                self.add(node, self.classify(dotted), dotted)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and any(w in node.value for w in _PATH_WORDS):
            self.add(node, "filesystem", repr(node.value[:60]))


def scan(source: str) -> list[Probe]:
    """Every probe in `source` (empty when it does not parse: verify reports the syntax error)."""
    try:
        tree = pysource.parse(source)
    except (SyntaxError, ValueError):
        return []
    s = _Scan()
    s.bind(tree)
    # docstrings are text, not reads: drop them before visiting constants
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value,
                                                                                                    str):
                node.body = node.body[1:] or [ast.Pass()]
    s.visit(tree)
    seen, out = set(), []
    for p in sorted(s.found, key=lambda p: (p.line, p.name)):
        if (p.line, p.name) not in seen:
            seen.add((p.line, p.name))
            out.append(p)
    return out


def describe(probes: list[Probe], limit: int = 8) -> str:
    """One sentence for a finding or a refusal."""
    kinds = sorted({p.what for p in probes})
    shown = "; ".join(p.text() for p in probes[:limit]) + (f"; and {len(probes) - limit} more" if len(probes) > limit
                                                           else "")
    return (f"the source reads its surroundings ({', '.join(kinds)}): {shown}. A kernel must compute the same "
            "wherever it runs; code that reads the environment, files, the clock or the process state can "
            "behave differently under verification than in the user's process")

"""Where a candidate's tunable values sit in its source, read with `ast` (the source is never executed here).

Read, in order of authority:
  * ``TUNING_SPACE = {"BLOCK_M": [64, 128], ...}`` — a module-level literal dict of choices;
  * ``@triton.autotune(configs=[triton.Config({...}, num_warps=.., num_stages=..), ...])``;
  * module-level UPPERCASE int constants used at launch (``BLOCK_M = 128``, ``NUM_WARPS = 4``);
  * int literals passed at a launch site (``kernel[grid](..., BLOCK_SIZE=1024, num_warps=4)``);
  * the ``tl.constexpr`` parameters of the kernels (to name what is tunable and what is derived).
`space.py` turns this index into the space of choices; `rewrite.py` rewrites the literals it locates.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Mapping

from egg_mcp import pysource
from egg_mcp.tiling.tiling_types import KernelFacts, ParamRole

LAUNCH_OPTIONS = ("num_warps", "num_stages")


def role_of(name: str) -> ParamRole:
    upper = name.upper().rsplit(".", 1)[-1]  # "attn_kernel.num_warps": one kernel's launch option
    if upper in ("NUM_WARPS", "WARPS") or upper.endswith("_WARPS"):
        return "warps"
    if upper in ("NUM_STAGES", "STAGES") or upper.endswith("_STAGES"):
        return "stages"
    if upper.startswith("GROUP"):
        return "group"
    if "SPLIT" in upper:
        return "split"
    if "BLOCK" in upper or "TILE" in upper or upper.startswith("ROWS_PER") or upper.endswith("_PER_PROGRAM"):
        return "block"
    if re.fullmatch(r"B_?[MNKDRCXY]", upper):  # BM, BN, BK: the usual GEMM spelling
        return "block"
    return "other"



PERSISTENT_NAMES = re.compile(r"(PROGRAMS|CTAS|BLOCKS)_PER_SM|NUM_SMS|NUM_PROGRAMS|N_PROGRAMS|GRID_SIZE")
"""Module constants that size a persistent grid (per SM, or in total)."""



def int_literal(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return dotted(node.func)
    return ""


def _is_constexpr(annotation: ast.AST | None) -> bool:
    return annotation is not None and dotted(annotation).split(".")[-1] == "constexpr"


@dataclass
class AutotuneSite:
    kernel: str
    list_node: ast.List
    config_func: str  # source text of the Config callee, e.g. "triton.Config"
    configs: list[dict[str, int]]  # each with num_warps / num_stages folded in


@dataclass
class SourceIndex:
    """Where every tunable value sits in the source."""

    tree: ast.Module
    constants: dict[str, list[ast.expr]] = field(default_factory=dict)  # name -> int literal nodes
    tuning_space: dict[str, list[int]] | None = None
    tuning_space_line: int | None = None
    kernels: list[KernelFacts] = field(default_factory=list)
    autotune: list[AutotuneSite] = field(default_factory=list)
    launch_literals: dict[str, list[ast.expr]] = field(default_factory=dict)  # param -> literal nodes
    launch_names: dict[str, set[str]] = field(default_factory=dict)  # kw -> module constants passed
    sites: list[tuple[str, dict[str, ast.AST]]] = field(default_factory=list)  # (kernel, kw -> value) per launch
    derived: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _parse(source: str) -> ast.Module:
    try:
        return pysource.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"candidate source does not parse (line {exc.lineno}: {exc.msg}); "
                         "fix the syntax first") from exc


def _autotune_site(kernel: str, call: ast.Call, top_level: Mapping[str, ast.AST],
                   warnings: list[str]) -> AutotuneSite | None:
    node = next((kw.value for kw in call.keywords if kw.arg == "configs"), call.args[0] if call.args else None)
    if isinstance(node, ast.Name) and isinstance(top_level.get(node.id), ast.List):
        node = top_level[node.id]
    if not isinstance(node, ast.List):
        warnings.append(f"{kernel}: triton.autotune configs are not a literal list; they are not read")
        return None
    configs, func = [], ""
    for element in node.elts:
        if not (isinstance(element, ast.Call) and dotted(element.func).split(".")[-1] == "Config" and element.args):
            warnings.append(f"{kernel}: an autotune entry at line {element.lineno} is not triton.Config({{...}}); "
                            "skipped")
            continue
        try:
            values = ast.literal_eval(element.args[0])
        except ValueError:
            warnings.append(f"{kernel}: autotune config at line {element.lineno} is not a literal dict; skipped")
            continue
        kwargs = {kw.arg: int_literal(kw.value) for kw in element.keywords if kw.arg in LAUNCH_OPTIONS}
        values = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
        values["num_warps"] = kwargs.get("num_warps") or 4
        values["num_stages"] = kwargs.get("num_stages") or 3
        configs.append(values)
        func = ast.unparse(element.func)
    if not configs:
        return None
    return AutotuneSite(kernel=kernel, list_node=node, config_func=func, configs=configs)


def _persistent(fn: ast.FunctionDef, calls: list[str]) -> bool:
    """A kernel whose programs loop over the tiles, so its grid has a program count of its own (per SM), not one
    program per tile: a loop from the program id striding by a program count (range(pid, tiles, NUM_SMS),
    tl.range(pid, tiles, tl.num_programs(0))), or any loop in a kernel that counts its programs."""
    if "num_programs" in calls and any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(fn)):
        return True
    assigned = {t.id: n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}

    def reads(node: ast.AST, test) -> bool:
        return any(test(x) or (isinstance(x, ast.Name) and x.id in assigned and test(assigned[x.id]))
                   for x in ast.walk(node))

    pid = lambda x: isinstance(x, ast.Call) and dotted(x.func).endswith("program_id")  # noqa: E731
    count = lambda x: ((isinstance(x, ast.Call) and dotted(x.func).endswith("num_programs"))  # noqa: E731
                       or (isinstance(x, ast.Name) and PERSISTENT_NAMES.search(x.id.upper()) is not None))
    return any(isinstance(n, ast.For) and isinstance(n.iter, ast.Call) and len(n.iter.args) >= 3
               and dotted(n.iter.func).split(".")[-1] in ("range", "static_range")
               and reads(n.iter.args[0], pid) and reads(n.iter.args[2], count) for n in ast.walk(fn))


def _kernel_facts(fn: ast.FunctionDef, autotuned: bool) -> KernelFacts:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    calls = sorted({dotted(n.func).split(".", 1)[1] for n in ast.walk(fn)
                    if isinstance(n, ast.Call) and dotted(n.func).startswith("tl.")})
    dots = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and dotted(n.func).split(".")[-1] == "dot"]
    precisions = {kw.value.value for d in dots for kw in d.keywords
                  if kw.arg in ("input_precision", "allow_tf32") and isinstance(kw.value, ast.Constant)}
    precision = next((p for p in ("ieee", "tf32x3", "tf32") if p in precisions), None)
    if precision is None and False in precisions:  # allow_tf32=False
        precision = "ieee"
    return KernelFacts(
        dot_precision=precision,
        n_dots=len(dots),
        name=fn.name,
        constexprs=[a.arg for a in args if _is_constexpr(a.annotation)],
        has_loop=any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(fn)),
        uses_dot=any(c in ("dot", "dot_scaled") for c in calls),
        ieee_dot=any(isinstance(n, ast.Constant) and n.value == "ieee" for n in ast.walk(fn)),
        tl_calls=calls,
        autotuned=autotuned,
        line=fn.lineno,
        persistent=_persistent(fn, calls),
    )


def index_source(source: str) -> SourceIndex:
    tree = _parse(source)
    index = SourceIndex(tree=tree)
    top_level = _index_module_constants(tree, index)
    _index_kernels(tree, index, top_level)
    _index_launches(tree, index)
    if any(k.persistent for k in index.kernels):
        sized = [n for n in index.constants if PERSISTENT_NAMES.fullmatch(n) or PERSISTENT_NAMES.search(n)]
        if sized:
            name = sized[0]
            index.derived["persistent_grid"] = f"{name}={int_literal(index.constants[name][-1])}"
        else:
            index.derived["persistent_grid"] = "NUM_SMS=1"
    return index


def _index_module_constants(tree: ast.Module, index: SourceIndex) -> dict[str, ast.expr]:
    """Module-level int constants and TUNING_SPACE into `index`; returns every top-level assignment's value."""
    top_level: dict[str, ast.expr] = {}
    for stmt in tree.body:
        targets, value = [], None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if not isinstance(target, ast.Name) or value is None:  # (value is None only without targets)
                continue
            top_level[target.id] = value
            if int_literal(value) is not None:
                index.constants.setdefault(target.id, []).append(value)
            if target.id == "TUNING_SPACE":
                index.tuning_space_line = stmt.lineno
                index.tuning_space = _tuning_space(value, stmt.lineno)
    return top_level


def _tuning_space(value: ast.AST, lineno: int) -> dict[str, list[int]]:
    """TUNING_SPACE's literal: names to sorted, distinct ints (anything else is the author's error)."""
    try:
        raw = ast.literal_eval(value)
    except ValueError as exc:
        raise ValueError(f"TUNING_SPACE (line {lineno}) must be a literal dict of int lists") from exc
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, (list, tuple)) and v
        and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        for k, v in raw.items()
    ):
        raise ValueError(
            f"TUNING_SPACE (line {lineno}) must map names to non-empty lists of ints, "
            'e.g. {"BLOCK_M": [64, 128], "NUM_WARPS": [4, 8]}'
        )
    return {k: sorted(set(v)) for k, v in raw.items()}


def _index_kernels(tree: ast.Module, index: SourceIndex, top_level: Mapping[str, ast.AST]) -> None:
    """The @triton.jit kernels and their @triton.autotune sites."""
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        names = [dotted(d).split(".")[-1] for d in stmt.decorator_list]
        if "jit" not in names:
            continue
        autotune_calls = [d for d in stmt.decorator_list if isinstance(d, ast.Call) and dotted(d).endswith("autotune")]
        index.kernels.append(_kernel_facts(stmt, autotuned=bool(autotune_calls)))
        for call in autotune_calls:
            site = _autotune_site(stmt.name, call, top_level, index.warnings)
            if site:
                index.autotune.append(site)


def _index_launches(tree: ast.Module, index: SourceIndex) -> None:
    """Each `kernel[grid](...)` site: its keywords as literals (tunable), module constants (tunable
    through the constant) or expressions (derived)."""
    kernel_names = {k.name: k for k in index.kernels}
    launches = [(node, node.func) for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)]
    # a launch option (num_warps=4) given as a literal at the sites of several kernels is one knob per kernel
    option_kernels: dict[str, set[str]] = {}
    for node, func in launches:
        kernel = kernel_names.get(dotted(func.value).split(".")[-1])
        for kw in node.keywords:
            if kernel is not None and kw.arg in LAUNCH_OPTIONS and int_literal(kw.value) is not None:
                option_kernels.setdefault(kw.arg, set()).add(kernel.name)
    for node, func in launches:
        kernel = kernel_names.get(dotted(func.value).split(".")[-1])
        if kernel is not None:
            index.sites.append((kernel.name, {kw.arg: kw.value for kw in node.keywords if kw.arg}))
            kernel.launch_sites += 1
        for kw in node.keywords:
            if kw.arg is None:
                continue
            constexpr = kernel is not None and kw.arg in kernel.constexprs
            if not (constexpr or kw.arg in LAUNCH_OPTIONS):
                continue
            if int_literal(kw.value) is not None:
                key = kw.arg
                if kernel is not None and kw.arg in LAUNCH_OPTIONS and len(option_kernels.get(kw.arg, ())) > 1:
                    key = f"{kernel.name}.{kw.arg}"
                index.launch_literals.setdefault(key, []).append(kw.value)
            elif isinstance(kw.value, ast.Name) and kw.value.id in index.constants:
                index.launch_names.setdefault(kw.arg, set()).add(kw.value.id)
            else:
                index.derived[kw.arg] = ast.unparse(kw.value)

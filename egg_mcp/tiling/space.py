"""Read a candidate's tunable parameters with `ast` (it is never executed here) and rewrite them.

Sources of the space, in order of authority:
  * ``TUNING_SPACE = {"BLOCK_M": [64, 128], ...}`` — a module-level literal dict of choices;
  * ``@triton.autotune(configs=[triton.Config({...}, num_warps=.., num_stages=..), ...])``;
  * module-level UPPERCASE int constants used at launch (``BLOCK_M = 128``, ``NUM_WARPS = 4``);
  * int literals passed at a launch site (``kernel[grid](..., BLOCK_SIZE=1024, num_warps=4)``);
  * the ``tl.constexpr`` parameters of the kernels (to name what is tunable and what is derived).
Choices nobody declared are inferred from the parameter's role and the problem dimensions.

`apply_config` rewrites exactly the literal that holds each value (located by `ast`), leaving every
other byte of the source as it was, so the result is a ready-to-verify candidate.
"""

from __future__ import annotations

import ast
import re
import itertools
import math
import random
from dataclasses import dataclass, field

from egg_mcp.tiling.dims import axis_for, next_pow2, pow2_range
from egg_mcp.tiling.models import CandidateSpace, KernelFacts, ParamRole, TunableParam

DEFAULT_MAX_CONFIGS = 16384
_LAUNCH_OPTIONS = ("num_warps", "num_stages")


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


def persistent_programs(space: CandidateSpace, sm_count: int, values: dict[str, int] | None = None) -> int | None:
    """Programs a persistent grid launches (its kernels loop over tiles with tl.num_programs), or None.

    Read from the module constant the source sizes the grid with: `*_PER_SM` times the SM count, a
    total (`NUM_PROGRAMS`, `GRID_SIZE`) as is, `NUM_SMS` as one program per SM; `values` (a config
    being estimated) wins over the source's value."""
    spec = space.derived.get("persistent_grid")
    if not spec:
        return None
    name, _, value = spec.partition("=")
    try:
        n = int((values or {}).get(name, value))
    except ValueError:
        return None
    if name.endswith("_PER_SM"):
        return max(1, n) * sm_count
    if name == "NUM_SMS":
        return sm_count
    return max(1, n)


# --------------------------------------------------------------------------------------------- AST


def _int_literal(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def _is_constexpr(annotation: ast.AST | None) -> bool:
    return annotation is not None and _dotted(annotation).split(".")[-1] == "constexpr"


@dataclass
class _AutotuneSite:
    kernel: str
    list_node: ast.List
    config_func: str  # source text of the Config callee, e.g. "triton.Config"
    configs: list[dict[str, int]]  # each with num_warps / num_stages folded in


@dataclass
class _SourceIndex:
    """Where every tunable value sits in the source."""

    tree: ast.Module
    constants: dict[str, list[ast.AST]] = field(default_factory=dict)  # name -> int literal nodes
    tuning_space: dict[str, list[int]] | None = None
    tuning_space_line: int | None = None
    kernels: list[KernelFacts] = field(default_factory=list)
    autotune: list[_AutotuneSite] = field(default_factory=list)
    launch_literals: dict[str, list[ast.AST]] = field(default_factory=dict)  # param -> literal nodes
    launch_names: dict[str, set[str]] = field(default_factory=dict)  # kw -> module constants passed
    sites: list[tuple[str, dict[str, ast.AST]]] = field(default_factory=list)  # (kernel, kw -> value) per launch
    derived: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"candidate source does not parse (line {exc.lineno}: {exc.msg}); fix the syntax first") from exc


def _autotune_site(kernel: str, call: ast.Call, top_level: dict[str, ast.AST], warnings: list[str]) -> _AutotuneSite | None:
    node = next((kw.value for kw in call.keywords if kw.arg == "configs"), call.args[0] if call.args else None)
    if isinstance(node, ast.Name) and isinstance(top_level.get(node.id), ast.List):
        node = top_level[node.id]
    if not isinstance(node, ast.List):
        warnings.append(f"{kernel}: triton.autotune configs are not a literal list; they are not read")
        return None
    configs, func = [], ""
    for element in node.elts:
        if not (isinstance(element, ast.Call) and _dotted(element.func).split(".")[-1] == "Config" and element.args):
            warnings.append(f"{kernel}: an autotune entry at line {element.lineno} is not triton.Config({{...}}); skipped")
            continue
        try:
            values = ast.literal_eval(element.args[0])
        except ValueError:
            warnings.append(f"{kernel}: autotune config at line {element.lineno} is not a literal dict; skipped")
            continue
        kwargs = {kw.arg: _int_literal(kw.value) for kw in element.keywords if kw.arg in _LAUNCH_OPTIONS}
        values = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
        values["num_warps"] = kwargs.get("num_warps") or 4
        values["num_stages"] = kwargs.get("num_stages") or 3
        configs.append(values)
        func = ast.unparse(element.func)
    if not configs:
        return None
    return _AutotuneSite(kernel=kernel, list_node=node, config_func=func, configs=configs)


def _kernel_facts(fn: ast.FunctionDef, autotuned: bool) -> KernelFacts:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    calls = sorted({_dotted(n.func).split(".", 1)[1] for n in ast.walk(fn)
                    if isinstance(n, ast.Call) and _dotted(n.func).startswith("tl.")})
    dots = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and _dotted(n.func).split(".")[-1] == "dot"]
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
    )


def _index(source: str) -> _SourceIndex:
    tree = _parse(source)
    index = _SourceIndex(tree=tree)
    top_level: dict[str, ast.AST] = {}
    for stmt in tree.body:
        targets, value = [], None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            top_level[target.id] = value
            if _int_literal(value) is not None:
                index.constants.setdefault(target.id, []).append(value)
            if target.id == "TUNING_SPACE":
                index.tuning_space_line = stmt.lineno
                try:
                    raw = ast.literal_eval(value)
                except ValueError as exc:
                    raise ValueError(f"TUNING_SPACE (line {stmt.lineno}) must be a literal dict of int lists") from exc
                if not isinstance(raw, dict) or not all(
                    isinstance(k, str) and isinstance(v, (list, tuple)) and v
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                    for k, v in raw.items()
                ):
                    raise ValueError(
                        f"TUNING_SPACE (line {stmt.lineno}) must map names to non-empty lists of ints, "
                        'e.g. {"BLOCK_M": [64, 128], "NUM_WARPS": [4, 8]}'
                    )
                index.tuning_space = {k: sorted(set(v)) for k, v in raw.items()}

    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        names = [_dotted(d).split(".")[-1] for d in stmt.decorator_list]
        if "jit" not in names:
            continue
        autotune_calls = [d for d in stmt.decorator_list if isinstance(d, ast.Call) and _dotted(d).endswith("autotune")]
        index.kernels.append(_kernel_facts(stmt, autotuned=bool(autotune_calls)))
        for call in autotune_calls:
            site = _autotune_site(stmt.name, call, top_level, index.warnings)
            if site:
                index.autotune.append(site)

    kernel_names = {k.name: k for k in index.kernels}
    launches = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)]
    # a launch option (num_warps=4) given as a literal at the sites of several kernels is one knob per kernel
    option_kernels: dict[str, set[str]] = {}
    for node in launches:
        kernel = kernel_names.get(_dotted(node.func.value).split(".")[-1])
        for kw in node.keywords:
            if kernel is not None and kw.arg in _LAUNCH_OPTIONS and _int_literal(kw.value) is not None:
                option_kernels.setdefault(kw.arg, set()).add(kernel.name)
    for node in launches:
        kernel = kernel_names.get(_dotted(node.func.value).split(".")[-1])
        if kernel is not None:
            index.sites.append((kernel.name, {kw.arg: kw.value for kw in node.keywords if kw.arg}))
            kernel.launch_sites += 1
        for kw in node.keywords:
            if kw.arg is None:
                continue
            constexpr = kernel is not None and kw.arg in kernel.constexprs
            if not (constexpr or kw.arg in _LAUNCH_OPTIONS):
                continue
            if _int_literal(kw.value) is not None:
                key = kw.arg
                if kernel is not None and kw.arg in _LAUNCH_OPTIONS and len(option_kernels.get(kw.arg, ())) > 1:
                    key = f"{kernel.name}.{kw.arg}"
                index.launch_literals.setdefault(key, []).append(kw.value)
            elif isinstance(kw.value, ast.Name) and kw.value.id in index.constants:
                index.launch_names.setdefault(kw.arg, set()).add(kw.value.id)
            else:
                index.derived[kw.arg] = ast.unparse(kw.value)
    if any("num_programs" in k.tl_calls and k.has_loop for k in index.kernels):
        sized = [n for n in index.constants if PERSISTENT_NAMES.fullmatch(n) or PERSISTENT_NAMES.search(n)]
        if sized:
            name = sized[0]
            index.derived["persistent_grid"] = f"{name}={_int_literal(index.constants[name][-1])}"
        else:
            index.derived["persistent_grid"] = "NUM_SMS=1"
    return index


# ------------------------------------------------------------------------------------ the space


def _inferred_choices(name: str, role: ParamRole, current: int | None, axis: str | None, kind: str | None,
                      dims: dict[str, int], any_loop: bool) -> tuple[list[int], str]:
    """Default choices for an undeclared parameter, and a note saying why."""
    if role == "warps":
        choices = [2, 4, 8]
        if kind in ("softmax", "norm") and dims.get("n_cols", 0) >= 8192:
            choices.append(16)
        return choices, "num_warps in {2, 4, 8} (16 for long rows)"
    if role == "stages":
        if kind == "gemm" or any_loop:
            return [2, 3, 4, 5], "num_stages in {2..5} (the kernel has a loop to pipeline)"
        return [current or 1], "no loop in the kernels: num_stages has no effect"
    if role == "group":
        return ([1, 4, 8, 16], "L2 grouping of output tiles") if kind == "gemm" else ([current or 1], "")
    if role == "block" and axis is not None:
        extent = next_pow2(dims[axis])
        if kind in ("gemm", "attention"):
            lo, hi = 16, min(128 if axis in ("K", "D") else 256, extent)
        elif axis == "n_rows":
            lo, hi = 1, min(64, extent)
        else:
            lo, hi = min(64, extent), min(16384, extent)
        return pow2_range(lo, max(lo, hi)), f"powers of two up to {axis}={dims[axis]}"
    if role == "block" and current:
        return pow2_range(max(1, current // 4), current * 4), "powers of two around the current value (no dimension known)"
    return [current] if current is not None else [], "kept at its current value"


def extract_space(source: str, *, kind: str | None = None, dims: dict[str, int] | None = None) -> CandidateSpace:
    """The tunable parameters of `source` with the choices worth trying.

    `dims` must already be canonical (see `dims.normalize_dims`) when given; it is used to bound
    inferred block choices and to tell which dimension each block tiles.
    """
    index = _index(source)
    dims = dims or {}
    warnings = list(index.warnings)
    any_loop = any(k.has_loop for k in index.kernels)
    declared = index.tuning_space or {}
    params: dict[str, TunableParam] = {}

    def add(name: str, source_kind: str, current: int | None, line: int | None, applicable: bool = True) -> None:
        param = params.get(name)
        if param is None:
            param = params[name] = TunableParam(name=name, role=role_of(name), current=current, line=line,
                                                applicable=applicable)
        if source_kind not in param.sources:
            param.sources.append(source_kind)
        if param.current is None:
            param.current = current
        param.applicable = param.applicable or applicable

    passed_constants = {c for names in index.launch_names.values() for c in names}
    for name, nodes in index.constants.items():
        if name in declared or name in passed_constants or (role_of(name) != "other" and name.isupper()):
            add(name, "module_constant", _int_literal(nodes[-1]), nodes[-1].lineno)
    for kw, nodes in index.launch_literals.items():
        values = {_int_literal(n) for n in nodes}
        if len(values) > 1:
            warnings.append(f"{kw} is passed as different literals at {len(nodes)} launch sites ({sorted(values)}); "
                            "apply_config sets all of them to one value — use one module constant per kernel instead")
        add(kw, "launch_keyword", _int_literal(nodes[0]), nodes[0].lineno)
    for site in index.autotune:
        for config in site.configs:
            for key, value in config.items():
                add(key, "autotune", site.configs[0].get(key, value), site.list_node.lineno)
    for name in declared:
        if name not in params:
            params[name] = TunableParam(name=name, role=role_of(name), sources=["tuning_space"], applicable=False,
                                        line=index.tuning_space_line,
                                        note="declared in TUNING_SPACE but no module-level int assignment sets it")
            warnings.append(f"TUNING_SPACE declares {name} but the source has no module-level `{name} = <int>` to "
                            "rewrite; add one and use it at the launch")
        elif "tuning_space" not in params[name].sources:
            params[name].sources.append("tuning_space")

    for kernel in index.kernels:
        for constexpr in kernel.constexprs:
            linked = [p for p in params.values()
                      if p.name == constexpr or p.name in index.launch_names.get(constexpr, set())]
            for param in linked:
                if kernel.name not in param.kernels:
                    param.kernels.append(kernel.name)
                if "constexpr" not in param.sources:
                    param.sources.append("constexpr")

    for param in params.values():
        at_launch = param.kernels or "launch_keyword" in param.sources
        if (param.role == "other" and param.name.isupper() and at_launch and param.current
                and param.current >= 2 and param.current & (param.current - 1) == 0):
            param.role = "block"
            param.note = "a power-of-two UPPERCASE constexpr passed at the launch: tuned as a block size"

    autotune_values: dict[str, set[int]] = {}
    for site in index.autotune:
        for config in site.configs:
            for key, value in config.items():
                autotune_values.setdefault(key, set()).add(value)
    for param in params.values():
        if kind is not None:
            param.axis = axis_for(param.name, kind, dims)
            if param.axis is None:
                # a constant passed as BLOCK_N=MY_TILE tiles what BLOCK_N tiles
                for kw, names in index.launch_names.items():
                    if param.name in names and axis_for(kw, kind, dims):
                        param.axis = axis_for(kw, kind, dims)
        if param.name in declared:
            param.choices, param.choices_from = list(declared[param.name]), "declared"
        elif param.name in autotune_values:
            param.choices, param.choices_from = sorted(autotune_values[param.name]), "autotune"
        elif declared:
            param.choices = [param.current] if param.current is not None else []
            param.choices_from, param.note = "current", "not in TUNING_SPACE: kept at its current value"
        else:
            choices, note = _inferred_choices(param.name, param.role, param.current, param.axis, kind, dims, any_loop)
            param.choices, param.choices_from = choices, ("inferred" if len(choices) > 1 else "current")
            if "inferred" not in param.sources and len(choices) > 1:
                param.sources.append("inferred")
            param.note = param.note or note
        if param.current is not None and param.current not in param.choices and param.choices_from == "inferred":
            param.choices = sorted(set(param.choices) | {param.current})
    _bind(index, params)
    return CandidateSpace(params=list(params.values()), kernels=index.kernels, derived=index.derived, warnings=warnings)


def _bind(index: _SourceIndex, params: dict[str, TunableParam]) -> None:
    """Each kernel's own knobs: which parameter sets each constexpr / launch option at its launch sites (a
    literal, or the module constant passed), else the module constant of the constexpr's own name."""
    for kernel in index.kernels:
        bound: dict[str, str] = {}
        for name, kws in index.sites:
            if name != kernel.name:
                continue
            for kw, node in kws.items():
                if kw not in kernel.constexprs and kw not in _LAUNCH_OPTIONS:
                    continue
                if _int_literal(node) is not None:
                    key = f"{kernel.name}.{kw}" if f"{kernel.name}.{kw}" in index.launch_literals else kw
                elif isinstance(node, ast.Name):
                    key = node.id
                else:
                    continue
                if key in params:
                    bound.setdefault(kw, key)
        for constexpr in kernel.constexprs:
            if constexpr not in bound and constexpr in params:
                bound[constexpr] = constexpr
        for site in index.autotune:
            if site.kernel == kernel.name:
                for key in site.configs[0]:
                    if key in params:
                        bound.setdefault(key, key)
        kernel.bindings = bound


def space_size(space: CandidateSpace) -> int:
    return math.prod(len(p.choices) for p in space.params if p.applicable and p.choices)


def enumerate_configs(space: CandidateSpace, max_configs: int = DEFAULT_MAX_CONFIGS, seed: int = 0
                      ) -> tuple[list[dict[str, int]], int, bool]:
    """Cartesian product of the applicable parameters' choices: (configs, full size, truncated).

    Beyond `max_configs` a seeded uniform sample is returned (with the current config kept), so a
    huge space still gets an unbiased look instead of the first corner of the product.
    """
    params = [p for p in space.params if p.applicable and p.choices]
    if not params:
        return [], 0, False
    total = math.prod(len(p.choices) for p in params)
    names = [p.name for p in params]
    if total <= max_configs:
        return [dict(zip(names, values)) for values in itertools.product(*(p.choices for p in params))], total, False
    rng = random.Random(seed)
    picked: set[int] = set(rng.sample(range(total), max_configs))
    configs = []
    for flat in sorted(picked):
        values, rest = [], flat
        for p in reversed(params):
            rest, i = divmod(rest, len(p.choices))
            values.append(p.choices[i])
        configs.append(dict(zip(names, reversed(values))))
    return configs, total, True


def current_config(space: CandidateSpace) -> dict[str, int]:
    return {p.name: p.current for p in space.params if p.applicable and p.current is not None}


# ---------------------------------------------------------------------------------- rewriting


class _Offsets:
    """ast positions (line, UTF-8 byte column) -> byte offsets in the source."""

    def __init__(self, data: bytes):
        self.starts = [0]
        for line in data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.starts[node.lineno - 1] + node.col_offset, self.starts[node.end_lineno - 1] + node.end_col_offset)


def _config_text(func: str, values: dict[str, int]) -> str:
    meta = {k: v for k, v in values.items() if k not in _LAUNCH_OPTIONS}
    body = ", ".join(f"{k!r}: {v}" for k, v in meta.items())
    return f"[{func}({{{body}}}, num_warps={values.get('num_warps', 4)}, num_stages={values.get('num_stages', 3)})]"


def apply_config(source: str, config: dict[str, int]) -> str:
    """`source` with each parameter of `config` set, every other byte unchanged.

    Module constants and launch-site literals are rewritten in place; an autotuned kernel gets a
    single `triton.Config` with the values (so its autotuner does not re-tune at run time).
    """
    for name, value in config.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"config value {name}={value!r} must be an int")
    index = _index(source)
    data = source.encode()
    offsets = _Offsets(data)
    edits: list[tuple[int, int, str]] = []
    autotune_keys = {key for site in index.autotune for c in site.configs for key in c}
    unknown = [n for n in config if n not in index.constants and n not in index.launch_literals and n not in autotune_keys]
    if unknown:
        known = sorted(set(index.constants) | set(index.launch_literals) | autotune_keys)
        raise ValueError(f"cannot set {', '.join(unknown)}: no module-level int constant, launch literal or autotune "
                         f"config holds it; settable names here: {', '.join(known) or 'none'}")
    for name, value in config.items():
        for node in index.constants.get(name, []) + (index.launch_literals.get(name, []) if name not in index.constants else []):
            edits.append((*offsets.span(node), str(value)))
    for site in index.autotune:
        keys = {k for c in site.configs for k in c}
        if keys & config.keys() and not any(k in index.constants for k in keys & config.keys()):
            values = dict(site.configs[0])
            values.update({k: v for k, v in config.items() if k in keys})
            edits.append((*offsets.span(site.list_node), _config_text(site.config_func, values)))
    edits.sort(reverse=True)
    for (start, end, _), (next_start, next_end, _) in zip(edits[1:], edits):
        if end > next_start:
            raise ValueError("overlapping rewrites in the source; set each parameter in one place")
    for start, end, text in edits:
        data = data[:start] + text.encode() + data[end:]
    return data.decode()



def describe(config: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())

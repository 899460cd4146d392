"""The space of a candidate's tunable parameters: which values each takes (declared, autotuned or inferred from
its role and the problem's dimensions), which kernel each binds to, and the configs to try.

The source is read by `source_index.py` (ast; never executed) and rewritten by `rewrite.py` (`apply_config`,
`describe`).
"""

from __future__ import annotations

import ast
import itertools
import math
import random

from egg_mcp.tiling.dims import axis_for, next_pow2, pow2_range
from egg_mcp.tiling.source_index import LAUNCH_OPTIONS, SourceIndex, index_source, int_literal, role_of
from egg_mcp.tiling.tiling_types import CandidateSpace, ParamRole, ParamSource, TunableParam

__all__ = ["DEFAULT_MAX_CONFIGS", "current_config", "enumerate_configs", "extract_space", "persistent_programs",
           "space_size"]

DEFAULT_MAX_CONFIGS = 16384


def persistent_programs(space: CandidateSpace, sm_count: int, values: dict[str, int] | None = None) -> int | None:
    """Programs a persistent grid launches (its kernels loop over the tiles, `KernelFacts.persistent`), or None.

    Read from the module constant the source sizes the grid with: `*_PER_SM` times the SM count, a
    total (`NUM_PROGRAMS`, `GRID_SIZE`) as is, `NUM_SMS` as one program per SM; `values` (a config
    being estimated) wins over the source's value."""
    spec = space.derived.get("persistent_grid")
    if not spec or not any(k.persistent for k in space.kernels):  # another kernel's persistent grid is not this one's
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
        return pow2_range(max(1, current // 4),
                          current * 4), "powers of two around the current value (no dimension known)"
    return [current] if current is not None else [], "kept at its current value"


def extract_space(source: str, *, kind: str | None = None, dims: dict[str, int] | None = None) -> CandidateSpace:
    """The tunable parameters of `source` with the choices worth trying.

    `dims` must already be canonical (see `dims.normalize_dims`) when given; it is used to bound
    inferred block choices and to tell which dimension each block tiles.
    """
    index = index_source(source)
    dims = dims or {}
    warnings = list(index.warnings)
    declared = index.tuning_space or {}
    excluded: dict[str, str] = {}
    params = _found_params(index, declared, warnings, excluded)
    _link_kernels(index, params)
    _choose(index, params, declared, kind, dims)
    _bind(index, params)
    return CandidateSpace(params=list(params.values()), kernels=index.kernels, derived=index.derived, warnings=warnings,
                          excluded=excluded)


def _add(params: dict[str, TunableParam], name: str, source_kind: ParamSource, current: int | None, line: int | None,
         applicable: bool = True) -> None:
    """Record where a parameter was seen; its first known value is its current one."""
    param = params.get(name)
    if param is None:
        param = params[name] = TunableParam(name=name, role=role_of(name), current=current, line=line,
                                            applicable=applicable)
    if source_kind not in param.sources:
        param.sources.append(source_kind)
    if param.current is None:
        param.current = current
    param.applicable = param.applicable or applicable


def _found_params(index: SourceIndex, declared: dict, warnings: list[str],
                  excluded: dict[str, str]) -> dict[str, TunableParam]:
    """Every parameter the source sets: module constants, launch keywords, autotune configs, TUNING_SPACE; what
    it will not set goes to `excluded` with the reason."""
    params: dict[str, TunableParam] = {}
    passed_constants = {c for names in index.launch_names.values() for c in names}
    for name, nodes in index.constants.items():
        if name in declared or name in passed_constants or (role_of(name) != "other" and name.isupper()):
            _add(params, name, "module_constant", int_literal(nodes[-1]), nodes[-1].lineno)
    for kw, nodes in index.launch_literals.items():
        values = {int_literal(n) for n in nodes}
        if len(values) > 1:  # a value that differs per launch is part of what each launch computes (a PHASE)
            warnings.append(f"{kw} is passed as different literals at {len(nodes)} launch sites "
                            f"({sorted(v for v in values if v is not None)}): "
                            "not tuned (one value for all of them would change what the launches compute); to tune "
                            "a block size used at several launches, give each launch its own module constant")
            excluded[kw] = (f"passed as different literals at {len(nodes)} launch sites "
                            f"({sorted(v for v in values if v is not None)}): what each launch computes"
                            + ("; the module constant of its name is not tuned either" if kw in params else ""))
            params.pop(kw, None)  # a constant of that name would be rewritten while the launches keep their literals
            continue
        _add(params, kw, "launch_keyword", int_literal(nodes[0]), nodes[0].lineno)
    for site in index.autotune:
        for config in site.configs:
            for key, value in config.items():
                _add(params, key, "autotune", site.configs[0].get(key, value), site.list_node.lineno)
    for name in declared:
        if name not in params:
            params[name] = TunableParam(name=name, role=role_of(name), sources=["tuning_space"], applicable=False,
                                        line=index.tuning_space_line,
                                        note="declared in TUNING_SPACE but no module-level int assignment sets it")
            warnings.append(f"TUNING_SPACE declares {name} but the source has no module-level `{name} = <int>` to "
                            "rewrite; add one and use it at the launch")
            excluded[name] = "declared in TUNING_SPACE, but no module-level int assignment sets it"
        elif "tuning_space" not in params[name].sources:
            params[name].sources.append("tuning_space")
    return params


def _link_kernels(index: SourceIndex, params: dict[str, TunableParam]) -> None:
    """Each parameter's kernels (the constexprs it sets); a power-of-two UPPERCASE one at a launch is a block."""
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


def _choose(index: SourceIndex, params: dict[str, TunableParam], declared: dict, kind: str | None,
            dims: dict[str, int]) -> None:
    """Each parameter's axis and choices: declared, else autotune's, else (with a TUNING_SPACE) its current
    value, else inferred from its role, axis and the dims."""
    any_loop = any(k.has_loop for k in index.kernels)
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


def _bind(index: SourceIndex, params: dict[str, TunableParam]) -> None:
    """Each kernel's own knobs: which parameter sets each constexpr / launch option at its launch sites (a
    literal, or the module constant passed), else the module constant of the constexpr's own name."""
    for kernel in index.kernels:
        bound: dict[str, str] = {}
        for name, kws in index.sites:
            if name != kernel.name:
                continue
            for kw, node in kws.items():
                if kw not in kernel.constexprs and kw not in LAUNCH_OPTIONS:
                    continue
                if int_literal(node) is not None:
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

"""Resolving a reference (source text, file path, KernelBench id, built-in name) and checking the
KernelBench contract — statically, with `ast`, because the server process never executes user or
LLM-written code.
"""

from __future__ import annotations

import ast
import difflib
import math
import re
from pathlib import Path

from pydantic import BaseModel, Field

from egg_mcp import pysource
from egg_mcp.config import ServerConfig
from egg_mcp.problems.builtin import BUILTIN_PROBLEMS, builtin_source


class ProblemError(ValueError):
    """The reference or candidate cannot be used; the message says what to do instead."""


class ResolvedReference(BaseModel):
    source: str
    name: str = Field(description="short problem name, e.g. '23_Softmax' or 'softmax'")
    origin: str = Field(description="'builtin:softmax', 'kernelbench:level1/23_Softmax.py', a path, or 'inline'")
    size_constants: dict[str, int | list[int]] = Field(
        default_factory=dict, description="module-level int constants and lists/tuples of ints (layer_sizes)")
    quick_sizes: dict[str, int | list[int]] = Field(default_factory=dict,
                                                    description="the problem's QUICK_SIZES, if any")


KERNELBENCH_ID = re.compile(r"^(?:kernelbench:)?(level\d+)/(\d+)(?:_[\w\-.]*)?(?:\.py)?$")


def resolve_reference(reference: str, config: ServerConfig) -> ResolvedReference:
    """Turn what the client passed into reference source, refusing anything unsafe or malformed."""
    ref = reference.strip()
    if not ref:
        raise ProblemError("reference is empty: pass PyTorch source text, a file path, a KernelBench id "
                           "like 'level1/23', or a built-in name (" + ", ".join(BUILTIN_PROBLEMS) + ")")
    if len(ref.encode()) > config.max_source_bytes:
        raise ProblemError(f"reference is {len(ref.encode())} bytes; the limit is {config.max_source_bytes}. "
                           "Pass a file path or a KernelBench id instead of a huge source.")
    if "\n" in ref or "class Model" in ref:
        source, name, origin = ref + "\n", _name_from_source(ref), "inline"
    elif ref.removeprefix("builtin:") in BUILTIN_PROBLEMS:
        name = ref.removeprefix("builtin:")
        source, origin = builtin_source(name), f"builtin:{name}"
    elif m := KERNELBENCH_ID.match(ref):
        path = _find_kernelbench(m.group(1), m.group(2), config)
        source, name, origin = _read_allowed(path, config), path.stem, f"kernelbench:{m.group(1)}/{path.name}"
    elif _looks_like_name(ref):
        raise ProblemError(unknown_builtin_message(ref))
    else:
        path = Path(ref).expanduser()
        source, name, origin = _read_allowed(path, config), path.stem, str(path.resolve())
    check_reference_contract(source)
    return ResolvedReference(
        source=source, name=name, origin=origin,
        size_constants=module_int_constants(source), quick_sizes=quick_sizes(source),
    )


def _looks_like_name(ref: str) -> bool:
    """A bare word (or 'builtin:word'), not a path: no separator, no suffix, not an existing file."""
    word = ref.removeprefix("builtin:")
    return (ref.startswith("builtin:") or re.fullmatch(r"[A-Za-z_][\w\-]*", word) is not None) \
        and not Path(ref).expanduser().exists()


def unknown_builtin_message(ref: str) -> str:
    """One sentence: not a built-in, the nearest names, the whole list, and how to pass a file."""
    word = ref.removeprefix("builtin:")
    names = list(BUILTIN_PROBLEMS)
    near = difflib.get_close_matches(word.lower(), names, n=3, cutoff=0.5)
    guess = (" (did you mean " + " or ".join(repr(n) for n in near) + "?)") if near else ""
    return (f"{word!r} is not a built-in problem{guess}; the built-ins are " + ", ".join(names)
            + ". To use your own problem pass its source text, a KernelBench id like 'level1/23', or a file "
            "path such as ./my_problem.py (absolute, or relative to the server's directory, inside a folder "
            "the server may read: --allow-dir).")


def _find_kernelbench(level: str, number: str, config: ServerConfig) -> Path:
    root = config.kernelbench_dir
    if root is None:
        raise ProblemError(
            f"'{level}/{number}' is a KernelBench id but no KernelBench checkout is configured: start the "
            "server with --kernelbench-dir /path/to/KernelBench (or set EGG_MCP_KERNELBENCH_DIR), or pass "
            "the problem's source text instead"
        )
    for base in (root / "KernelBench" / level, root / level):
        if base.is_dir():
            hits = sorted(base.glob(f"{int(number)}_*.py"))
            if hits:
                return hits[0]
            raise ProblemError(f"no problem {number} in {base}; ids there run "
                               f"{_id_range(base)} (e.g. '{level}/1')")
    raise ProblemError(f"{root} has no '{level}' folder (looked in {root / 'KernelBench' / level} and "
                       f"{root / level}); check --kernelbench-dir")


def _id_range(base: Path) -> str:
    ids = sorted(int(p.name.split("_", 1)[0]) for p in base.glob("*_*.py") if p.name.split("_", 1)[0].isdigit())
    return f"{ids[0]}..{ids[-1]}" if ids else "(none)"


def _read_allowed(path: Path, config: ServerConfig) -> str:
    resolved = path.expanduser().resolve()
    roots = config.readable_roots()
    if not any(resolved.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(r) for r in roots) or "none configured"
        raise ProblemError(
            f"{resolved} is outside the directories this server may read ({allowed}). Add its folder with "
            "--allow-dir (or EGG_MCP_ALLOWED_ROOTS), or pass the source text instead."
        )
    if not resolved.is_file():
        raise ProblemError(f"{resolved} does not exist or is not a file")
    size = resolved.stat().st_size
    if size > config.max_source_bytes:
        raise ProblemError(f"{resolved} is {size} bytes; the limit is {config.max_source_bytes}")
    return resolved.read_text(encoding="utf-8")


def _name_from_source(source: str) -> str:
    m = re.search(r'class Model\b[^:]*:\s*(?:"""|\'\'\')\s*([^\n]*)', source)
    if m and m.group(1).strip():
        words = re.findall(r"[A-Za-z0-9]+", m.group(1))[:4]
        return "_".join(words) or "inline"
    return "inline"


def _parse(source: str, what: str) -> ast.Module:
    try:
        return pysource.parse(source)
    except SyntaxError as exc:
        raise ProblemError(f"{what} does not parse: {exc.msg} at line {exc.lineno}: "
                           f"{(exc.text or '').strip()!r}") from None


def _top_level_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    funcs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return classes, funcs


def check_reference_contract(source: str) -> None:
    tree = _parse(source, "the reference")
    classes, funcs = _top_level_names(tree)
    missing = [n for n, ok in (("class Model", "Model" in classes), ("def get_inputs()", "get_inputs" in funcs),
                               ("def get_init_inputs()", "get_init_inputs" in funcs)) if not ok]
    if missing:
        raise ProblemError("the reference is not in KernelBench format: it lacks " + ", ".join(missing)
                           + ". A reference defines class Model(nn.Module) with forward(), get_inputs() "
                           "returning the forward arguments and get_init_inputs() returning Model's "
                           "constructor arguments, at module level.")


class CandidateCheck(BaseModel):
    ok: bool
    syntax_error: str | None = None
    syntax_error_line: int | None = None


def check_candidate_contract(source: str, max_bytes: int) -> CandidateCheck:
    """Static checks before a candidate is queued. A syntax error is a verdict (compile_error) the
    Debug role can act on; a missing ModelNew or an oversized source is a bad argument."""
    size = len(source.encode())
    if size > max_bytes:
        raise ProblemError(f"the candidate source is {size} bytes; the limit is {max_bytes}. A kernel file "
                           "is a few KB: submit only the module that defines ModelNew and its kernels.")
    if not source.strip():
        raise ProblemError("the candidate source is empty: submit a module that defines class ModelNew")
    try:
        tree = pysource.parse(source)
    except SyntaxError as exc:
        return CandidateCheck(ok=False, syntax_error=f"{exc.msg}: {(exc.text or '').strip()!r}",
                              syntax_error_line=exc.lineno)
    classes, _ = _top_level_names(tree)
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if "ModelNew" not in classes | imported | assigned:
        raise ProblemError("the candidate defines no ModelNew: a solution is a module with class "
                           "ModelNew(nn.Module) whose __init__ takes the reference's get_init_inputs() and whose "
                           "forward takes get_inputs(), computing with @triton.jit kernels")
    return CandidateCheck(ok=True)


def module_int_constants(source: str) -> dict[str, int | list[int]]:
    """Module-level `NAME = <int>` assignments, and `NAME = [<int>, ...]` / tuples of ints (1_MLP's
    `layer_sizes`): the problem's size constants, which size_overrides may set (a list as a list)."""
    out: dict[str, int | list[int]] = {}
    for node in _parse(source, "the source").body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                continue
            if _is_int(value):
                out[node.targets[0].id] = value
            elif isinstance(value, (list, tuple)) and value and all(_is_int(v) for v in value):
                out[node.targets[0].id] = list(value)
    return out


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


QUICK_FROM = 32
"""Module-level ints from this size up are shrunk for a CPU check; smaller ones (kernel sizes, strides, group
counts, dim indices) stay as they are."""
QUICK_MIN = 8
QUICK_TARGET = 64
_DIVISOR_NAME = re.compile(r"group|head|kernel|stride|pool|block|factor|chunk|split|window|patch", re.I)
"""Small constants that other sizes must stay multiples of (a batch size of 16 is not one)."""


def _v2(n: int) -> int:
    return (n & -n).bit_length() - 1


def derive_quick_sizes(constants: dict[str, int | list[int]], target: int = QUICK_TARGET) -> dict[str, int | list[int]]:
    """Small sizes for a check in the CPU interpreter when the problem declares no QUICK_SIZES.

    Constants >= QUICK_FROM are shrunk by powers of two, one factor per group of constants that divide one
    another (so `hidden = 4 * dim` style relations written as literals, `in_channels` | `out_channels`, stay
    true), never below QUICK_MIN, stopping once the group's largest is at most `target`; a constant that a
    small grouping constant divides (`channels` by `groups = 8`, `num_heads`, `kernel_size`, `stride`) stays a
    multiple of it. Derived expressions
    (`bias_shape = (out_features,)`) follow through size_overrides' refresh. Empty when nothing shrinks."""
    flat = {k: v for k, v in constants.items() if not isinstance(v, list)}
    for name, values in constants.items():  # list constants (layer_sizes): each element shrinks with its relatives
        if isinstance(values, list):
            flat.update({f"{name}[{i}]": v for i, v in enumerate(values)})
    large = {k: v for k, v in flat.items() if v >= QUICK_FROM}
    small = [v for k, v in flat.items() if 2 <= v < QUICK_FROM and _DIVISOR_NAME.search(k)]
    groups: list[set[str]] = []
    for key in large:  # connected components of "one divides the other"
        linked = [g for g in groups if any(large[key] % large[o] == 0 or large[o] % large[key] == 0 for o in g)]
        merged = {key}.union(*linked)
        groups = [g for g in groups if g not in linked] + [merged]
    out: dict[str, int] = {}
    for group in groups:
        values = {k: large[k] for k in group}
        keep = {k: math.lcm(1, *(s for s in small if v % s == 0)) for k, v in values.items()}
        shift = 0
        while max(values.values()) >> shift > target:
            nxt = shift + 1
            if not all(_v2(v) >= nxt and (v >> nxt) >= QUICK_MIN and (v >> nxt) % keep[k] == 0
                       for k, v in values.items()):
                break
            shift = nxt
        if shift:
            out.update({k: v >> shift for k, v in values.items()})
    derived: dict[str, int | list[int]] = dict(out)
    for name, values in constants.items():
        if isinstance(values, list) and any(f"{name}[{i}]" in out for i in range(len(values))):
            derived[name] = [out.get(f"{name}[{i}]", v) for i, v in enumerate(values)]
            for i in range(len(values)):
                derived.pop(f"{name}[{i}]", None)
    return derived


def quick_sizes(source: str) -> dict[str, int | list[int]]:
    for node in _parse(source, "the source").body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "QUICK_SIZES"):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError):
                return {}
            if isinstance(value, dict) and all(isinstance(k, str) and (_is_int(v) or (
                    isinstance(v, (list, tuple)) and v and all(_is_int(x) for x in v))) for k, v in value.items()):
                return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in value.items()}
    return {}

"""Problem dimensions and which tunable tiles which dimension.

Callers name dimensions the way the reference analysis does (M/N/K for GEMMs, n_rows/n_cols for
row-wise kernels, n for flat element-wise ones); this module maps the aliases onto those canonical
names so the space reader and the cost model agree on them.
"""

from __future__ import annotations

import re

from egg_mcp.tiling.tiling_types import KERNEL_KINDS

_ALIASES = {
    "gemm": {"M": ("m", "rows", "n_rows", "batch"), "N": ("n", "cols", "n_cols", "out_features"),
             "K": ("k", "in_features", "reduction")},
    "rows": {"n_rows": ("rows", "m", "batch", "n_rows"), "n_cols": ("cols", "n", "dim", "n_cols", "hidden")},
    "flat": {"n": ("n", "numel", "n_elements", "size")},
    "attention": {"BH": ("bh", "z_h", "batch_heads"), "T": ("t", "n_ctx", "seq_len", "seqlen", "q_len"),
                  "S": ("s", "kv_len", "n_keys"), "D": ("d", "head_dim", "hs")},
}


def check_kind(kind: str) -> str:
    if kind not in KERNEL_KINDS:
        raise ValueError(f"unknown kernel kind {kind!r}; use one of {', '.join(KERNEL_KINDS)}")
    return kind


def normalize_dims(kind: str, dims: dict[str, int]) -> dict[str, int]:
    """Canonical dimension names for `kind`; unknown names are kept as given.

    GEMM: M, N, K. softmax / norm / reduction: n_rows, n_cols (the reduced axis is n_cols).
    elementwise: n (flat) and/or n_rows, n_cols (2-D broadcast).
    """
    check_kind(kind)
    for key, value in dims.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"dimension {key}={value!r} must be a positive int")
    if kind == "gemm":
        tables = [_ALIASES["gemm"]]
    elif kind == "attention":
        tables = [_ALIASES["attention"]]
    elif kind == "elementwise":
        tables = [_ALIASES["flat"], _ALIASES["rows"]]
    else:
        tables = [_ALIASES["rows"]]
    out: dict[str, int] = {}
    for key, value in dims.items():
        matches = [name for table in tables for name, aliases in table.items() if key == name or key.lower() in aliases]
        out[matches[0] if matches else key] = value
    if kind == "gemm" and not {"M", "N", "K"} <= out.keys():
        raise ValueError(f"a GEMM needs dims M, N and K (got {sorted(dims)}); pass e.g. "
                         f"dims={{'M': 4096, 'N': 4096, 'K': 4096}}")
    if kind in ("softmax", "norm", "reduction") and "n_cols" not in out:
        raise ValueError(
            f"a {kind} needs dims n_rows and n_cols (the reduced axis; got {sorted(dims)}); "
            "pass e.g. dims={'n_rows': 4096, 'n_cols': 8192}"
        )
    if kind == "elementwise" and not ({"n"} <= out.keys() or {"n_rows", "n_cols"} <= out.keys()):
        raise ValueError(f"an elementwise kernel needs dims n (flat) or n_rows and n_cols (got {sorted(dims)})")
    if kind == "attention":
        if not {"T", "D"} <= out.keys():
            raise ValueError("an attention kernel needs dims T (sequence) and D (head dim), optionally BH (batch x "
                             "heads) "
                             f"and S (keys; default T) (got {sorted(dims)}); pass e.g. "
                             f"dims={{'BH': 1024, 'T': 512, 'D': 64}}")
        out.setdefault("S", out["T"])
        out.setdefault("BH", 1)
    if kind in ("softmax", "norm", "reduction"):
        out.setdefault("n_rows", 1)
    if kind == "elementwise" and "n" not in out:
        out["n"] = out["n_rows"] * out["n_cols"]
    return out


_SHORT_BLOCK = re.compile(r"B_?([MNKDRCXY])")


def _block_suffix(name: str) -> str | None:
    """'BLOCK_SIZE_M' -> 'M', 'BLOCK_N' -> 'N', 'BLOCK' -> '', 'XBLOCK' -> 'X', 'ROWS_PER_PROGRAM' -> 'ROWS'."""
    upper = name.upper()
    if upper in ("BLOCK", "BLOCK_SIZE", "TILE", "TILE_SIZE"):
        return ""
    short = _SHORT_BLOCK.fullmatch(upper)
    if short:  # BM, BN, BK, B_M: the common spelling in GEMM kernels
        return short.group(1)
    for prefix in ("BLOCK_SIZE_", "BLOCK_", "TILE_SIZE_", "TILE_"):
        if upper.startswith(prefix):
            return upper[len(prefix):]
    if upper.endswith("BLOCK") and len(upper) <= 7:
        return upper[:-5].rstrip("_")
    if upper.startswith("ROWS_PER") or upper.endswith("_ROWS") or upper == "ROWS":
        return "ROWS"
    return None


def axis_for(name: str, kind: str, dims: dict[str, int]) -> str | None:
    """The canonical dimension a block parameter tiles, or None when the name does not say."""
    suffix = _block_suffix(name)
    if suffix is None:
        return None
    if kind == "gemm":
        wanted = {"M": ["M"], "N": ["N"], "K": ["K"]}.get(suffix, [])
    elif kind == "attention":
        wanted = {"M": ["T"], "N": ["S"], "D": ["D"], "DMODEL": ["D"]}.get(suffix, [])
    elif suffix in ("M", "ROWS", "ROW", "X", "Y"):
        wanted = ["n_rows"]
    elif suffix in ("N", "COLS", "COL", "D", "R"):
        wanted = ["n_cols"]
    elif suffix == "":
        wanted = ["n"] if kind == "elementwise" else ["n_cols"]
    else:
        wanted = []
    return next((w for w in wanted if w in dims), None)


def next_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def pow2_range(lo: int, hi: int) -> list[int]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out

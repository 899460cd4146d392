"""Rewrite a candidate's tunable values in place: exactly the literal that holds each value (located by `ast`
through `source_index.py`) changes, every other byte of the source stays, so the result is a ready-to-verify
candidate."""

from __future__ import annotations

import ast

from egg_mcp.tiling.source_index import LAUNCH_OPTIONS, index_source


class _Offsets:
    """ast positions (line, UTF-8 byte column) -> byte offsets in the source."""

    def __init__(self, data: bytes):
        self.starts = [0]
        for line in data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def span(self, node: ast.expr) -> tuple[int, int]:
        assert node.end_lineno is not None and node.end_col_offset is not None  # ast.parse sets them
        return (self.starts[node.lineno - 1] + node.col_offset, self.starts[node.end_lineno - 1] + node.end_col_offset)


def _config_text(func: str, values: dict[str, int]) -> str:
    meta = {k: v for k, v in values.items() if k not in LAUNCH_OPTIONS}
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
    index = index_source(source)
    data = source.encode()
    offsets = _Offsets(data)
    edits: list[tuple[int, int, str]] = []
    autotune_keys = {key for site in index.autotune for c in site.configs for key in c}
    unknown = [n for n in config
               if n not in index.constants and n not in index.launch_literals and n not in autotune_keys]
    if unknown:
        known = sorted(set(index.constants) | set(index.launch_literals) | autotune_keys)
        raise ValueError(f"cannot set {', '.join(unknown)}: no module-level int constant, launch literal or autotune "
                         f"config holds it; settable names here: {', '.join(known) or 'none'}")
    varying = sorted(n for n in config if n not in index.constants and len(
        {ast.unparse(node) for node in index.launch_literals.get(n, [])}) > 1)
    if varying:
        raise ValueError(f"cannot set {', '.join(varying)}: passed as different literals at several launch sites, so "
                         "one value for all would change what the launches compute")
    for name, value in config.items():
        for node in index.constants.get(name, []) + (index.launch_literals.get(name, [])
                                                     if name not in index.constants else []):
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

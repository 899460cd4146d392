"""Importing user and LLM-written sources in worker processes (never in the server).

`@triton.jit` reads kernel source through `inspect`, and tracebacks should name real lines, so a
source is always written to a real file and imported from there.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_file(path: str | Path, name: str) -> ModuleType:
    """Import `path` as a fresh module called `name`; a failed import leaves no half module behind."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def import_source(source: str, path: str | Path, name: str) -> ModuleType:
    """Write `source` to `path`, then import it as `name`."""
    Path(path).write_text(source)
    return import_file(path, name)

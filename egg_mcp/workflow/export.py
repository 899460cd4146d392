"""Where export_kernel may write, and how (atomically).

Allowed: the workspace's `exports/` folder, or a folder under an allowed root (--allow-dir) that is
not inside the workspace (the database, the artifacts and the snapshots live there and must never be
overwritten by an export). A relative path is taken inside `exports/`; a folder gets the default
file name inside it. The file is written to a temporary name in the target folder, fsynced and
renamed over the target, so a crash leaves the old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TMP_SUFFIX = ".egg-tmp"


class ExportError(ValueError):
    """The path cannot be written; the message says which folders can."""


def resolve_export_target(ws_root: Path, allowed_roots: list[Path], path: str | None, default_name: str) -> Path:
    ws = Path(ws_root).resolve()
    exports = ws / "exports"
    if path is None or not path.strip():
        return exports / default_name
    if "\0" in path:
        raise ExportError("path contains a NUL character")
    raw = Path(path).expanduser()
    target = (raw if raw.is_absolute() else exports / raw).resolve()
    if target.is_dir() or path.endswith(("/", os.sep)):
        target = target / default_name
    roots = [Path(r).expanduser().resolve() for r in allowed_roots]
    in_exports = target.is_relative_to(exports) and target != exports
    in_root = any(target.is_relative_to(r) for r in roots) and not target.is_relative_to(ws)
    if not (in_exports or in_root):
        where = ", ".join([str(exports)] + [f"{r} (outside the workspace)" for r in roots])
        why = (" That is inside the workspace (database, artifacts, snapshots), which only exports/ may be written in."
               if target.is_relative_to(ws) else "")
        raise ExportError(f"export_kernel may not write {target}.{why} Writable folders: {where}. Omit path to write "
                          "into exports/, or start the server with --allow-dir for the folder you want.")
    if target.exists() and not target.is_file():
        raise ExportError(f"{target} exists and is not a regular file; pass a file name")
    if target.name.endswith(TMP_SUFFIX):
        raise ExportError(f"file names ending in {TMP_SUFFIX} are reserved for temporary files")
    return target


def write_atomic(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(3)}{TMP_SUFFIX}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_export(ws_root: Path, allowed_roots: list[Path], path: str | None, default_name: str, text: str) -> Path:
    target = resolve_export_target(ws_root, allowed_roots, path, default_name)
    try:
        write_atomic(target, text)
    except OSError as exc:
        raise ExportError(f"could not write {target}: {exc.strerror or exc}") from None
    return target

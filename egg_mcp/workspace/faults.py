"""Storage faults as plain sentences: what happened to the workspace and what the operator can do.

A full disk, a file-size limit, a read-only mount or a locked/damaged database raise OSError or
sqlite3.Error deep inside a write; left alone they reach the client as the SDK's bare "Error executing
tool X". `storage_cause` turns one into a sentence ("disk full: free space in <workspace>"), and
`StorageFault` (a WorkspaceError, so every tool and resource wrapper already reports its text) carries it.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from egg_mcp.workspace.damage import WorkspaceError


class StorageFault(WorkspaceError):
    """A write to the workspace failed (disk full, size limit, read-only, I/O error, locked database)."""


def _chain(exc: BaseException | None):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def storage_cause(exc: BaseException, root: Path | str) -> str | None:
    """One plain sentence for a storage fault anywhere in `exc`'s chain, or None if it is not one."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno is not None:
            where = f" ({e.filename})" if e.filename else ""
            if e.errno == errno.ENOSPC:
                return f"disk full: free space in {root}, then try again"
            if e.errno == errno.EDQUOT:
                return f"disk quota exceeded: free space in {root} or raise the quota, then try again"
            if e.errno == errno.EFBIG:
                return (f"file too large: a write in {root}{where} went over this server's file size limit "
                        "(ulimit -f); raise the limit and restart the server")
            if e.errno == errno.EROFS:
                return (f"the workspace {root} is on a read-only file system; remount it writable or pass another "
                        "--workspace")
            if e.errno in (errno.EACCES, errno.EPERM):
                return f"permission denied writing in the workspace {root}{where}; fix its ownership or permissions"
            if e.errno == errno.EIO:
                return f"I/O error on the disk holding {root}{where}; check the disk, then run `egg-mcp doctor`"
        if isinstance(e, sqlite3.Error):
            text = str(e).lower()
            if "full" in text:
                return f"disk full: free space in {root}, then try again"
            if "locked" in text or "busy" in text:
                return (f"the workspace database in {root} stayed locked by another process for 30 s; "
                        "try again, or stop the other server using this workspace")
            if "readonly" in text or "read-only" in text:
                return f"the workspace database in {root} is read-only; fix its permissions or mount"
            if "malformed" in text or "not a database" in text or "corrupt" in text:
                return (f"the workspace database in {root} is damaged ({e}); restart the server to restore it "
                        "from its newest snapshot, and see `egg-mcp doctor`")
            if "disk i/o" in text:
                return f"I/O error on the disk holding {root}; check the disk, then run `egg-mcp doctor`"
            return f"the workspace database in {root} failed a write ({e}); run `egg-mcp doctor`"
    return None


def plain_cause(exc: BaseException, root: Path | str) -> str:
    """One sentence for any exception that stopped a job: a storage fault as above, a workflow or workspace
    error by its own text, anything else by its type and message."""
    cause = storage_cause(exc, root)
    if cause is not None:
        return cause
    if isinstance(exc, WorkspaceError) or type(exc).__name__ == "WorkflowError":
        return str(exc)
    if not isinstance(exc, Exception):
        return "the verify was cancelled (the client went away or the server is stopping); verify the source again"
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"the job stopped on an internal error ({type(exc).__name__}{': ' + text if text else ''}); verify again"


def tool_error_text(exc: Exception, tool: str, root: Path | str | None = None) -> str:
    """The text of a tool error for an exception no wrapper anticipated: a storage fault as its sentence,
    anything else named by type and message (never the SDK's bare "Error executing tool X")."""
    from egg_mcp.workspace.store import Workspace

    where = root or Workspace.last_opened or "the workspace"
    cause = storage_cause(exc, where)
    if cause is not None:
        return cause
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return (f"{tool} failed on an internal error ({type(exc).__name__}{': ' + text if text else ''}); "
            "the server log has the details")

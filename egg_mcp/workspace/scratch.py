"""Workers' scratch folders, and what killed processes leave behind (temp files of a write cut short,
worker folders, runners' private dirs): removed at start only when no live process can still be using them."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time
from pathlib import Path

log = logging.getLogger(__name__)


SCRATCH_GRACE_S = 5.0
"""A scratch folder younger than this is never removed at start (a live server may be spawning into it)."""
SCRATCH_OWNER_FILE = ".workspace"
"""In a per-workspace scratch folder in the temp dir: the workspace's path."""
RUNNER_DIRS_FILE = ".runner-dirs"
"""In a judge's folder: the runners' private dirs it made (outside the folder, in the temp dir), one a line."""


def private_scratch(path: Path, workspace: Path) -> Path:
    """`path` made (0700), when its parents in a shared temp dir are this user's own real dirs; else the
    workspace's own `scratch` folder (logged): never a folder another user could have planted."""
    try:
        base = path.parent
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        if base.name.startswith("egg-mcp-"):  # config.default_scratch_dir's per-user folder in the temp dir
            st = os.lstat(base)
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                raise OSError(f"{base} is not a directory of this user")
            if stat.S_IMODE(st.st_mode) & 0o077:
                os.chmod(base, 0o700)
        path.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(f"{path} is not a directory of this user")
        if base.name.startswith("egg-mcp-"):  # whose it is: a later start removes it once that workspace is gone
            owner = path / SCRATCH_OWNER_FILE
            if not owner.exists():
                owner.write_text(str(Path(workspace).expanduser().resolve()))
        return path
    except OSError as exc:
        fallback = workspace / "scratch"
        log.warning("scratch %s unusable (%s): workers' folders go to %s", path, exc, fallback)
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback


def _live_cwds() -> set[str]:
    """The working directories of the processes this user can see (their /proc/<pid>/cwd)."""
    cwds = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwds.add(os.readlink(entry / "cwd"))
            except OSError:
                continue
    return cwds


def remove_stale_tmp(root: Path, artifacts: Path, snapshots: Path) -> None:
    """Temp files of a process that died mid-write (`.<name>.<pid>.<hex>.tmp|.egg-tmp`); a live
    writer's temp files are left alone."""
    for folder in [root / "exports", *artifacts.glob("??")]:
        for tmp in folder.glob(".*.*tmp"):
            parts = tmp.name.split(".")  # ['', name..., pid, hex, 'tmp' | 'egg-tmp']
            pid = int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else None
            if pid is not None and pid != os.getpid() and not pid_alive(pid):
                tmp.unlink(missing_ok=True)
    if snapshots.is_dir():  # `.egg-<ns>-<pid>.sqlite3.tmp`: a snapshot cut short by a kill or a full disk
        for tmp in snapshots.glob(".egg-*.sqlite3.tmp"):
            pid = tmp.name.split(".")[1].rpartition("-")[2]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                tmp.unlink(missing_ok=True)


def clean_scratch(root: Path, scratch: Path, removed: list[Path]) -> None:
    """Worker folders (`scratch/**/worker-*`) left by killed servers: removed at start when no live
    process works in them (its cwd is there) and they are older than SCRATCH_GRACE_S. Without /proc
    nothing can be told apart and nothing is removed."""
    if not Path("/proc/self/cwd").exists():
        return
    live = _live_cwds()
    _remove_orphan_scratch(scratch, live, removed)
    found: list[Path] = []
    # this workspace's scratch, and the folder older versions kept inside the workspace
    for folder in dict.fromkeys([scratch, root / "scratch"]):
        if not folder.is_dir():
            continue
        for dirpath, dirnames, _ in os.walk(folder):
            for name in list(dirnames):
                if name.startswith("worker-"):
                    found.append(Path(dirpath) / name)
                    dirnames.remove(name)  # never walk into a candidate's files
    if not found:
        return
    cutoff = time.time() - SCRATCH_GRACE_S
    for folder in found:
        try:
            if folder.stat().st_mtime > cutoff:
                continue
        except OSError:
            continue
        if _in_use(folder, live):
            continue
        _remove_runner_dirs(folder, live, removed)
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
    if removed:
        log.warning("workspace %s: removed %d scratch folder(s) left by stopped servers", root, len(removed))


def _remove_orphan_scratch(scratch: Path, live: set[str], removed: list[Path]) -> None:
    """Sibling scratch folders (other workspaces', in `<temp>/egg-mcp-<uid>/`) whose workspace no longer
    exists: removed when older than SCRATCH_GRACE_S and no live process works in them."""
    base = scratch.parent
    if not base.name.startswith("egg-mcp-") or not base.is_dir():
        return
    cutoff = time.time() - SCRATCH_GRACE_S
    for folder in base.iterdir():
        if folder == scratch or folder.is_symlink() or not folder.is_dir():
            continue
        try:
            owner = Path((folder / SCRATCH_OWNER_FILE).read_text().strip())
            if not owner.is_absolute() or owner.exists() or folder.stat().st_mtime > cutoff:
                continue
        except OSError:
            continue
        if _in_use(folder, live):
            continue
        for worker in folder.glob("**/worker-*"):  # their runners' dirs in the temp dir first
            _remove_runner_dirs(worker, live, removed)
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)


def _remove_runner_dirs(folder: Path, live: set[str], removed: list[Path]) -> None:
    """The runners' private dirs a dead judge listed in its folder (runner_process.RUNNER_DIRS_FILE): each
    removed only when it is still a runner's dir of ours (a real dir owned by this user with the folders
    runner_env makes) and no live process works in it."""
    try:
        listed = (folder / RUNNER_DIRS_FILE).read_text().splitlines()
    except OSError:
        return
    for line in dict.fromkeys(listed):
        path = Path(line)
        if not path.is_absolute() or ".." in path.parts:
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or not all(
                (path / sub).is_dir() for sub in ("home", "tmp", "triton_cache")):
            continue
        prefix = str(path) + os.sep
        if any(cwd == str(path) or cwd.startswith(prefix) for cwd in live):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process just started: anything it "owns" is from a previous life
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _in_use(folder: Path, live: set[str]) -> bool:
    """Does a live process work in `folder` or below it (`live`: the working directories of live processes)?"""
    prefix = str(folder) + os.sep
    return any(cwd == str(folder) or cwd.startswith(prefix) for cwd in live)

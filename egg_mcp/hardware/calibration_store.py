"""Calibration files: `<workspace>/calibration/<gpu-uuid>.json`, one per GPU (pure; no torch)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from pydantic import ValidationError

from egg_mcp.hardware.calibration_record import Calibration

log = logging.getLogger(__name__)

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def calibration_dir(workspace_root: Path) -> Path:
    return Path(workspace_root) / "calibration"


def path_for(workspace_root: Path, uuid: str) -> Path:
    if not uuid:
        raise ValueError("a calibration is stored by GPU UUID; this GPU reported none")
    return calibration_dir(workspace_root) / f"{_SAFE.sub('_', uuid)}.json"


def save(workspace_root: Path, calibration: Calibration) -> Path:
    path = path_for(workspace_root, calibration.device.uuid or "")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(calibration.model_dump_json(indent=2))
    tmp.replace(path)
    return path


def load(workspace_root: Path | None, uuid: str | None) -> Calibration | None:
    """The stored calibration of GPU `uuid`, or None (none stored, or unreadable: then logged, never guessed)."""
    if workspace_root is None or not uuid:
        return None
    path = path_for(workspace_root, uuid)
    if not path.is_file():
        return None
    try:
        return Calibration.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError) as exc:
        log.warning("ignoring unreadable calibration %s (%s); run `egg-mcp calibrate` again", path, exc)
        return None

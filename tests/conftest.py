"""Shared fixtures. GPU tests carry the `gpu` marker and skip cleanly without CUDA."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def workspace_dir(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test reads the developer's real workspace or KernelBench settings."""
    for var in ("EGG_MCP_WORKSPACE", "EGG_MCP_KERNELBENCH_DIR", "EGG_MCP_ALLOWED_ROOTS", "EGG_MCP_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    yield


def softmax_candidate() -> str:
    return (FIXTURES / "softmax" / "row_per_program.py").read_text()


__all__ = ["REPO", "FIXTURES", "softmax_candidate", "os"]

"""What every tool and resource wrapper shares: the argument constraints the tool schemas publish, the
translation of workflow and workspace errors, and the reply (whole model plus a short text)."""

from __future__ import annotations

import functools
import logging
from typing import Annotated, Any, Literal

from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

from egg_mcp.surface.summaries import tool_result
from egg_mcp.workflow import limits
from egg_mcp.workflow.service import EggService, WorkflowError
from egg_mcp.workspace.damage import WorkspaceError
from egg_mcp.workspace.faults import tool_error_text

# Input constraints published in the tool schemas (the service checks them again for other callers). Every
# argument model is strict (surface.schemas.strict_arguments): no bools or strings for numbers.
Tolerance = Annotated[float, Field(ge=limits.MIN_TOLERANCE, le=limits.MAX_TOLERANCE, allow_inf_nan=False)]
SizeInt = Annotated[int, Field(ge=1, le=limits.MAX_SIZE_VALUE)]
SizeValue = SizeInt | Annotated[list[SizeInt], Field(min_length=1, max_length=limits.MAX_SIZE_LIST)]
"""A size constant's override: an int, or a list of ints for a list constant (1_MLP's layer_sizes)."""
CommitStage = Literal["SEEDS", "ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY"]

log = logging.getLogger("egg_mcp.server")  # the name operators' log filters know


def said_for(service: EggService):
    """`said(tool, result)`: structuredContent is the whole result, the text a short summary (see
    egg_mcp.surface.summaries), with the weak sandbox level the operator allowed (--unsafe-sandbox-floor)
    leading every text."""

    def said(tool: str, result: BaseModel) -> Any:
        """Any: each tool is annotated with its model (the SDK's output schema) and returns this CallToolResult."""
        floor = service.sandbox_floor
        return tool_result(tool, result, floor.line() if floor.weak else None)

    return said


def tool_errors(fn):
    """Turn workflow errors into tool errors the model can read and act on."""

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except (WorkflowError, WorkspaceError) as exc:
            raise ToolError(str(exc)) from None
        except (ToolError, ResourceError, MCPError):
            raise
        except Exception as exc:  # a storage fault (disk full...) or a bug: a plain sentence, never a bare error
            log.exception("tool %s failed", fn.__name__)
            raise ToolError(tool_error_text(exc, fn.__name__)) from None

    return wrapper


def resource_errors(fn):
    """Turn workflow errors into resource errors with the same sentence."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (WorkflowError, WorkspaceError) as exc:
            raise ResourceError(str(exc)) from None

    return wrapper

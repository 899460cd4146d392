"""egg-mcp: an MCP server that turns a coding LLM into a staged, measured Triton kernel engineer."""

__version__ = "0.1.0"


def main() -> None:
    """Console entry point (`egg-mcp`)."""
    from egg_mcp.cli import main as cli_main

    cli_main()

"""egg-mcp: an MCP server that turns a coding LLM into a staged, measured Triton kernel engineer.

The console entry point is `egg_mcp.cli:main` (pyproject.toml); the package root holds only the version, so importing
any part of the package never loads the command line."""

__version__ = "0.1.0"

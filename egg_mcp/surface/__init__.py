"""What an MCP client sees of egg-mcp: compact tool schemas, strict arguments, short result texts.

An LLM client pays for every byte of `tools/list` in every session and for every result it reads,
so the catalogue keeps one level of each output schema (detail behind `egg://schemas/{tool}`) and
each result's text block is a short summary beside the full structured content.
"""

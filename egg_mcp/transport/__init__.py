"""Serving the MCP server: stdio with malformed lines answered (`stdio`; the check, shared with HTTP: `jsonrpc_check`),
and HTTP behind a bearer token (`auth`) with connection limits that hold under slow clients (`connection_guard`,
`acceptor`, `http`)."""

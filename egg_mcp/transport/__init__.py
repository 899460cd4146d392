"""Serving the MCP server: stdio with malformed lines answered (`stdio`), and HTTP behind a bearer token
(`auth`) with connection limits that hold under slow clients (`guard`, `acceptor`, `http`)."""


"""Workspace: SQLite (WAL) records plus content-addressed artifact files; nothing is lost."""

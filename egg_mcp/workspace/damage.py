"""Damage in a workspace: what the client cannot fix by changing its call (the message says what to do)."""


class WorkspaceError(Exception):
    """Damage in the workspace the client cannot fix by changing its call; the message says what to do."""


class ArtifactError(WorkspaceError):
    """A stored source/result/report file is missing or no longer matches its hash."""


class DatabaseDamaged(WorkspaceError):
    """egg.sqlite3 is not a usable SQLite database and no good snapshot exists."""


"""The expertise the server hands the client: seed paradigms and stage briefs."""

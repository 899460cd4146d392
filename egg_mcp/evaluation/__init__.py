"""Evaluation engine: isolated, hard-to-fool verification and honest timing (see api.py)."""

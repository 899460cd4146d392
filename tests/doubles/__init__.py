"""Test doubles the workers run as job targets (allowed by config.EXTRA_JOB_TARGETS_VAR; never shipped)."""

"""Orchestration: `up --gate` (verify, smoke, compare with the last good, roll back), above the
rooms."""

"""Sync: the systems of record a contractor already runs, kept in step with
ours by one engine (engine.py) and one adapter per provider (adapters.py)."""

"""Adapters that talk to models for the engine's ports (guardians and actors). Like the engine,
they import no Django, DRF, Celery or Redis (tests/engine/test_import_contract.py)."""

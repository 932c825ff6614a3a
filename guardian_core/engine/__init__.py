"""Guardian's engine: conditions, thresholds, policy, state, tool validation and gate, the loop
step and the coder/reviewer loop. Plain Python: no Django, no I/O except through the ports
handed in (tests/engine/test_import_contract.py keeps it that way)."""

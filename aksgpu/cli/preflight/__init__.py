"""Preflight checks before a deploy, on the command line: the VM sizes aksgpu knows (`vm-sizes`),
what a cluster will cost (`cost`) and the price table behind it (`prices refresh`). The estimates
themselves live in aksgpu/preflight/; `plan`, `ci summary` and `diff` show them too, from the same
tables (tables.py)."""

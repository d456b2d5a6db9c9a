"""Preflight checks before a deploy, on the command line: what a cluster will cost (`cost`) and the
price table behind it (`prices refresh`). The estimate itself lives in aksgpu/preflight/; `plan`,
`ci summary` and `diff` show it too, from the same price table (tables.py)."""

"""Promotion: health-gated promotion of a GPU pool's stack (node image, driver, GPU Operator) from a
canary pool to the other GPU pools, decided from the gate's recorded verdicts.

records.py: the verdict entries (aksgpu/node/node_verdicts.py verdict_entry, the contract of
docs/guides/promotion.md) as typed records, read from JSON lines, log lines or a record ConfigMap.
decision.py: the pure decision over the canary's and the baseline's records: promote, wait, refuse
or roll back, with the evidence.

It imports aksgpu.errors only; the command (aksgpu/cli/promote.py) wires it to files and the cluster.
"""

"""Promotion: health-gated promotion of a GPU pool's stack (node image, driver, GPU Operator) from a
canary pool to the other GPU pools, decided from the gate's recorded verdicts.

records.py: the verdict entries (aksgpu/node/node_verdicts.py verdict_entry, the contract of
docs/guides/promotion.md) as typed records, read from JSON lines, log lines or a record ConfigMap.
decision.py: the pure decision over the canary's and the baseline's records: promote, wait, refuse
or roll back, with the evidence. promote.py: the pins each decision moves in environments.yaml
(project/yaml_edit.py: edited in place). cluster.py: the verdicts through the Kubernetes API. fleet.py: a
fleet's canary (Log Analytics, Fleet Manager's approval gates), to Azure's boundary. report.py: the
printed decision.

It imports aksgpu.environments, aksgpu.project, aksgpu.spec and aksgpu.errors (and, for Log
Analytics, aksgpu.preflight.verdict_history when it runs); the command is aksgpu/cli/promotion/.
"""

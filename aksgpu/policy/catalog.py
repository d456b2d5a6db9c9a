"""The rule catalog (rules.yaml): what each policy checks, how bad a finding is, why, how to fix
it and which public check it follows. Data only: the checks themselves are in the *_checks.py modules."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

CATALOG_FILE = Path(__file__).resolve().with_name("rules.yaml")
# libyaml's loader when PyYAML has it, as for the other data tables.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Severity = Literal["critical", "high", "medium", "low"]
Enforcement = Literal["mandatory", "advisory"]
POOLS = "pools"  # appliesTo: every node pool, inline in the cluster or an AgentPool resource
STACK = "stack"  # appliesTo: the rule reads several resources together
WORKLOADS = "workloads"  # appliesTo: every Kubernetes object with a pod template
WORKLOAD_TYPES = ("kubernetes:core/v1:Pod", "kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:DaemonSet",
                  "kubernetes:apps/v1:StatefulSet", "kubernetes:apps/v1:ReplicaSet", "kubernetes:batch/v1:Job",
                  "kubernetes:batch/v1:CronJob")
CLUSTER_TYPE = "azure-native:containerservice:ManagedCluster"
POOL_TYPE = "azure-native:containerservice:AgentPool"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: Severity
    enforcement: Enforcement
    applies_to: tuple[str, ...]
    reason: str
    fix: str
    sources: tuple[str, ...]

    @property
    def resource_types(self) -> tuple[str, ...]:
        """The Pulumi types a resource-level form of this rule validates (none for stack rules)."""
        if STACK in self.applies_to:
            return ()
        types = [t for t in self.applies_to if t not in (POOLS, WORKLOADS)]
        if POOLS in self.applies_to:
            types += [CLUSTER_TYPE, POOL_TYPE]
        if WORKLOADS in self.applies_to:
            types += list(WORKLOAD_TYPES)
        return tuple(dict.fromkeys(types))


@functools.cache
def rules() -> tuple[Rule, ...]:
    """Every rule of the catalog, in its order."""
    with CATALOG_FILE.open(encoding="utf-8") as handle:
        document = yaml.load(handle, Loader=_LOADER)  # noqa: S506 - a safe loader, C or Python
    return tuple(Rule(id=entry["id"], title=entry["title"], severity=entry["severity"],
                      enforcement=entry["enforcement"], applies_to=tuple(entry["appliesTo"]),
                      reason=entry["reason"], fix=entry["fix"], sources=tuple(entry["sources"]))
                 for entry in document["rules"])


@functools.cache
def rule_ids() -> frozenset[str]:
    return frozenset(rule.id for rule in rules())


def rule(rule_id: str) -> Rule:
    return next(r for r in rules() if r.id == rule_id)

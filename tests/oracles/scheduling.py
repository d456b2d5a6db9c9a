"""Oracle: where a pod can run, derived from the plan alone with Kubernetes' own rules.

Nodes come from the planned AgentPools (and the cluster's inline system pool) with the labels
and taints AKS puts on them, from AKS's documentation rather than aksgpu's code:
- every node: kubernetes.azure.com/agentpool and agentpool = the pool name, kubernetes.azure.com/mode
  (azure-aks-docs use-labels.md), node.kubernetes.io/instance-type = the VM size (well-known label);
- spot pools: label kubernetes.azure.com/scalesetpriority=spot and the taint of the same key
  (spot-node-pool.md);
- GPU sizes: kubernetes.azure.com/accelerator=nvidia (use-labels.md reserved labels).
Matching follows the Kubernetes API reference: a pod fits a node when its nodeSelector labels are
all present, one of its required node-affinity terms matches (every expression of the term), and
every NoSchedule/NoExecute taint is tolerated (key, operator Equal/Exists, value, effect).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aksgpu import catalog


@dataclass
class Node:
    pool: str
    vm_size: str
    labels: dict[str, str]
    taints: list[dict[str, str]] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        size = catalog.vm_size(self.vm_size)
        return size.gpus if size else 0

    def with_state(self, labels: dict[str, str] | None = None, taints: list[str] | None = None) -> Node:
        """The node with extra labels and taints (a node's later life)."""
        return Node(self.pool, self.vm_size, {**self.labels, **(labels or {})},
                    [*self.taints, *(parse_taint(t) for t in taints or [])])


def parse_taint(text: str) -> dict[str, str]:
    key_value, _, effect = text.rpartition(":")
    key, _, value = key_value.partition("=")
    return {"key": key, "value": value, "effect": effect}


def _node(pool: str, props: dict[str, Any], mode: str) -> Node:
    vm_size = props["vmSize"]
    labels = {**(props.get("nodeLabels") or {}), "kubernetes.azure.com/agentpool": pool, "agentpool": pool,
              "kubernetes.azure.com/mode": mode, "node.kubernetes.io/instance-type": vm_size}
    taints = [parse_taint(t) for t in props.get("nodeTaints") or []]
    if props.get("scaleSetPriority") == "Spot":
        labels["kubernetes.azure.com/scalesetpriority"] = "spot"
        taints.append({"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"})
    size = catalog.vm_size(vm_size)
    if size is not None and size.gpus and (size.vendor or "nvidia") == "nvidia":
        labels["kubernetes.azure.com/accelerator"] = "nvidia"
    return Node(pool, vm_size, labels, taints)


def plan_nodes(plan: Any) -> list[Node]:
    """One representative node per agent pool of the plan."""
    nodes = []
    for cluster in plan.by_type("azure-native:containerservice:ManagedCluster"):
        for profile in cluster.inputs.get("agentPoolProfiles") or []:
            nodes.append(_node(profile["name"], profile, "system"))
    for pool in plan.by_type("azure-native:containerservice:AgentPool"):
        nodes.append(_node(pool.inputs["agentPoolName"], pool.inputs, "user"))
    return nodes


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint["effect"]:
            continue
        operator = toleration.get("operator", "Equal")
        if not toleration.get("key"):
            if operator == "Exists":
                return True
            continue
        if toleration["key"] != taint["key"]:
            continue
        if operator == "Exists" or toleration.get("value", "") == taint["value"]:
            return True
    return False


def expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    """k8s.io/apimachinery labels.Requirement.Matches: In needs the key with a listed value; NotIn and
    DoesNotExist also match a missing key."""
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise ValueError(f"operator {operator} is not modelled")


def affinity_allows(affinity: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    required = ((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(all(expression_matches(e, labels) for e in term.get("matchExpressions") or [])
               for term in required.get("nodeSelectorTerms") or [])


def fits(pod_spec: dict[str, Any], node: Node) -> bool:
    """Whether a pod with this spec may be scheduled on (or, for a DaemonSet, run on) the node."""
    selector = pod_spec.get("nodeSelector") or {}
    if any(node.labels.get(key) != value for key, value in selector.items()):
        return False
    if not affinity_allows(pod_spec.get("affinity"), node.labels):
        return False
    tolerations = pod_spec.get("tolerations") or []
    return all(tolerates(tolerations, taint) for taint in node.taints
               if taint["effect"] in ("NoSchedule", "NoExecute"))

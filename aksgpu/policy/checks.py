"""One function per rule of rules.yaml, reading resources as the engine receives them.

A resource is its Pulumi type, name and properties under their wire names (camelCase, as
`aksgpu plan --json` shows the inputs and as a Pulumi policy pack receives them). A check yields a
`Violation` for each place the rule is broken: the property path and the value found there
(MISSING when it is not set). Resource checks read a resource's inputs; stack checks read several
resources, whose properties in a real preview are their outputs, so they read names both ways
(configName or name). No check compares a value that is not known before deployment (an ID); in a
real preview, a policy that reads one is skipped for that resource and says so.

This module holds what every check shares: the resource, pool and violation types, the readers of
properties, and the three tables the checks register into (RESOURCE_CHECKS, POOL_CHECKS,
STACK_CHECKS, by rule id). The checks are in cluster_checks.py (the cluster and its settings
resources), pool_checks.py (the node pools), service_checks.py (subnets, key vaults, the registry,
the workspace) and workload_checks.py (the Kubernetes workloads); engine.py imports them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aksgpu.policy.catalog import CLUSTER_TYPE, POOL_TYPE


REGISTRY_TYPE = "azure-native:containerregistry:Registry"
WORKSPACE_TYPE = "azure-native:operationalinsights:Workspace"
DIAGNOSTIC_SETTING_TYPE = "azure-native:monitor:DiagnosticSetting"
MAINTENANCE_TYPE = "azure-native:containerservice:MaintenanceConfiguration"


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class PolicyResource:
    """One declared resource: its URN, Pulumi type, logical name and input properties."""

    urn: str
    type: str
    name: str
    props: Mapping[str, Any]


@dataclass(frozen=True)
class Pool:
    """One node pool: inline in a ManagedCluster (agentPoolProfiles) or an AgentPool resource."""

    resource: PolicyResource
    name: str
    prefix: str  # the path of the pool's properties within the resource's inputs
    props: Mapping[str, Any]


@dataclass(frozen=True)
class Violation:
    resource: PolicyResource
    subject: str  # what the finding is about: a pool's name, otherwise the resource's name
    path: str
    value: Any


def value_at(props: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of mappings, or MISSING."""
    node: Any = props
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return MISSING
        node = node[key]
    return node


def _known(props: Mapping[str, Any], key: str) -> Any:
    """props[key], or None when it is missing or not known yet: a policy pack's properties raise
    when a value the preview does not know is read (pulumi-policy's UnknownValueError)."""
    try:
        return props.get(key)
    except Exception:  # noqa: BLE001 - the pack's unknown-value error, which this module does not import
        return None


def _addon(props: Mapping[str, Any], name: str) -> tuple[str, Mapping[str, Any]]:
    """An add-on profile's key as written and its settings; AKS reads add-on names case-insensitively."""
    for key, value in (props.get("addonProfiles") or {}).items():
        if key.lower() == name.lower():
            return key, value if isinstance(value, Mapping) else {}
    return name, {}


def pools_of(resource: PolicyResource) -> Iterator[Pool]:
    if resource.type == CLUSTER_TYPE:
        for profile in resource.props.get("agentPoolProfiles") or []:
            name = str(profile.get("name", "?"))
            yield Pool(resource, name, f"agentPoolProfiles[name={name}].", profile)
    elif resource.type == POOL_TYPE:
        # agentPoolName among the inputs; name among the outputs a stack policy reads, which a
        # preview of a new pool does not know yet.
        name = resource.props.get("agentPoolName") or _known(resource.props, "name") or resource.name
        yield Pool(resource, str(name), "", resource.props)


def _is_system(pool: Pool) -> bool:
    return pool.props.get("mode") == "System"


def _is_spot(pool: Pool) -> bool:
    return pool.props.get("scaleSetPriority") == "Spot"


def _node_counts(pool: Pool) -> tuple[Any, str]:
    """The fewest nodes a pool keeps and the property that says so."""
    if pool.props.get("enableAutoScaling") is True:
        return pool.props.get("minCount", MISSING), "minCount"
    return pool.props.get("count", MISSING), "count"


ResourceCheck = Callable[[PolicyResource], Iterator[Violation]]
PoolCheck = Callable[[Pool], Iterator[Violation]]
StackCheck = Callable[[Sequence[PolicyResource]], Iterator[Violation]]
RESOURCE_CHECKS: dict[str, ResourceCheck] = {}
POOL_CHECKS: dict[str, PoolCheck] = {}
STACK_CHECKS: dict[str, StackCheck] = {}


def _register(table: dict[str, Any], rule_id: str) -> Callable[[Any], Any]:
    def add(function: Any) -> Any:
        table[rule_id] = function
        return function
    return add


def resource_check(rule_id: str) -> Callable[[ResourceCheck], ResourceCheck]:
    return _register(RESOURCE_CHECKS, rule_id)


def pool_check(rule_id: str) -> Callable[[PoolCheck], PoolCheck]:
    return _register(POOL_CHECKS, rule_id)


def stack_check(rule_id: str) -> Callable[[StackCheck], StackCheck]:
    return _register(STACK_CHECKS, rule_id)


def _expect(resource: PolicyResource, path: str, allowed: Callable[[Any], bool]) -> Iterator[Violation]:
    value = value_at(resource.props, path)
    if not allowed(value):
        yield Violation(resource, resource.name, path, value)


def _pool_expect(pool: Pool, key: str, allowed: Callable[[Any], bool]) -> Iterator[Violation]:
    value = pool.props.get(key, MISSING)
    if not allowed(value):
        yield Violation(pool.resource, pool.name, pool.prefix + key, value)


def _of_type(resources: Sequence[PolicyResource], type_: str) -> list[PolicyResource]:
    return [resource for resource in resources if resource.type == type_]


def _belongs_to(resource: PolicyResource, cluster: PolicyResource, clusters: Sequence[PolicyResource]) -> bool:
    """Whether a cluster's child resource (an AgentPool, a maintenance window) is `cluster`'s. With
    one cluster in the stack it is; only then are names compared, since a real preview does not
    know a new cluster's name yet (a policy reading an unknown value is skipped)."""
    if len(clusters) == 1:
        return True
    return resource.props.get("resourceName") == cluster.props.get("resourceName", cluster.name)


def _enabled_categories(setting: PolicyResource) -> set[str]:
    # By category: aksgpu's settings name them; a category group (allLogs) is not counted here.
    return {str(log.get("category")) for log in setting.props.get("logs") or []
            if isinstance(log, Mapping) and log.get("enabled") is True and log.get("category")}


# AKS's log categories tell its diagnostic settings apart from the registry's: their target IDs
# are not known before deployment.
AKS_CATEGORIES = frozenset({"kube-apiserver", "kube-audit", "kube-audit-admin", "kube-controller-manager",
                            "kube-scheduler", "cluster-autoscaler", "cloud-controller-manager", "guard",
                            "csi-azuredisk-controller",
                            "csi-azurefile-controller", "csi-snapshot-controller"})
REGISTRY_CATEGORIES = frozenset({"ContainerRegistryRepositoryEvents", "ContainerRegistryLoginEvents"})

"""The checks of the node pools, inline in the ManagedCluster (agentPoolProfiles) or as AgentPool
resources: one function per pool rule of rules.yaml (sizes, disks, public IPs, zones, autoscaling,
the system pool's taint), and the stack checks across a cluster's pools (their Kubernetes version,
the system pools' node count). Each registers itself (checks.py's tables) when imported; the engine
imports it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from aksgpu.policy.catalog import CLUSTER_TYPE, POOL_TYPE
from aksgpu.policy.checks import (
    MISSING,
    PolicyResource,
    Pool,
    Violation,
    _belongs_to,
    _is_spot,
    _is_system,
    _node_counts,
    _of_type,
    _pool_expect,
    pool_check,
    pools_of,
    stack_check,
    value_at,
)


@pool_check("pool-max-pods")
def _max_pods(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "maxPods", lambda v: isinstance(v, int | float) and v >= 50)


@pool_check("pool-encryption-at-host")
def _encryption_at_host(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "enableEncryptionAtHost", lambda v: v is True)


@pool_check("pool-node-public-ip")
def _node_public_ip(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "enableNodePublicIP", lambda v: v is not True)


@pool_check("pool-ssh")
def _ssh(pool: Pool) -> Iterator[Violation]:
    # Unset passes: aksgpu no longer sends sshAccess (the live service refuses it, catalog
    # aks_refused_fields.yaml) and the nodes take no SSH key; a pool that does send it sends Disabled.
    value = value_at(pool.props, "securityProfile.sshAccess")
    if value is not MISSING and value != "Disabled":
        yield Violation(pool.resource, pool.name, pool.prefix + "securityProfile.sshAccess", value)


@pool_check("pool-scale-set")
def _scale_set(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "type", lambda v: v == "VirtualMachineScaleSets")


@pool_check("pool-ephemeral-os-disk")
def _ephemeral_os_disk(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "osDiskType", lambda v: v == "Ephemeral")


@pool_check("pool-zones")
def _zones(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "availabilityZones", lambda v: isinstance(v, Sequence) and len(v) > 0)


@pool_check("pool-autoscaling")
def _autoscaling(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "enableAutoScaling", lambda v: v is True)


@pool_check("pool-user-min-nodes")
def _user_min_nodes(pool: Pool) -> Iterator[Violation]:
    # Spot pools are left out, as PSRule does: they cannot promise any node.
    if _is_system(pool) or _is_spot(pool):
        return
    nodes, key = _node_counts(pool)
    if not (isinstance(nodes, int | float) and nodes >= 3):
        yield Violation(pool.resource, pool.name, pool.prefix + key, nodes)


@pool_check("system-critical-addons-only")
def _critical_addons_only(pool: Pool) -> Iterator[Violation]:
    if _is_system(pool):
        yield from _pool_expect(pool, "nodeTaints", lambda v: isinstance(v, Sequence)
                                and "CriticalAddonsOnly=true:NoSchedule" in v)


@stack_check("aks-pool-version")
def _pool_version(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    clusters = _of_type(resources, CLUSTER_TYPE)
    for resource in resources:
        if resource.type not in (CLUSTER_TYPE, POOL_TYPE):
            continue
        cluster = resource if resource.type == CLUSTER_TYPE else next(
            (c for c in clusters if _belongs_to(resource, c, clusters)), None)
        if cluster is None:
            continue
        version = cluster.props.get("kubernetesVersion", MISSING)
        for pool in pools_of(resource):
            pool_version = pool.props.get("orchestratorVersion", MISSING)
            if pool_version is not MISSING and version is not MISSING and pool_version != version:
                yield Violation(resource, pool.name, pool.prefix + "orchestratorVersion", pool_version)


@stack_check("system-min-nodes")
def _system_min_nodes(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    clusters = _of_type(resources, CLUSTER_TYPE)
    for cluster in clusters:
        system = [pool for resource in resources if resource is cluster or (
            resource.type == POOL_TYPE and _belongs_to(resource, cluster, clusters))
            for pool in pools_of(resource) if _is_system(pool)]
        counts = [_node_counts(pool)[0] for pool in system]
        total = sum(count for count in counts if isinstance(count, int | float))
        if total < 3 and system:
            first = system[0]
            yield Violation(first.resource, first.name, first.prefix + _node_counts(first)[1], total)

"""What the node pool ordering (spec `nodePoolOrder`) does to the dependency graph.

NodePools (aksgpu/components/node_pools.py) makes each AgentPool wait for the one before it:
every pool in one chain (chained), or one chain per node subnet (perSubnet), the first pool of a
chain waiting for the cluster's last operation. Both shapes can be read back from the plan, and
the other ordering simulated without planning again:
- a pool's subnet is its vnetSubnetID when the plan knows it (an existing subnet), else the
  Subnet resources it depends on (a subnet aksgpu creates), else one subnet for every pool (the
  VNet AKS manages);
- the declared ordering is chained when a pool waits for a pool on another subnet, perSubnet when
  pools on two or more subnets only wait for pools on their own; with a single subnet the two
  orderings build the same graph;
- to simulate an ordering, every pool-to-pool wait is dropped, the first pools' other waits (the
  cluster's last operation) are given to every pool, and the pools are chained again in the order
  the plan creates them (each chain's own order; across chains, URN order): one chain
  (chained) or one per subnet (perSubnet).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aksgpu.plan.critical_path import POOL_TYPE, topological_order

if TYPE_CHECKING:
    from aksgpu.plan.planner import PlannedResource

SUBNET_TYPE = "azure-native:network:Subnet"
ORDERINGS = ("chained", "perSubnet")


def subnet_key(pool: PlannedResource, by_urn: Mapping[str, PlannedResource]) -> str:
    """Which subnet a pool's nodes are on, as far as the plan tells."""
    subnet_id = (pool.inputs or {}).get("vnetSubnetID")
    if isinstance(subnet_id, str) and subnet_id.startswith("/"):
        return subnet_id
    subnets = sorted(urn for urn in pool.dependencies if urn in by_urn and by_urn[urn].type == SUBNET_TYPE)
    return ",".join(subnets) or "(AKS-managed VNet)"


def pool_order(resources: Sequence[PlannedResource], graph: Mapping[str, set[str]]) -> list[str]:
    """The pools' URNs in the order the plan creates them (waits first, then URN order)."""
    pools = {r.urn for r in resources if r.type == POOL_TYPE and r.urn in graph}
    return topological_order({urn: graph[urn] & pools for urn in pools})


def declared_ordering(resources: Sequence[PlannedResource], graph: Mapping[str, set[str]]) -> str | None:
    """chained or perSubnet as the plan's graph shows it; None when both give the same graph."""
    by_urn = {r.urn: r for r in resources}
    pools = pool_order(resources, graph)
    keys = {urn: subnet_key(by_urn[urn], by_urn) for urn in pools}
    if len(set(keys.values())) < 2:
        return None
    crosses = any(keys[wait] != keys[urn] for urn in pools for wait in graph[urn] if wait in keys)
    return "chained" if crosses else "perSubnet"


def reorder(resources: Sequence[PlannedResource], graph: Mapping[str, set[str]], ordering: str) -> dict[str, set[str]]:
    """`graph` with the pools chained the way `ordering` would chain them."""
    if ordering not in ORDERINGS:
        raise ValueError(f"unknown node pool ordering {ordering!r}; one of {', '.join(ORDERINGS)}")
    by_urn = {r.urn: r for r in resources}
    pools = pool_order(resources, graph)
    pool_set = set(pools)
    heads = [urn for urn in pools if not graph[urn] & pool_set]
    after = set().union(*(graph[urn] - pool_set for urn in heads)) if heads else set()
    result = {urn: set(waits) for urn, waits in graph.items()}
    last_in_chain: dict[str, str] = {}
    for urn in pools:
        chain = "all" if ordering == "chained" else subnet_key(by_urn[urn], by_urn)
        waits = (graph[urn] - pool_set) | after
        if chain in last_in_chain:
            waits.add(last_in_chain[chain])
        result[urn] = waits
        last_in_chain[chain] = urn
    return result


def ordering_summary(resources: Sequence[PlannedResource], graph: Mapping[str, set[str]]) -> dict[str, Any]:
    """The declared ordering, the other one, and how many pools on how many subnets."""
    by_urn = {r.urn: r for r in resources}
    pools = pool_order(resources, graph)
    declared = declared_ordering(resources, graph)
    other = None if declared is None else next(o for o in ORDERINGS if o != declared)
    return {"declared": declared, "alternative": other, "pools": len(pools),
            "subnets": len({subnet_key(by_urn[urn], by_urn) for urn in pools})}

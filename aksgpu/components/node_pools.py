"""NodePools: one AgentPool per user pool (or per zone), created after the cluster, in order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import containerservice

from aksgpu import catalog
from aksgpu.components.pool_profile import pool_properties
from aksgpu.spec import ClusterSpec, ZonePool
from aksgpu.spec.pools import gate_hold_labels
from aksgpu.spec.promotion import promotion_labels

# What AKS cannot change on an existing pool: a change must replace the pool, not be a silent
# no-op or a failed update. One table, with its sources: catalog/replacement.yaml (its nodePools[]
# rows, which `aksgpu render` also checks); osType is no spec field (always Linux) but is as fixed.
REPLACE_ON_CHANGES = ["osType", *dict.fromkeys(
    field for path, (_, fields) in catalog.load("replacement")["replaced"].items() if path.startswith("nodePools[].")
    for field in (fields if isinstance(fields, list) else [fields]))]


@dataclass
class NodePoolsArgs:
    spec: ClusterSpec
    resource_group_name: pulumi.Input[str]
    cluster_name: pulumi.Input[str]
    subnet_ids: Mapping[str, pulumi.Input[str]]
    # The last cluster-level operation; pools start after it (AKS refuses overlapping ones).
    after: pulumi.Resource | None = None


class NodePools(pulumi.ComponentResource):
    """Every user pool of the spec as an AgentPool.

    AKS refuses overlapping operations on one cluster (409 OperationNotAllowed) and pools on one
    subnet race for it, so pools are chained: all of them (nodePoolOrder chained), or per node
    subnet (perSubnet), where pools on different subnets go in parallel.
    """

    pools: dict[str, containerservice.AgentPool]

    def __init__(self, name: str, args: NodePoolsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:NodePools", name, None, opts)
        spec = args.spec
        self.pools = {}
        self.snapshots: dict[str, containerservice.Snapshot] = {}
        last_in_chain: dict[str, pulumi.Resource | None] = {}
        for node_pool in spec.node_pools:
            for zone_pool in node_pool.agent_pools():
                chain = self._chain_key(spec, zone_pool)
                previous = last_in_chain.get(chain, args.after)
                pool = self._agent_pool(name, args, zone_pool, previous)
                last_in_chain[chain] = pool
                self.pools[zone_pool.name] = pool
            for snapshot in spec.promotion.snapshots if spec.promotion else []:
                if snapshot.source_pool == node_pool.name:  # spec/promotion.py: the source comes first
                    source = self.pools[node_pool.name]
                    self.snapshots[snapshot.name] = self._snapshot(name, args, snapshot.name, source)
        self.register_outputs({"poolNames": sorted(self.pools)})

    def _snapshot(self, name: str, args: NodePoolsArgs, snapshot: str,
                  source: containerservice.AgentPool) -> containerservice.Snapshot:
        """A node pool snapshot of `source` (Microsoft.ContainerService/snapshots 2025-09-01, the API
        pulumi-azure-native 3.29.0 uses): the pool's node image when it is created, never changed
        after (a new image needs a new name)."""
        return containerservice.Snapshot(
            f"{name}-snapshot-{snapshot}", resource_name_=snapshot, resource_group_name=args.resource_group_name,
            location=args.spec.location, snapshot_type="NodePool",
            creation_data={"source_resource_id": source.id}, tags=args.spec.tags or None,
            opts=pulumi.ResourceOptions(parent=self))

    @staticmethod
    def _chain_key(spec: ClusterSpec, zone_pool: ZonePool) -> str:
        if spec.node_pool_order == "chained":
            return "all"
        return zone_pool.pool.subnet or spec.network.vnet.node_subnet

    def _agent_pool(self, name: str, args: NodePoolsArgs, zone_pool: ZonePool,
                    previous: pulumi.Resource | None) -> containerservice.AgentPool:
        pool = zone_pool.pool
        spec = args.spec
        props = pool_properties(pool, spec, args.subnet_ids, zone_pool.zones)
        spot = pool.spot_settings
        if spot is not None:
            props.update(scale_set_priority="Spot", scale_set_eviction_policy=spot.eviction_policy,
                         spot_max_price=spot.max_price)
        gpu = pool.gpu_settings
        if gpu is not None:
            props["gpu_profile"] = {"driver": gpu.driver}
            if gpu.mig_profile:
                props["gpu_instance_profile"] = gpu.mig_profile
        if pool.capacity_reservation_group_id:
            props["capacity_reservation_group_id"] = pool.capacity_reservation_group_id
        if pool.proximity_placement_group_id:
            props["proximity_placement_group_id"] = pool.proximity_placement_group_id
        ignore = ["count"] if pool.autoscale else []  # the cluster autoscaler owns the count
        pinned = pool.pins.node_image_snapshot if pool.pins else None
        if pinned:
            # A new pool is created from the snapshot's node image. An existing pool is not moved by
            # a changed creationData: at the same Kubernetes version AKS moves a pool to a snapshot's
            # image only through a node-image-only upgrade with the snapshot's ID (azure-aks-docs
            # node-pool-snapshot.md: `az aks nodepool upgrade --node-image-only --snapshot-id`, which
            # calls upgradeNodeImageVersion, not a PUT; read 2026-11-27). So the pin is sent at create
            # only, and `aksgpu promote` prints that upgrade for the pools it moves (promotion/promote.py).
            source = self.snapshots[pinned].id if pinned in self.snapshots else pinned
            props["creation_data"] = {"source_resource_id": source}
            ignore.append("creationData")
        return containerservice.AgentPool(
            f"{name}-{zone_pool.name}",
            agent_pool_name=zone_pool.name,
            resource_name_=args.cluster_name,
            resource_group_name=args.resource_group_name,
            mode="User",
            # The gate's holds come with the node (spec/pools.py HELD_OPERAND_LABELS); labels are
            # not in REPLACE_ON_CHANGES: AKS updates them in place (use-labels.md).
            node_labels={**pool.node_labels, **gate_hold_labels(pool, spec), **promotion_labels(pool.name, spec)},
            node_taints=pool.node_taints or None,
            scale_down_mode=pool.scale_down_mode,
            tags=spec.tags or None,
            **props,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[previous] if previous is not None else [],
                replace_on_changes=REPLACE_ON_CHANGES,
                # A pool's name is fixed, so the old pool must go before its replacement comes.
                delete_before_replace=True,
                ignore_changes=ignore,
            ),
        )

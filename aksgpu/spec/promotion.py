"""promotion and nodePools[].pins: health-gated promotion of a GPU pool's stack (docs/guides/promotion.md).

A GPU pool is pinned to a tested node image through a node pool snapshot
(Microsoft.ContainerService/snapshots): in Microsoft.ContainerService 2025-09-01 (the API
pulumi-azure-native 3.29.0 uses for AgentPool and Snapshot) an agent pool's nodeImageVersion is
readOnly, and its creationData.sourceResourceId is "the source Snapshot ID if the node pool will be
created/upgraded using a snapshot" (../shared/specs managedClusters.json, ManagedClusterAgentPoolProfileProperties;
checked 2026-11-27). aksgpu sends it when a pool is created; an existing pool at the same
Kubernetes version moves to a snapshot's image only through a node-image-only upgrade with the
snapshot's ID (azure-aks-docs node-pool-snapshot.md: "required when upgrading the node image version
for a node pool based on a snapshot with an identical Kubernetes version"; the Azure CLI then calls
upgradeNodeImageVersion), which `aksgpu promote` prints. The canary pool runs the candidate;
`aksgpu promote` moves the pins from the gate's verdicts (aksgpu/promotion/decision.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import Field

from aksgpu.spec.base import Issue, SpecModel
from aksgpu.spec.in_cluster import Version
from aksgpu.spec.resource_ids import parse

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

SNAPSHOT_TYPE = "Microsoft.ContainerService/snapshots"
# The canary pool's nodes carry it: `aksgpu promote` and the plan find the canary by it.
ROLE_LABEL = "aksgpu.io/promotion-role"
# Snapshots_CreateOrUpdate's resourceName (managedClusters.json 2025-09-01, ResourceNameParameter).
SNAPSHOT_NAME = re.compile(r"^[a-zA-Z0-9]$|^[a-zA-Z0-9][-_a-zA-Z0-9]{0,61}[a-zA-Z0-9]$")


class Snapshot(SpecModel):
    """A node pool snapshot aksgpu declares: the node image (and Kubernetes version, OS SKU) of sourcePool when the snapshot is created. Azure never changes a snapshot; a new image needs a new name."""

    name: str = Field(min_length=1, max_length=63)
    """Name of the snapshot resource (1-63 letters, digits, '-' or '_', starting and ending with a letter or digit), in the cluster's resource group, e.g. "h100-202611"."""
    source_pool: str = Field(min_length=1)
    """The node pool (a nodePools name, not perZone) whose node image the snapshot captures: usually the canary pool after `aksgpu promote` decided promote."""


class Promotion(SpecModel):
    """Health-gated promotion: which GPU pool is the canary and the rules `aksgpu promote` holds its verdicts to."""

    canary_pool: str = Field(min_length=1)
    """The GPU pool that runs a new node image or driver first (a nodePools name of kind gpu); its gate verdicts decide whether the other GPU pools follow."""
    min_canary_nodes: int = Field(default=3, ge=1, le=1000)
    """Canary nodes (1-1000) with a final gate verdict on the candidate before promotion; fewer: wait. Failures need no quorum (see rollbackFailures)."""
    min_pass_rate: float = Field(default=0.9, gt=0, le=1)
    """Share of the canary's nodes that must pass (0-1, e.g. 0.9); below it promotion is refused."""
    gemm_tolerance: float = Field(default=0.05, ge=0, le=0.5)
    """How far (0-0.5) the canary's GEMM median may fall below the baseline's (the same VM size on the pinned stack) before promotion is refused."""
    bandwidth_tolerance: float = Field(default=0.05, ge=0, le=0.5)
    """The same for the device memory bandwidth median."""
    nccl_floor_gbps: float | None = Field(default=None, gt=0)
    """NCCL all-reduce bus bandwidth (GB/s) every passed canary node must reach; None: not compared."""
    rollback_failures: int = Field(default=2, ge=1, le=1000)
    """Failed canary nodes that, being more than half of the canary's, roll the canary back to the baseline pin (a held node, the gate's circuit breaker, always does)."""
    snapshots: list[Snapshot] = Field(default_factory=list)
    """Node pool snapshots aksgpu declares, for pools to pin (nodePools[].pins.nodeImageSnapshot)."""


class PoolPins(SpecModel):
    """What a GPU pool runs, held still until `aksgpu promote` moves it."""

    node_image_snapshot: str | None = None
    """The node image: the name of a snapshot in promotion.snapshots, or the resource ID of an existing snapshot (/subscriptions/.../resourceGroups/.../providers/Microsoft.ContainerService/snapshots/NAME). The pool is created or upgraded from it (its creationData). None: the pool follows AKS's node images."""
    driver_version: Version | None = None
    """The NVIDIA driver on this pool, on pools with gpu.driver None (the GPU Operator installs it), e.g. "580.105.08". None: gpuSoftware.gpuOperator.driverVersion."""


def promotion_labels(pool_name: str, spec: ClusterSpec) -> dict[str, str]:
    """The node labels promotion adds to a pool: the canary's role (none without a promotion section)."""
    return {ROLE_LABEL: "canary"} if spec.promotion and spec.promotion.canary_pool == pool_name else {}


def snapshot_names(spec: ClusterSpec) -> set[str]:
    return {s.name for s in spec.promotion.snapshots} if spec.promotion else set()


def check_promotion(spec: ClusterSpec) -> Iterator[Issue]:
    pools = {pool.name: (index, pool) for index, pool in enumerate(spec.node_pools)}
    declared = snapshot_names(spec)
    promotion = spec.promotion
    if promotion is not None:
        canary = pools.get(promotion.canary_pool)
        if canary is None or canary[1].kind != "gpu":
            yield Issue("promotion.canaryPool", promotion.canary_pool, "must name a GPU pool in nodePools",
                        f"use one of: {', '.join(n for n, (_, p) in pools.items() if p.kind == 'gpu') or 'none'}")
        elif canary[1].per_zone:
            yield Issue("promotion.canaryPool", promotion.canary_pool, "names a perZone pool, which is one AKS pool "
                        "per zone, and a node pool snapshot (what promotion pins to) captures one",
                        "make the canary a pool across its zones (perZone: false), or a pool of one zone")
        seen: set[str] = set()
        for i, snapshot in enumerate(promotion.snapshots):
            path = f"promotion.snapshots[{i}]"
            if not SNAPSHOT_NAME.fullmatch(snapshot.name):
                yield Issue(f"{path}.name", snapshot.name, "must be 1-63 letters, digits, '-' or '_', starting and "
                            "ending with a letter or digit (Snapshots_CreateOrUpdate)", 'write it like "h100-202611"')
            if snapshot.name in seen:
                yield Issue(f"{path}.name", snapshot.name, "names two snapshots", "give each snapshot its own name")
            seen.add(snapshot.name)
            source = pools.get(snapshot.source_pool)
            if source is None or source[1].per_zone:
                yield Issue(f"{path}.sourcePool", snapshot.source_pool, "must name a node pool that is not perZone "
                            "(a snapshot captures one AKS pool)", "name the canary pool")
                continue
            pinned_here = [(j, p) for j, p in pools.values() if p.pins and p.pins.node_image_snapshot == snapshot.name]
            for j, pool in pinned_here:
                if j <= source[0]:
                    yield Issue(f"nodePools[{j}].pins.nodeImageSnapshot", snapshot.name,
                                f"the snapshot is taken from pool {snapshot.source_pool}, which must come before every "
                                "pool pinned to it in nodePools (it is created first)",
                                f"list {snapshot.source_pool} before {pool.name}")
    for index, pool in pools.values():
        pins = pool.pins
        if pins is None:
            continue
        path = f"nodePools[{index}].pins"
        if pool.kind != "gpu":
            yield Issue(path, "set", "pins only a GPU pool's stack", "remove pins from this CPU pool")
        image = pins.node_image_snapshot
        if image is not None and image not in declared:
            parsed = parse(image)
            if isinstance(parsed, str) or parsed.resource_type.lower() != SNAPSHOT_TYPE.lower():
                yield Issue(f"{path}.nodeImageSnapshot", image, "must name a snapshot in promotion.snapshots or be "
                            f"the resource ID of a {SNAPSHOT_TYPE} resource",
                            "copy it from `az aks nodepool snapshot show -g GROUP -n NAME --query id`")
        gpu = pool.gpu_settings
        if pins.driver_version is not None and (gpu is None or gpu.driver != "None"):
            yield Issue(f"{path}.driverVersion", pins.driver_version, "pins the driver the GPU Operator installs, "
                        "which it does only on pools with gpu.driver None (AKS installs the driver otherwise, with "
                        "the node image)", "pin the node image instead (nodeImageSnapshot), or set gpu.driver: None")
    pinned = [p for _, p in pools.values() if p.pins and p.pins.node_image_snapshot]
    # A pool upgraded, or node-image-upgraded, without a snapshot ID goes to the latest node image
    # (azure-aks-docs node-pool-snapshot.md, read 2026-11-27): every automatic channel does so.
    os_channel = spec.control_plane.node_os_upgrade_channel
    if pinned and os_channel in ("NodeImage", "SecurityPatch"):
        yield Issue("controlPlane.nodeOsUpgradeChannel", os_channel,
                    f"the {os_channel} channel changes the nodes of the cluster's pools without a snapshot ID, and "
                    "a pool upgraded that way leaves its snapshot's node image (node-pool-snapshot.md; "
                    "learn.microsoft.com/azure/aks/auto-upgrade-node-image, read 2026-11-27)",
                    "set controlPlane.nodeOsUpgradeChannel: None (AKS then moves no node image; `aksgpu promote` "
                    "moves the pins)", "warning")
    channel = spec.control_plane.upgrade_channel
    if pinned and channel != "none":
        yield Issue("controlPlane.upgradeChannel", channel,
                    f"the {channel} channel upgrades the pools without a snapshot ID, which moves pinned pools to "
                    "the latest node image (node-pool-snapshot.md, read 2026-11-27)",
                    "set controlPlane.upgradeChannel: none while pools are pinned, and upgrade Kubernetes as a "
                    "canary round", "warning")

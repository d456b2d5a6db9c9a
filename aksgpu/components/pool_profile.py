"""Agent-pool properties shared by the inline system pool and the separate AgentPools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from aksgpu.spec import ClusterSpec, PoolBase


def pool_properties(
    pool: PoolBase,
    spec: ClusterSpec,
    subnet_ids: Mapping[str, pulumi.Input[str]],
    zones: list[str],
) -> dict[str, Any]:
    """pulumi-azure-native agent pool inputs (snake_case) for one pool of `spec`."""
    props: dict[str, Any] = {
        "vm_size": pool.vm_size,
        "count": pool.initial_count,
        "enable_auto_scaling": pool.autoscale,
        "availability_zones": zones or None,
        # Stated even when it is AKS's default for the network plugin (policy pool-max-pods): the
        # pod IP plan should not depend on a default.
        "max_pods": pool.max_pods or spec.network.default_max_pods(pool),
        "os_type": "Linux",
        "os_sku": pool.os_sku,
        "os_disk_type": pool.os_disk_type,
        "os_disk_size_gb": pool.effective_os_disk_size_gb,
        "kubelet_disk_type": pool.kubelet_disk_type,
        "type": "VirtualMachineScaleSets",
        "orchestrator_version": spec.control_plane.kubernetes_version,
        # Sent only when on: off is AKS's default, and an unchanged pool keeps an unchanged body.
        "enable_encryption_at_host": True if pool.encryption_at_host else None,
        # No security_profile.ssh_access: the live service refuses it in both places this dict goes
        # (catalog aks_refused_fields.yaml); no SSH key reaches a node (no linuxProfile is sent).
    }
    if pool.autoscale:
        props["min_count"] = pool.min_count
        props["max_count"] = pool.max_count
    upgrade = {
        "max_surge": pool.upgrade.max_surge,
        "max_unavailable": pool.upgrade.max_unavailable,
        "drain_timeout_in_minutes": pool.upgrade.drain_timeout_minutes,
        "node_soak_duration_in_minutes": pool.upgrade.node_soak_minutes,
    }
    upgrade = {key: value for key, value in upgrade.items() if value is not None}
    # AKS rejects upgrade settings on spot pools (the spec refuses them there too).
    if upgrade and not pool.is_spot:
        props["upgrade_settings"] = upgrade
    vnet = spec.network.vnet
    if vnet.mode != "managed":
        props["vnet_subnet_id"] = subnet_ids[pool.subnet or vnet.node_subnet]
        pod_subnet = pool.pod_subnet or vnet.pod_subnet
        if pod_subnet is not None:
            props["pod_subnet_id"] = subnet_ids[pod_subnet]
    return {key: value for key, value in props.items() if value is not None}

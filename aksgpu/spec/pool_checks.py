"""The rules that span a pool's fields and the cluster's pools (check_pools): VM size, system
pool, availability, counts, disks, spot, placement, taints and labels. The GPU size's own rules are
in spec/gpu_pool_checks.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING

from aksgpu import catalog
from aksgpu.catalog.vm import VmSize
from aksgpu.spec.base import Issue, did_you_mean, surge_nodes
from aksgpu.spec.gpu_pool_checks import check_gpu, check_grace_blackwell
from aksgpu.spec.reservation_checks import check_reservation
from aksgpu.spec.resource_ids import check_id
from aksgpu.spec.pools import (
    DEFAULT_EPHEMERAL_OS_DISK_GIB, DNS_SUBDOMAIN, LABEL_NAME, LABEL_VALUE, POOL_KIND_LABEL,
    SPOT_TAINT_KEY, TAINT, TEAM_KEY, NodePool, PoolBase, SystemPool, ephemeral_capacity_gib, ephemeral_placement,
    gate_hold_labels,
)

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec


# Azure VM size names: Standard_<family and vCPUs><features>[_v<n>], e.g. Standard_ND96isr_H100_v5;
# constrained-vCPU sizes add -<active vCPUs> (Standard_E4-2ds_v4).
VM_SIZE_NAME = re.compile(r"^Standard_[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*$")
# The vCPU count is the first number in the name (Standard_D2s_v3: 2 vCPUs; Standard_A1_v2: 1).
_NAMED_VCPUS = re.compile(r"^Standard_[A-Za-z]+(\d+)")


def _check_vm_size(pool: PoolBase, path: str, system: bool) -> Iterator[Issue]:
    """The size's name; a size missing from aksgpu's table is an error unless the pool says it is new
    to aksgpu (vmSizeNotInCatalog), then a warning naming the checks that could not run."""
    if VM_SIZE_NAME.fullmatch(pool.vm_size) and pool.size is not None:
        if pool.vm_size_not_in_catalog:
            yield Issue(f"{path}.vmSizeNotInCatalog", True, f"{pool.vm_size} is in aksgpu's VM size table, so "
                        "its facts are checked", "remove vmSizeNotInCatalog", "warning")
        return
    guess = did_you_mean(pool.vm_size, catalog.vm_sizes(), cutoff=0.85)
    if not VM_SIZE_NAME.fullmatch(pool.vm_size):
        yield Issue(f"{path}.vmSize", pool.vm_size, "is not an Azure VM size name (Standard_ followed by the "
                    "family, vCPUs and features, e.g. Standard_D8ds_v5)",
                    f"{guess}use the name `az vm list-sizes -l REGION` shows")
        return
    if system:
        vcpus = _NAMED_VCPUS.match(pool.vm_size)
        if re.match(r"^Standard_B\d", pool.vm_size, re.IGNORECASE):
            yield Issue(f"{path}.vmSize", pool.vm_size, "B-series sizes are not supported for system pools",
                        'use a size with local SSD such as "Standard_D8ds_v5"')
        elif vcpus is not None and int(vcpus.group(1)) < 2:
            yield Issue(f"{path}.vmSize", pool.vm_size, "system pools need at least 2 vCPUs and 4 GiB of memory, "
                        f"and the name says {vcpus.group(1)} vCPU", 'use "Standard_D8ds_v5" or larger')
        skipped = "memory, GPUs and local temp disk (for ephemeral OS and kubelet disks)"
    elif pool.kind == "gpu":  # type: ignore[attr-defined]  # system pools returned above
        skipped = "GPU count and vendor, MIG support and temp disk (the gate's check is sized for 8 GPUs)"
    else:
        skipped = "whether it has GPUs, and its temp disk"
    if not pool.vm_size_not_in_catalog:
        yield Issue(f"{path}.vmSize", pool.vm_size,
                    "is not in aksgpu's VM size table (aksgpu/catalog/vm_sizes.yaml): a typo, a retired size, or "
                    "a size new to aksgpu", f"{guess}correct the name; if it is a real size the table lacks, set "
                    f"{path}.vmSizeNotInCatalog: true (then {skipped} go unchecked)")
        return
    yield Issue(f"{path}.vmSize", pool.vm_size,
                f"is not in aksgpu's VM size table (vmSizeNotInCatalog: true), so these checks did not run: "
                f"{skipped}; prices and quota are unknown too", "confirm the name with "
                f"`az vm list-skus -l REGION --size {pool.vm_size}`, or add the size to the table", "warning")


def check_pools(spec: ClusterSpec) -> Iterator[Issue]:
    yield from _check_system_pool(spec.system_pool)
    yield from _check_system_pool_scale(spec)
    for path, pool in spec.all_pools:
        yield from _check_availability(pool, path, spec.location)
    seen: dict[str, str] = {spec.system_pool.name: "systemPool.name"}
    for index, pool in enumerate(spec.node_pools):
        path = f"nodePools[{index}]"
        yield from _check_vm_size(pool, path, system=False)
        yield from _check_counts(pool, path, system=False)
        yield from _check_disks(pool, path)
        yield from _check_node_pool(pool, path, spec)
        for zone_pool in pool.agent_pools():
            first = seen.setdefault(zone_pool.name, f"{path}.name")
            if first != f"{path}.name":
                yield Issue(
                    f"{path}.name",
                    pool.name,
                    f'gives the AKS pool name "{zone_pool.name}", which {first} already uses '
                    "(pool names are unique in a cluster)",
                    "rename one of them",
                )
    yield from _check_spot_fallback(spec)


def check_system_vm_size(pool: PoolBase, path: str) -> Iterator[Issue]:
    """A system node's size: its name and table entry, not B-series, at least 2 vCPUs and 4 GiB, no
    GPUs. The system pool's rules, and the fleet hub's one node's (spec/fleet.py)."""
    yield from _check_vm_size(pool, path, system=True)
    size = pool.size
    if size is None:
        return
    if size.burstable:
        yield Issue(f"{path}.vmSize", pool.vm_size, "B-series sizes are not supported for system pools",
                    'use a size with local SSD such as "Standard_D8ds_v5"')
    if size.vcpus < 2 or size.memory_gib < 4:
        yield Issue(f"{path}.vmSize", pool.vm_size, "system pools need at least 2 vCPUs and 4 GiB of memory",
                    'use "Standard_D8ds_v5" or larger')
    if size.gpus:
        yield Issue(f"{path}.vmSize", pool.vm_size, "the system pool carries cluster add-ons, not GPU work",
                    'use a CPU size with local SSD such as "Standard_D8ds_v5", and put GPUs in nodePools')


def _check_system_pool(pool: SystemPool) -> Iterator[Issue]:
    path = "systemPool"
    yield from check_system_vm_size(pool, path)
    yield from _check_counts(pool, path, system=True)
    yield from _check_disks(pool, path)
    size = pool.size
    if size is not None:
        if 2 <= size.vcpus < 4 and size.memory_gib >= 4:
            yield Issue(f"{path}.vmSize", pool.vm_size,
                        "AKS recommends at least 4 vCPUs for system pools", 'use "Standard_D4ds_v5" or larger',
                        "warning")
        if size.temp_disk_gib == 0:
            yield Issue(f"{path}.vmSize", pool.vm_size,
                        "has no local temp disk, so the system pool cannot run on local SSD",
                        'use a "ds" size such as "Standard_D8ds_v5"', "warning")
    max_pods = pool.max_pods or 30
    if max_pods * max(pool.min_nodes, 1) < catalog.limit("minSystemPoolPods"):
        yield Issue(f"{path}.maxPods", pool.max_pods,
                    f"a system pool needs room for at least {catalog.limit('minSystemPoolPods')} pods "
                    "(maxPods x minimum nodes)", "raise maxPods or the node count")
    if len(pool.zones) < 2:
        yield Issue(f"{path}.zones", pool.zones,
                    "a system pool in fewer than two zones stops the cluster's add-ons when that zone fails",
                    'spread it: zones: ["1", "2", "3"]', "warning")
    if pool.min_nodes < 2:
        field, value = ("minCount", pool.min_count) if pool.autoscale else ("count", pool.count)
        yield Issue(f"{path}.{field}", value, "AKS recommends at least two (ideally three) system nodes",
                    f"set {field}: 3", "warning")


def _check_availability(pool: PoolBase, path: str, location: str) -> Iterator[Issue]:
    """The size is sold in the region, and offered in the pool's zones (data/azure_availability.yaml)."""
    table = catalog.load("azure_availability")
    regions = table["regions"].get(pool.vm_size)
    if regions is not None and location not in regions:
        yield Issue(f"{path}.vmSize", pool.vm_size, f"Azure listed no price for this size in {location} (Retail "
                    f"Prices API, {table['regionsDate']}), so it is most likely not offered there; it is sold in "
                    f"{len(regions)} regions", f"pick a region that offers it (`aksgpu vm-sizes --json` lists "
                    f"them), or confirm with `az vm list-skus -l {location} --size {pool.vm_size}`", "warning")
    zones = table["zones"].get(location, {}).get(pool.vm_size)
    if zones is None or not pool.zones:
        return
    if not zones:
        yield Issue(f"{path}.zones", list(pool.zones), f"{pool.vm_size} is offered in no availability zone of "
                    f"{location} (Resource SKUs API, {table['zonesDate']}), so a zonal pool cannot be created",
                    "leave zones empty for a regional pool, or use a zonal size")
    elif missing := sorted(set(pool.zones) - set(zones)):
        yield Issue(f"{path}.zones", list(pool.zones), f"{pool.vm_size} was offered only in zones "
                    f"{', '.join(zones)} of {location} on the subscription Azure's Resource SKUs API was read "
                    f"with ({table['zonesDate']}); zone numbers differ between subscriptions, so {', '.join(missing)} may "
                    "lack it in yours", f"check `az vm list-skus -l {location} --size {pool.vm_size} --zone`", "warning")


def _check_system_pool_scale(spec: ClusterSpec) -> Iterator[Issue]:
    """At AKS's large-cluster scale the system pool carries kube-system for every node."""
    guidance = catalog.limit("largeCluster")
    pool, nodes = spec.system_pool, spec.total_max_nodes
    size = pool.size
    if nodes < guidance["nodes"] or size is None:
        return
    if size.vcpus < guidance["systemPoolVcpus"] or size.memory_gib < guidance["systemPoolMemoryGib"]:
        yield Issue("systemPool.vmSize", pool.vm_size,
                    f"the cluster can reach {nodes} nodes, and AKS's guidance for {guidance['nodes']} nodes and more is "
                    f"a system pool of {guidance['systemPoolVcpus']} vCPUs and {guidance['systemPoolMemoryGib']} GiB "
                    f"(Standard_D16ds_v5) per node; {pool.vm_size} has {size.vcpus} and {size.memory_gib}",
                    'use "Standard_D16ds_v5" or larger', "warning")
    if pool.os_disk_type != "Ephemeral":
        yield Issue("systemPool.osDiskType", pool.os_disk_type,
                    f"the cluster can reach {nodes} nodes, and AKS's guidance for {guidance['nodes']} nodes and more is "
                    "a system pool on ephemeral OS disks", "set osDiskType: Ephemeral", "warning")


def _check_counts(pool: PoolBase, path: str, system: bool) -> Iterator[Issue]:
    if (pool.min_count is None) != (pool.max_count is None):
        set_one = "minCount" if pool.min_count is not None else "maxCount"
        yield Issue(f"{path}.{set_one}", pool.min_count if pool.min_count is not None else pool.max_count,
                    "autoscaling needs both minCount and maxCount",
                    "set both minCount and maxCount, or neither and a fixed count")
        return
    if not pool.autoscale and pool.count is None:
        yield Issue(f"{path}.count", None, "a pool needs a size",
                    "set count (fixed size), or minCount and maxCount (autoscaled)")
        return
    if pool.autoscale:
        assert pool.min_count is not None and pool.max_count is not None
        if pool.min_count > pool.max_count:
            yield Issue(f"{path}.minCount", pool.min_count,
                        f"must be at most maxCount ({pool.max_count})", "lower minCount or raise maxCount")
        elif pool.count_is_explicit and pool.count is not None and not pool.min_count <= pool.count <= pool.max_count:
            yield Issue(f"{path}.count", pool.count,
                        f"must lie between minCount ({pool.min_count}) and maxCount ({pool.max_count})",
                        "change count, or leave it out to start at minCount")
    limit = catalog.limit("maxNodesPerPool")
    if pool.max_nodes == limit:
        field = "maxCount" if pool.autoscale else "count"
        yield Issue(f"{path}.{field}", limit, f"{limit} is AKS's most nodes per pool, so an upgrade has no room for "
                    "surge nodes and a scale-up has none to go to", f"stay below {limit}, or split the pool "
                    "(perZone, or a second pool)", "warning")
    if pool.max_pods is not None and pool.max_pods < 30 and not system:
        if pool.max_pods * max(pool.max_nodes, 1) < catalog.limit("minPodsPerPool"):
            yield Issue(f"{path}.maxPods", pool.max_pods,
                        "a pool whose maxPods is under 30 must have room for 30 pods across its nodes",
                        "raise maxPods to 30 or more")
    if pool.upgrade.max_surge is not None and surge_nodes(pool.upgrade.max_surge, 100) == 0:
        yield Issue(f"{path}.upgrade.maxSurge", pool.upgrade.max_surge,
                    "a surge of 0 needs maxUnavailable to make progress", 'use "1" or "10%"', "warning")


def _check_disks(pool: PoolBase, path: str) -> Iterator[Issue]:
    size = pool.size
    if pool.kubelet_disk == "Temporary" and size is not None and size.temp_disk_gib == 0:
        # Sizes with local NVMe only (Ddsv6, ND GB200/GB300 v6) have no temp (resource) disk at all.
        nvme = size.nvme
        local = (f"; its local disks are NVMe ({nvme.disks} x {nvme.disk_gib} GiB), which kubeletDisk does not "
                 "select") if nvme else ""
        yield Issue(f"{path}.kubeletDisk", "Temporary",
                    f"{pool.vm_size} has no temp disk (resource disk) for kubelet data{local}",
                    "use kubeletDisk: OS (or auto)")
        return
    if pool.kubelet_disk == "Temporary" and pool.os_disk_type is None:
        yield Issue(f"{path}.kubeletDisk", "Temporary", "with osDiskType unset, AKS may give an ephemeral OS disk "
                    "the VM's whole temp disk (pools created since March 2025), leaving none for kubelet data",
                    "set osDiskType: Ephemeral (with osDiskSizeGb) or Managed")
    if size is None:
        return
    temp = size.temp_disk_gib
    if pool.os_disk_type == "Ephemeral":
        yield from _check_ephemeral_fits(pool, path, size)
    if pool.kubelet_disk == "Temporary" and pool.os_disk_type is not None:
        free = pool.free_temp_disk_gib or 0
        if free <= 0:
            yield Issue(f"{path}.kubeletDisk", "Temporary",
                        f"{pool.vm_size} has no temp disk space left for kubelet data "
                        f"({temp} GiB temp disk, OS disk {pool.effective_os_disk_size_gb} GiB on it)",
                        "use kubeletDisk: OS, or a smaller ephemeral OS disk")


def _check_ephemeral_fits(pool: PoolBase, path: str, size: VmSize) -> Iterator[Issue]:
    """The ephemeral OS disk fits the local disk Azure places it on (vm_sizes.yaml: placement, cache)."""
    cache_unknown = size.cache_listed and size.cache_gib is None  # listed as null: not published
    if not (size.temp_disk_gib or size.nvme or size.cache_gib or cache_unknown):
        # Azure places an ephemeral OS disk on local storage, "VM sizes with local storage such as
        # D(a)dsv5" (MicrosoftDocs/azure-compute-docs@0d0c4c594783 ephemeral-os-disks.md, ms.date
        # 2026-09-08; learn.microsoft.com/azure/virtual-machines/ephemeral-os-disks); the size pages
        # of such sizes say "Ephemeral OS Disk: Not Supported" (vm_sizes.yaml series Dsv5).
        yield Issue(f"{path}.osDiskType", "Ephemeral", f"{pool.vm_size} has no local disk (no temp, cache or NVMe "
                    "disk), and Azure places an ephemeral OS disk only on one (Azure docs ephemeral-os-disks.md)",
                    "use osDiskType: Managed, or a size with a local disk (a 'd' size, e.g. Standard_D8ds_v5)")
        return
    needed = pool.effective_os_disk_size_gb or DEFAULT_EPHEMERAL_OS_DISK_GIB
    capacity = ephemeral_capacity_gib(size)
    if capacity >= needed:
        return
    placement = ephemeral_placement(size)
    disk = {"CacheDisk": "cache disk", "NvmeDisk": "NVMe disks"}.get(placement or "", "temp disk")
    fix = (f"set osDiskSizeGb to {capacity} or less, use osDiskType: Managed, or a size with a larger {disk}"
           if capacity >= 30 else f"use osDiskType: Managed, or a size with a larger {disk}")
    if placement is None:
        # Older sizes may have a cache disk Azure uses instead, whose size Microsoft does not publish.
        yield Issue(f"{path}.osDiskType", "Ephemeral",
                    f"an ephemeral OS disk of {needed} GiB does not fit {pool.vm_size}'s {capacity} GiB temp disk, and "
                    "aksgpu's VM table does not say whether Azure places it on a cache disk instead",
                    f"check the size's CachedDiskBytes (`az vm list-skus --size {pool.vm_size} --query "
                    f"\"[0].capabilities\"`); if it is too small, {fix}", "warning")
        return
    yield Issue(f"{path}.osDiskType", "Ephemeral",
                f"an ephemeral OS disk of {needed} GiB does not fit: {pool.vm_size} places it on its {disk}, "
                f"{capacity} GiB", fix)


def _check_node_pool(pool: NodePool, path: str, spec: ClusterSpec) -> Iterator[Issue]:
    if pool.per_zone and len(pool.name) > 11:
        yield Issue(f"{path}.name", pool.name,
                    "perZone adds the zone digit to the name, and AKS pool names have at most 12 characters",
                    "shorten it to 11 characters or fewer")
    if pool.per_zone and len(pool.zones) < 2:
        yield Issue(f"{path}.perZone", True, "expanding per zone needs at least two zones",
                    "list two or more zones, or set perZone: false", "warning")
    yield from check_gpu(pool, path)
    yield from check_grace_blackwell(pool, path, spec)
    yield from _check_spot(pool, path)
    yield from _check_placement(pool, path, spec)
    yield from _check_taints_and_labels(pool, path)
    for key in sorted(gate_hold_labels(pool, spec).keys() & pool.labels.keys()):
        yield Issue(f"{path}.labels.{key}", key, "aksgpu sets this label on GPU Operator pools while the GPU gate is "
                    "on, so the operator's device plugin and DCGM exporter start only after the gate's verdict",
                    "remove it")
    if pool.team is not None:
        declared = [team.name for team in spec.access.teams]
        if pool.team not in declared:
            yield Issue(f"{path}.team", pool.team, "must name a team declared in access.teams",
                        f"declare it in access.teams (declared: {', '.join(declared) or 'none'})")


def _check_placement(pool: NodePool, path: str, spec: ClusterSpec) -> Iterator[Issue]:
    """Capacity reservation and proximity placement groups: their IDs, and what each allows."""
    yield from check_id(f"{path}.capacityReservationGroupId", pool.capacity_reservation_group_id,
                        "Microsoft.Compute/capacityReservationGroups", required=False)
    yield from check_id(f"{path}.proximityPlacementGroupId", pool.proximity_placement_group_id,
                        "Microsoft.Compute/proximityPlacementGroups", required=False)
    if pool.capacity_reservation_group_id is not None:
        if pool.is_spot:
            yield Issue(f"{path}.capacityReservationGroupId", pool.capacity_reservation_group_id,
                        "capacity reservations hold on-demand VMs; spot VMs cannot use them",
                        "remove it, or set priority: regular")
        group = pool.capacity_reservation_group_id.split("/")[4] if pool.capacity_reservation_group_id.count("/") > 4 \
            else "?"
        yield Issue(f"{path}.capacityReservationGroupId", pool.capacity_reservation_group_id,
                    f"AKS uses the group only if the cluster's identity ({spec.name}-control-plane) holds Contributor on "
                    f"its resource group ({group}); aksgpu does not grant it",
                    f"grant it before `pulumi up`: az role assignment create --role Contributor --assignee-object-id "
                    f"<principal id of {spec.name}-control-plane> --assignee-principal-type ServicePrincipal --scope "
                    f"/subscriptions/<id>/resourceGroups/{group}", "warning")
    yield from check_reservation(pool, path)
    if pool.proximity_placement_group_id is not None and len(pool.zones) > 1:
        # perZone pools too: each zone's AgentPool would name the same group.
        yield Issue(f"{path}.proximityPlacementGroupId", pool.proximity_placement_group_id,
                    "a proximity placement group sits in one datacenter, so a pool in it spans at most one zone "
                    f"(this one lists {', '.join(pool.zones)})",
                    "list one zone (a pool per zone, each with its own group), or remove the group")


def _check_spot(pool: NodePool, path: str) -> Iterator[Issue]:
    if pool.priority != "spot":
        if pool.spot is not None:
            yield Issue(f"{path}.spot", pool.spot.model_dump(by_alias=True), "spot settings need priority: spot",
                        "set priority: spot, or remove spot")
        return
    settings = pool.spot_settings
    assert settings is not None
    price = Decimal(str(settings.max_price))
    if not price.is_finite() or (price != -1 and price <= 0):  # .nan and .inf are YAML floats too
        yield Issue(f"{path}.spot.maxPrice", settings.max_price,
                    "must be -1 (pay up to the on-demand price) or a price above zero",
                    "set maxPrice: -1")
    elif -price.as_tuple().exponent > 5:  # type: ignore[operator]  # finite here: an int exponent
        yield Issue(f"{path}.spot.maxPrice", settings.max_price, "may have at most 5 decimal places",
                    "round it to 5 decimal places")
    for field, value in pool.upgrade.model_dump(by_alias=True).items():
        if value is None:
            continue
        # AKS rejects maxSurge and maxUnavailable on spot pools ("Spot pools can't set max surge",
        # terraform-provider-azurerm#19355, #29318), so aksgpu sends no upgrade settings for them.
        rule = ("AKS rejects it on spot pools, which get no surge nodes" if field in ("maxSurge", "maxUnavailable")
                else "aksgpu sends no upgrade settings for spot pools (AKS rejects maxSurge and maxUnavailable "
                     "there), so it would not take effect")
        yield Issue(f"{path}.upgrade.{field}", value, rule, f"remove upgrade.{field}")


def _check_taints_and_labels(pool: NodePool, path: str) -> Iterator[Issue]:
    for index, taint in enumerate(pool.taints):
        where = f"{path}.taints[{index}]"
        if not TAINT.fullmatch(taint):
            yield Issue(where, taint, "must be key=value:Effect with Effect NoSchedule, PreferNoSchedule or NoExecute",
                        'write it like "dedicated=training:NoSchedule"')
        elif taint.startswith(SPOT_TAINT_KEY + "="):
            yield Issue(where, taint, "aksgpu declares the spot taint on spot pools itself (priority: spot)",
                        "remove it")
        elif taint.split("=")[0] == TEAM_KEY:
            yield Issue(where, taint, f"{TEAM_KEY} is set from the pool's team", "set team instead")
    for key, value in pool.labels.items():
        where = f"{path}.labels.{key}"
        prefix, _, name = key.rpartition("/")
        if not LABEL_NAME.fullmatch(name) or len(name) > 63:
            yield Issue(where, key, "label names are 1-63 letters, digits, '-', '_' or '.', starting and "
                        "ending with a letter or digit", 'rename it, e.g. "workload"')
        elif prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
            yield Issue(where, key, "a label prefix must be a lowercase DNS subdomain of at most 253 characters",
                        'use a prefix like "example.com/"')
        elif any(prefix == p or prefix.endswith("." + p) for p in catalog.limit("reservedLabelPrefixes")):
            yield Issue(where, key, f"the {prefix} prefix is reserved for AKS", "use your own prefix")
        elif key in (TEAM_KEY, POOL_KIND_LABEL):
            yield Issue(where, key, f"{key} is set by aksgpu from the pool's team and kind", "remove it")
        if not LABEL_VALUE.fullmatch(value) or len(value) > 63:
            yield Issue(where, value, "label values are at most 63 letters, digits, '-', '_' or '.', starting "
                        "and ending with a letter or digit", "shorten or rename the value")
    if pool.team is not None and (not LABEL_VALUE.fullmatch(pool.team) or not pool.team):
        yield Issue(f"{path}.team", pool.team, "a team name becomes a label value and taint value",
                    "use lowercase letters, digits and '-'")


def _check_spot_fallback(spec: ClusterSpec) -> Iterator[Issue]:
    on_demand = {p.vm_size for p in spec.node_pools if p.kind == "gpu" and p.priority == "regular"}
    for index, pool in enumerate(spec.node_pools):
        if pool.kind == "gpu" and pool.priority == "spot" and pool.vm_size not in on_demand:
            yield Issue(f"nodePools[{index}].priority", "spot",
                        f"spot capacity can vanish without notice and no on-demand {pool.vm_size} pool "
                        "backs this one up", f"add a regular-priority gpu pool of {pool.vm_size} "
                        "(it can scale from 0) so the cluster autoscaler can fall back to it", "warning")

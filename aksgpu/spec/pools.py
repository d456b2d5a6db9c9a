"""Node pools: the dedicated critical-system pool and the CPU/GPU user pools.

Field shapes are checked by pydantic; the rules that span fields are in `check_pools`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from aksgpu import catalog

from aksgpu.spec.base import Issue, SpecModel, checked, did_you_mean, surge_nodes

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

# AKS's pattern for agent pool names (managedClusters.json ManagedClusterAgentPoolProfile.name).
POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
# The az CLI's taint syntax (azure-cli acs/_validators.py validate_taint): key=value:Effect.
TAINT = re.compile(
    r"^[a-zA-Z\d][\w\-\./]{0,252}=[a-zA-Z\d][\w\-\.]{0,62}:(NoSchedule|PreferNoSchedule|NoExecute)$"
)
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SURGE = re.compile(r"^\d+%?$")
RESOURCE_ID = r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/{kind}/[^/]+$"

# Taint and labels aksgpu puts on pools. nvidia.com/gpu is the key the NVIDIA device plugin and
# GPU Operator tolerate by default, so GPU components need no extra toleration.
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
TEAM_KEY = "aksgpu.io/team"
POOL_KIND_LABEL = "aksgpu.io/pool-kind"
CRITICAL_ADDONS_TAINT = "CriticalAddonsOnly=true:NoSchedule"
SPOT_TAINT_KEY = "kubernetes.azure.com/scalesetpriority"
SPOT_TAINT = catalog.limit("aksNode")["spotTaint"]  # AKS puts it on every spot node
# The ephemeral OS disk size aksgpu states when a pool sets none (see effective_os_disk_size_gb).
DEFAULT_EPHEMERAL_OS_DISK_GIB = 128
# What a GPU Operator pool's nodes carry from their first moment while the gate is on (AgentPool
# nodeLabels, which the kubelet sets when it registers the Node: Azure/AKS#4628, AKS team, 2025-03-19,
# "labels/taints are there at the same time as node join the cluster"), so that the operator's
# device plugin and DCGM exporter cannot start before the gate's verdict, by construction:
# - The operator's DaemonSets for them select "<label>: true" (NVIDIA/gpu-operator v26.7.0
#   assets/state-device-plugin/0500_daemonset.yaml, assets/state-dcgm-exporter/0800_daemonset.yaml).
#   Its node labeller keeps a non-empty value it finds (controllers/state_manager.go
#   addGPUStateLabels), but removes every nvidia.com/gpu.deploy.* label from a node without
#   nvidia.com/gpu.present=true (controllers/nodelabeling_controller.go updateGPUStateLabels ->
#   removeAllGPUStateLabels) and sets gpu.present only from node feature discovery's NVIDIA PCI
#   label (reconcileCommonGPULabel, state_manager.go gpuNodeLabels). So the PCI label comes with
#   the pool too: the labeller then sets gpu.present in its first pass and never sweeps the
#   "false" away before NFD has run. NFD's master removes only labels it recorded as its own
#   (kubernetes-sigs/node-feature-discovery v0.19.0 pkg/nfd-master/nfd-master.go updateNodeObject).
# - The k8s-driver-manager (NVIDIA/k8s-driver-manager v0.12.0, the gpu-operator v26.7.0 default)
#   writes back values computed from its snapshot (cmd/driver-manager/main.go fetchCurrentLabels,
#   maybeSetTrue: "false" stays "false"), so it can only write back the "false" it read.
# Only the gate's verdict writes "true" (node_gate.py, which names the same two labels).
HELD_OPERAND_LABELS = ("nvidia.com/gpu.deploy.device-plugin", "nvidia.com/gpu.deploy.dcgm-exporter")
NVIDIA_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"

PoolName = Annotated[
    str,
    checked(
        POOL_NAME.fullmatch,
        "must be 1-12 lowercase letters and digits, starting with a letter (AKS agent pool name)",
        'rename it, e.g. "gpua100"',
    ),
]
Surge = Annotated[
    str,
    checked(SURGE.fullmatch, "must be a whole number of nodes or a percentage", 'write "1" or "33%"'),
]
Zone = Literal["1", "2", "3"]
OsSku = Literal["Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux", "AzureLinux3"]


class UpgradeSettings(SpecModel):
    """How AKS rolls nodes during an upgrade (AgentPoolUpgradeSettings)."""

    max_surge: Surge | None = None
    """Extra nodes AKS adds while upgrading, a count ("1") or a percentage of the pool ("33%"). None: AKS's default, 10%. Spot pools get no surge nodes, so leave it unset there; "0" needs maxUnavailable."""
    max_unavailable: Surge | None = None
    """Nodes that may be unavailable at once during an upgrade, a count or a percentage of the pool. None: AKS's default, 0."""
    drain_timeout_minutes: int | None = Field(default=None, ge=1, le=1440)
    """Minutes (1-1440) AKS waits for a node's pods to be evicted during an upgrade. None: AKS's default, 30."""
    node_soak_minutes: int | None = Field(default=None, ge=0, le=30)
    """Minutes (0-30) AKS waits after draining a node before reimaging it and moving on to the next. None: AKS's default."""


class PoolBase(SpecModel):
    """What every pool has: size, zones, scale, disks, pods, subnet."""

    name: PoolName
    """Name of the AKS agent pool: 1-12 lowercase letters and digits, starting with a letter, unique in the cluster. Renaming a pool replaces it."""
    vm_size: str = Field(min_length=1)
    """Azure VM size of the nodes, e.g. "Standard_NC24ads_A100_v4"; kind: gpu needs a size with GPUs. Changing it replaces the pool."""
    zones: list[Zone] = Field(default_factory=lambda: ["1", "2", "3"])  # type: ignore[arg-type]  # the literals are Zones
    """Availability zones the nodes spread over, from "1", "2" and "3"; empty: no zones. The VM size must be offered in these zones of the region. Changing it replaces a node pool; edits to systemPool are ignored after creation."""
    count: int | None = Field(default=None, ge=0, le=1000)
    """Number of nodes, 0-1000; a pool needs count, or minCount and maxCount. With both it is the starting size and must lie between them (None: start at minCount); after that the autoscaler owns it."""
    min_count: int | None = Field(default=None, ge=0, le=1000)
    """Fewest nodes the cluster autoscaler keeps, 0-1000; set it together with maxCount to autoscale the pool."""
    max_count: int | None = Field(default=None, ge=1, le=1000)
    """Most nodes the cluster autoscaler may grow the pool to, 1-1000; set it together with minCount. With perZone it applies to each zone's pool."""
    max_pods: int | None = Field(default=None, ge=10, le=250)
    """Most pods per node, 10-250. None: AKS's default for the network plugin (250 azure-overlay, 30 azure, 110 azure with a pod subnet or kubenet). Under 30, the pool must still have room for 30 pods. Changing it replaces the pool."""
    os_sku: OsSku = "Ubuntu"
    """OS image of the nodes (AKS osSku); nodes are always Linux. AKS applies no automatic security patches to Azure Linux GPU nodes."""
    os_disk_type: Literal["Ephemeral", "Managed"] | None = None
    """Ephemeral: the OS disk lives on the VM's local temp disk, which must be at least osDiskSizeGb (128 GiB if unset); Managed: an Azure managed disk. None: AKS chooses. Changing it replaces the pool."""
    os_disk_size_gb: int | None = Field(default=None, ge=30, le=2048)
    """OS disk size in GiB, 30-2048. None: AKS's default for the VM size. An ephemeral OS disk must fit on the VM's temp disk. Changing it replaces the pool."""
    kubelet_disk: Literal["auto", "OS", "Temporary"] = "auto"
    """Where kubelet data (container images, emptyDir volumes) lives: OS (the OS disk) or Temporary (the VM's temp disk). auto: Temporary when osDiskType is set and at least 64 GiB of the temp disk is left after an ephemeral OS disk, otherwise AKS's default. Changing it replaces a node pool; edits to systemPool are ignored after creation."""
    subnet: str | None = None
    """Name of the subnet in network.vnet.subnets for the nodes. None: network.vnet.nodeSubnet. Not with an AKS-managed VNet. Changing it replaces a node pool; edits to systemPool are ignored after creation."""
    pod_subnet: str | None = None
    """Name of the subnet in network.vnet.subnets that pods take IPs from (plugin azure only). None: network.vnet.podSubnet, or the node subnet when that is unset too. Changing it replaces a node pool; edits to systemPool are ignored after creation."""
    upgrade: UpgradeSettings = UpgradeSettings()
    """How AKS rolls the pool's nodes during upgrades: surge, unavailability, drain timeout, soak time."""
    encryption_at_host: bool = True
    """Encrypt the temp disk (kubelet data and images live there), the disk caches and the OS disk's data flows at the VM host (policy pool-encryption-at-host). Needs the subscription's Microsoft.Compute EncryptionAtHost feature and a VM size that supports it. Changing it replaces a node pool; edits to systemPool are ignored after creation."""
    ssh: Literal["Disabled", "LocalUser"] = "Disabled"
    """SSH to the nodes: Disabled turns the SSH service off (policy pool-ssh; `kubectl debug node/NAME` still reaches a node through the API server); LocalUser allows a private key."""

    @property
    def autoscale(self) -> bool:
        return self.min_count is not None and self.max_count is not None

    @property
    def count_is_explicit(self) -> bool:
        """Whether the spec set count (the system pool has a default that autoscaling overrides)."""
        return "count" in self.model_fields_set

    @property
    def initial_count(self) -> int:
        if self.count is not None and (self.count_is_explicit or not self.autoscale):
            return self.count
        return self.min_count or 0

    @property
    def max_nodes(self) -> int:
        """The most nodes this pool (each zone's pool, when expanded) can have."""
        return (self.max_count if self.autoscale else self.count) or 0

    @property
    def zone_pool_count(self) -> int:
        """How many AgentPools this pool becomes (more than one when expanded per zone)."""
        return 1

    @property
    def min_nodes(self) -> int:
        return (self.min_count if self.autoscale else self.count) or 0

    @property
    def size(self) -> dict | None:
        return catalog.vm_size(self.vm_size)

    @property
    def node_range(self) -> tuple[int, int]:
        """Nodes of all its AgentPools at min scale, and at full scale during an upgrade: AKS adds
        maxSurge to each AgentPool (a perZone pool's zones each surge), and none to spot pools
        (azure-aks-docs spot-node-pool.md)."""
        per_pool = self.max_nodes if self.is_spot else self.max_nodes + surge_nodes(self.upgrade.max_surge,
                                                                                   self.max_nodes)
        return self.min_nodes * self.zone_pool_count, per_pool * self.zone_pool_count

    @property
    def kubelet_disk_type(self) -> Literal["OS", "Temporary"] | None:
        """Where kubelet data lives: the temp disk when the VM size leaves room on it. With osDiskType
        unset, AKS may give an ephemeral OS disk the whole temp disk, so auto keeps kubelet data on
        the OS disk then."""
        if self.kubelet_disk != "auto":
            return self.kubelet_disk
        if self.os_disk_type is None:
            return None
        free = self.free_temp_disk_gib
        # Below this much free temp disk, images and emptyDirs are safer on the OS disk.
        return "Temporary" if free is not None and free >= 64 else None

    @property
    def free_temp_disk_gib(self) -> int | None:
        """Temp disk left after an ephemeral OS disk takes its share (None: size unknown). Sizes
        with a cache disk or NVMe placement keep the OS disk off the temp disk."""
        size = self.size
        if size is None:
            return None
        on_temp = self.os_disk_type == "Ephemeral" and ephemeral_placement(size) in ("ResourceDisk", None)
        return size["tempDiskGib"] - ((self.effective_os_disk_size_gb or 0) if on_temp else 0)

    @property
    def effective_os_disk_size_gb(self) -> int | None:
        """The OS disk size aksgpu sends. An ephemeral OS disk left unsized would take the VM's whole
        temp disk (AKS, pools created since March 2025: azure-aks-docs concepts-storage.md), leaving
        none for kubelet data; aksgpu states 128 GiB instead. None: a managed disk AKS sizes by vCPUs."""
        if self.os_disk_size_gb is not None:
            return self.os_disk_size_gb
        return DEFAULT_EPHEMERAL_OS_DISK_GIB if self.os_disk_type == "Ephemeral" else None

    @property
    def is_spot(self) -> bool:
        return False


class SystemPool(PoolBase):
    """The dedicated critical-system pool, declared inline on the cluster.

    AKS runs etcd and the API servers itself; this pool carries the add-ons the control
    plane depends on (CoreDNS, konnectivity, metrics-server), on local SSD, across zones.
    """

    name: PoolName = "system"
    """Name of the system agent pool: 1-12 lowercase letters and digits, starting with a letter, unique in the cluster."""
    vm_size: str = Field(default="Standard_D8ds_v5", min_length=1)
    """VM size of the system nodes: at least 2 vCPUs and 4 GiB (4 vCPUs recommended), not B-series, no GPUs. Use a size with a local temp disk (the 'd' in Ddsv5) so the OS disk can be ephemeral. Set at creation: aksgpu ignores later edits to the system pool."""
    count: int | None = Field(default=3, ge=1, le=1000)
    """Number of system nodes, 1-1000; AKS recommends at least two, ideally three. With minCount and maxCount set and count left out, the pool starts at minCount."""
    min_count: int | None = Field(default=None, ge=1, le=1000)
    """Fewest system nodes the cluster autoscaler keeps, 1-1000 (a system pool needs at least one); set it together with maxCount to autoscale the pool."""
    max_pods: int | None = Field(default=110, ge=10, le=250)
    """Most pods per system node, 10-250; maxPods times the minimum node count must be at least 30."""
    os_disk_type: Literal["Ephemeral", "Managed"] | None = "Ephemeral"
    """Ephemeral: the OS disk lives on the VM's local temp disk, which must be at least osDiskSizeGb; Managed: an Azure managed disk. None: AKS chooses."""
    os_disk_size_gb: int | None = Field(default=128, ge=30, le=2048)
    """OS disk size in GiB, 30-2048; an ephemeral OS disk must fit on the VM's temp disk."""
    only_critical_addons: bool = True
    """Taint the system nodes CriticalAddonsOnly=true:NoSchedule so only critical add-ons run there; false lets other pods schedule on them too."""
    upgrade: UpgradeSettings = UpgradeSettings.model_validate({"maxSurge": "33%"})
    """How AKS rolls the system nodes during upgrades; by default a surge of 33%."""

    @property
    def taints(self) -> list[str]:
        return [CRITICAL_ADDONS_TAINT] if self.only_critical_addons else []


class SpotSettings(SpecModel):
    """Spot VM settings (only with priority: spot)."""

    eviction_policy: Literal["Delete", "Deallocate"] = "Delete"
    """What happens to an evicted spot node: Delete removes the VM; Deallocate stops it, and it still counts against your compute quota. Changing it replaces the pool."""
    max_price: float = -1
    """Highest price to pay for a spot VM: -1 pays up to the on-demand price; otherwise a price above zero with at most 5 decimal places. Changing it replaces the pool."""


class GpuSettings(SpecModel):
    """GPU pool settings: MIG partitioning and who installs the driver."""

    mig_profile: Literal["MIG1g", "MIG2g", "MIG3g", "MIG4g", "MIG7g"] | None = None
    """Multi-Instance GPU profile that partitions each GPU into instances of this size (A100, H100 and H200 sizes only). None: whole GPUs. Changing it replaces the pool."""
    driver: Literal["Install", "None"] = "Install"
    """Install: AKS installs the NVIDIA driver. None: the NVIDIA GPU Operator (or AMD stack) does; AMD sizes need None. Changing it replaces the pool."""


@dataclass(frozen=True)
class ZonePool:
    """One AgentPool as declared: a spec pool, or one zone of a pool expanded per zone."""

    name: str
    zones: list[str]
    pool: NodePool


class NodePool(PoolBase):
    """A user pool for CPU or GPU work."""

    kind: Literal["cpu", "gpu"] = "cpu"
    """cpu or gpu. gpu needs a GPU VM size and taints the nodes nvidia.com/gpu=present:NoSchedule (unless you declare an nvidia.com/gpu taint); a GPU size needs kind: gpu. Nodes get the label aksgpu.io/pool-kind."""
    priority: Literal["regular", "spot"] = "regular"
    """regular: on-demand VMs; spot: cheaper VMs Azure can evict at any time (their nodes carry the taint kubernetes.azure.com/scalesetpriority=spot:NoSchedule, which AKS adds and aksgpu declares). Back a spot GPU pool with a regular pool of the same size. Changing it replaces the pool."""
    spot: SpotSettings | None = None
    """Spot settings, only with priority: spot. None: evictionPolicy Delete and maxPrice -1."""
    per_zone: bool = False
    """Create one AKS pool per zone, named <name><zone> (so name has at most 11 characters), instead of one pool across all zones; needs at least two zones."""
    taints: list[str] = Field(default_factory=list)
    """Extra node taints, key=value:Effect with Effect NoSchedule, PreferNoSchedule or NoExecute. Leave out the spot taint (aksgpu declares it on spot pools) and aksgpu.io/team (set team instead)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra node labels. The kubernetes.azure.com prefix is reserved for AKS, and aksgpu sets aksgpu.io/team and aksgpu.io/pool-kind itself."""
    team: str | None = None
    """A team from access.teams that owns the pool: its nodes get the label aksgpu.io/team=<team> and the taint aksgpu.io/team=<team>:NoSchedule. None: no team."""
    gpu: GpuSettings | None = None
    """GPU settings, only with kind: gpu. None: no MIG, and AKS installs the driver."""
    scale_down_mode: Literal["Delete", "Deallocate"] = "Delete"
    """What happens to nodes removed on scale-down: Delete deletes the VMs; Deallocate stops them and keeps them for the next scale-up."""
    capacity_reservation_group_id: str | None = None
    """Resource ID of a capacity reservation group (with reservations for this VM size in the pool's region and zones) whose reserved VMs the pool's nodes use: on-demand GPU capacity that is there when the pool scales. On-demand pools only. The cluster's control-plane identity (<name>-control-plane) needs Contributor on the group's resource group before `pulumi up`; aksgpu does not grant it. Changing it replaces the pool."""
    proximity_placement_group_id: str | None = None
    """Resource ID of a proximity placement group, for the lowest latency between the pool's nodes (one datacenter; at most one zone). Changing it replaces the pool."""
    balloon_nodes: int = Field(default=0, ge=0, le=1000)
    """Headroom, in nodes (0-1000): that many low-priority placeholder pods ("balloons"), each holding a whole node of this pool (all its GPUs), so the autoscaler keeps the nodes up and a real job evicts a balloon and starts at once. 0: none."""

    @property
    def spot_settings(self) -> SpotSettings | None:
        if self.priority != "spot":
            return None
        return self.spot or SpotSettings()

    @property
    def gpu_settings(self) -> GpuSettings | None:
        if self.kind != "gpu":
            return None
        return self.gpu or GpuSettings()

    @property
    def is_spot(self) -> bool:
        return self.priority == "spot"

    @property
    def node_taints(self) -> list[str]:
        """The taints the pool declares. For a spot pool that includes the taint AKS adds to spot nodes
        anyway: an update that leaves it out is refused ("Changing property 'properties.nodeTaints' is
        not allowed", pulumi-azure-native#959), and stated it can never differ from what AKS has."""
        taints = list(self.taints)
        if self.is_spot:
            taints.append(SPOT_TAINT)
        if self.kind == "gpu" and not any(t.startswith("nvidia.com/gpu=") for t in taints):
            taints.append(GPU_TAINT)
        if self.team:
            taints.append(f"{TEAM_KEY}={self.team}:NoSchedule")
        return taints

    @property
    def node_labels(self) -> dict[str, str]:
        labels = {POOL_KIND_LABEL: self.kind, **self.labels}
        if self.team:
            labels[TEAM_KEY] = self.team
        return labels

    @property
    def zone_pool_count(self) -> int:
        return len(self.agent_pools())

    @property
    def gpu_vendor(self) -> str | None:
        """The GPU maker ("nvidia" or "amd", aksgpu/catalog/vm_sizes.yaml); None for a cpu pool. A gpu
        pool whose size is not in aksgpu's table counts as NVIDIA, as nearly every Azure GPU size is."""
        if self.kind != "gpu":
            return None
        return str((self.size or {}).get("vendor", "nvidia"))

    @property
    def gpus_per_node(self) -> int | None:
        """nvidia.com/gpu each node advertises: its GPUs, times the instances per GPU with MIG. 0 for a
        cpu pool; None for a gpu pool whose VM size is not in aksgpu's table (its GPUs are unknown)."""
        size = self.size
        if self.kind != "gpu" or size is None:
            return 0 if self.kind != "gpu" else None
        settings = self.gpu_settings
        per_gpu = catalog.mig_instances(settings.mig_profile) if settings and settings.mig_profile else 1
        return int(size.get("gpus", 0)) * per_gpu

    def agent_pools(self) -> list[ZonePool]:
        """The AgentPools this pool becomes: one, or one per zone (`<name><zone>`)."""
        if self.per_zone and self.zones:
            return [ZonePool(f"{self.name}{zone}", [zone], self) for zone in self.zones]
        return [ZonePool(self.name, list(self.zones), self)]


def gate_hold_labels(pool: NodePool, spec: ClusterSpec) -> dict[str, str]:
    """Node labels aksgpu adds to a pool whose GPUs the GPU Operator serves (an NVIDIA pool with
    gpu.driver None) while the gate is on: the operator's device plugin and DCGM exporter held off
    and the NVIDIA PCI label node feature discovery would set (see HELD_OPERAND_LABELS). Adding or
    removing them updates the AgentPool in place; AKS applies changed pool labels to the existing
    nodes too (use-labels.md)."""
    settings = pool.gpu_settings
    if (settings is None or settings.driver != "None" or pool.gpu_vendor != "nvidia"
            or not spec.in_cluster.enabled or not spec.gpu_health.gate.enabled):
        return {}
    return {**{label: "false" for label in HELD_OPERAND_LABELS}, NVIDIA_PCI_LABEL: "true"}


# --- rules that span fields -----------------------------------------------------------------


def ephemeral_placement(size: dict) -> str | None:
    """Where Azure puts an ephemeral OS disk on this size (None: the table does not say)."""
    return size.get("ephemeralPlacement")


def ephemeral_capacity_gib(size: dict) -> int:
    """The local disk an ephemeral OS disk must fit on: the cache disk, the temp disk or the NVMe
    disks, by the size's placement; the temp disk where the placement is not published."""
    placement = ephemeral_placement(size)
    if placement == "CacheDisk" and size.get("cacheGib"):
        return int(size["cacheGib"])
    if placement == "NvmeDisk" and size.get("nvme"):
        return int(size["nvme"]["disks"] * size["nvme"]["diskGib"])
    return int(size["tempDiskGib"])


# Azure VM size names: Standard_<family and vCPUs><features>[_v<n>], e.g. Standard_ND96isr_H100_v5;
# constrained-vCPU sizes add -<active vCPUs> (Standard_E4-2ds_v4).
VM_SIZE_NAME = re.compile(r"^Standard_[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*$")
# The vCPU count is the first number in the name (Standard_D2s_v3: 2 vCPUs; Standard_A1_v2: 1).
_NAMED_VCPUS = re.compile(r"^Standard_[A-Za-z]+(\d+)")


def _check_vm_size(pool: PoolBase, path: str, system: bool) -> Iterator[Issue]:
    """The size's name; for a size missing from aksgpu's table, which checks could not run."""
    if VM_SIZE_NAME.fullmatch(pool.vm_size) and pool.size is not None:
        return
    guess = did_you_mean(pool.vm_size, catalog.load("vm_sizes")["sizes"], cutoff=0.85)
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
    yield Issue(f"{path}.vmSize", pool.vm_size,
                f"is not in aksgpu's VM size table (aksgpu/catalog/vm_sizes.yaml), so these checks did not run: "
                f"{skipped}", f"{guess}check the name; if it is right, add the size to the table", "warning")


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


def _check_system_pool(pool: SystemPool) -> Iterator[Issue]:
    path = "systemPool"
    yield from _check_vm_size(pool, path, system=True)
    yield from _check_counts(pool, path, system=True)
    yield from _check_disks(pool, path)
    size = pool.size
    if size is not None:
        if size.get("burstable"):
            yield Issue(f"{path}.vmSize", pool.vm_size, "B-series sizes are not supported for system pools",
                        'use a size with local SSD such as "Standard_D8ds_v5"')
        if size["vcpus"] < 2 or size["memoryGib"] < 4:
            yield Issue(f"{path}.vmSize", pool.vm_size, "system pools need at least 2 vCPUs and 4 GiB of memory",
                        'use "Standard_D8ds_v5" or larger')
        elif size["vcpus"] < 4:
            yield Issue(f"{path}.vmSize", pool.vm_size,
                        "AKS recommends at least 4 vCPUs for system pools", 'use "Standard_D4ds_v5" or larger',
                        "warning")
        if size.get("gpus"):
            yield Issue(f"{path}.vmSize", pool.vm_size, "the system pool carries cluster add-ons, not GPU work",
                        'use a CPU size with local SSD such as "Standard_D8ds_v5", and put GPUs in nodePools')
        if size["tempDiskGib"] == 0:
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
    if size["vcpus"] < guidance["systemPoolVcpus"] or size["memoryGib"] < guidance["systemPoolMemoryGib"]:
        yield Issue("systemPool.vmSize", pool.vm_size,
                    f"the cluster can reach {nodes} nodes, and AKS's guidance for {guidance['nodes']} nodes and more is "
                    f"a system pool of {guidance['systemPoolVcpus']} vCPUs and {guidance['systemPoolMemoryGib']} GiB "
                    f"(Standard_D16ds_v5) per node; {pool.vm_size} has {size['vcpus']} and {size['memoryGib']}",
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
    if pool.kubelet_disk == "Temporary" and size is not None and size["tempDiskGib"] == 0:
        # Sizes with local NVMe only (Ddsv6, ND GB200/GB300 v6) have no temp (resource) disk at all.
        nvme = size.get("nvme")
        local = (f"; its local disks are NVMe ({nvme['disks']} x {nvme['diskGib']} GiB), which kubeletDisk does not "
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
    temp = size["tempDiskGib"]
    if pool.os_disk_type == "Ephemeral":
        yield from _check_ephemeral_fits(pool, path, size)
    if pool.kubelet_disk == "Temporary" and pool.os_disk_type is not None:
        free = pool.free_temp_disk_gib or 0
        if free <= 0:
            yield Issue(f"{path}.kubeletDisk", "Temporary",
                        f"{pool.vm_size} has no temp disk space left for kubelet data "
                        f"({temp} GiB temp disk, OS disk {pool.effective_os_disk_size_gb} GiB on it)",
                        "use kubeletDisk: OS, or a smaller ephemeral OS disk")


def _check_ephemeral_fits(pool: PoolBase, path: str, size: dict) -> Iterator[Issue]:
    """The ephemeral OS disk fits the local disk Azure places it on (vm_sizes.yaml: placement, cache)."""
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
    yield from _check_gpu(pool, path)
    yield from _check_grace_blackwell(pool, path, spec)
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


def _check_gpu(pool: NodePool, path: str) -> Iterator[Issue]:
    if pool.kind == "gpu" and pool.os_sku.startswith("AzureLinux"):
        yield Issue(f"{path}.osSku", pool.os_sku, "AKS applies no automatic security patches to Azure Linux GPU "
                    "nodes", "use Ubuntu for GPU pools, or plan node image upgrades yourself", "warning")
    size = pool.size
    gpus = size.get("gpus", 0) if size else None
    if size and size.get("retired"):
        replacement = size.get("replacement") or "Standard_NC24ads_A100_v4"
        yield Issue(f"{path}.vmSize", pool.vm_size, f"this size was retired on {size['retired']}",
                    f'use its replacement, "{replacement}" (Microsoft\'s migration guide for the series)')
    if pool.kind == "cpu":
        if pool.gpu is not None:
            yield Issue(f"{path}.gpu", pool.gpu.model_dump(by_alias=True), "GPU settings need kind: gpu",
                        "set kind: gpu, or remove gpu")
        if gpus:
            yield Issue(f"{path}.kind", "cpu", f"{pool.vm_size} has {gpus} GPU(s); a cpu pool would leave them "
                        "untainted and unused by GPU scheduling", "set kind: gpu")
        return
    settings = pool.gpu_settings
    assert settings is not None
    if size is None:  # _check_vm_size says which checks could not run
        return
    if not gpus:
        yield Issue(f"{path}.vmSize", pool.vm_size, "kind: gpu needs a GPU VM size; this size has no GPUs",
                    'use a GPU size such as "Standard_NC24ads_A100_v4", or set kind: cpu')
        return
    if settings.mig_profile and not size.get("mig"):
        yield Issue(f"{path}.gpu.migProfile", settings.mig_profile,
                    f"MIG needs an A100, H100 or H200 size; {pool.vm_size} has "
                    f"{'part of ' if size.get('gpuFraction') else ''}{size['gpuModel']}",
                    "remove migProfile, or use a MIG-capable size")
    elif settings.mig_profile and settings.mig_profile not in size.get("migProfiles", {}):
        yield Issue(f"{path}.gpu.migProfile", settings.mig_profile,
                    f"{size['gpuModel']} has no such MIG profile (it has {', '.join(size['migProfiles'])})",
                    "use one of those profiles")
    if size.get("vendor") == "amd" and settings.driver != "None":
        yield Issue(f"{path}.gpu.driver", settings.driver,
                    "AKS installs no AMD GPU driver; AMD pools must be created with driver None",
                    "set gpu.driver: None and install the AMD GPU Operator")


def _kubernetes_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _kubernetes_patch(version: str) -> int | None:
    """The patch number of "major.minor.patch"; None for "major.minor" (AKS then takes the latest GA patch)."""
    parts = version.split(".")
    return int(parts[2]) if len(parts) > 2 else None


def _below(version: str, minimum: str) -> bool:
    """Whether `version` is older than `minimum` (major.minor[.patch]). A version without a patch is the
    latest GA patch AKS offers of its minor (AKS API kubernetesVersion), so it meets a patch floor."""
    if _kubernetes_minor(version) != _kubernetes_minor(minimum):
        return _kubernetes_minor(version) < _kubernetes_minor(minimum)
    patch, floor = _kubernetes_patch(version), _kubernetes_patch(minimum)
    return patch is not None and floor is not None and patch < floor


def _check_grace_blackwell(pool: NodePool, path: str, spec: ClusterSpec) -> Iterator[Issue]:
    """What AKS needs of a GB200 or GB300 pool (vm_sizes.yaml graceBlackwell, with the sources)."""
    rules = catalog.load("vm_sizes")["graceBlackwell"]
    size = pool.size
    if pool.kind != "gpu" or size is None or size["series"] not in rules["series"]:
        return
    source, model = rules["source"], size["gpuModel"]
    if pool.os_sku != rules["osSku"]:
        yield Issue(f"{path}.osSku", pool.os_sku,
                    f"{model} sizes have only NVMe disk controllers, and AKS pools of them need osSku "
                    f"{rules['osSku']} ({source['osSku']})", f"set osSku: {rules['osSku']}")
    settings = pool.gpu_settings
    if settings is not None and settings.driver != rules["gpuDriver"]:
        yield Issue(f"{path}.gpu.driver", settings.driver,
                    f"{model} pools are created with gpu.driver None: the NVIDIA GPU Operator installs the driver, "
                    f"with IMEX for the DRA driver's ComputeDomains ({source['gpuDriver']})",
                    "set gpu.driver: None (aksgpu then installs the GPU Operator and the NVIDIA DRA driver)")
    minimum = rules["minKubernetes"]
    version = spec.control_plane.kubernetes_version
    if version is None:
        yield Issue("controlPlane.kubernetesVersion", None,
                    f"{path} ({pool.vm_size}) needs Kubernetes {minimum} or newer, and with no version set the "
                    f"cluster gets AKS's default, which may be older ({source['minKubernetes']})",
                    f'set controlPlane.kubernetesVersion: "{".".join(minimum.split(".")[:2])}" (AKS takes its latest '
                    f'patch) or "{minimum}" and newer, up to "{rules["maxKubernetes"]}"',
                    "warning")
    elif _below(version, minimum):
        minor = ".".join(minimum.split(".")[:2])
        yield Issue("controlPlane.kubernetesVersion", version,
                    f"{path} ({pool.vm_size}) needs Kubernetes {minimum} or newer for the NVIDIA DRA driver's "
                    f"ComputeDomains ({source['minKubernetes']})",
                    f'set controlPlane.kubernetesVersion: "{minor}" (AKS takes its latest {minor} patch) or "{minimum}" '
                    f"or newer (upgrades go one minor version at a time), or move the {model} pool to a cluster on "
                    f"{minimum}+")
    elif _kubernetes_minor(version) > _kubernetes_minor(rules["maxKubernetes"]):
        maximum = rules["maxKubernetes"]
        yield Issue("controlPlane.kubernetesVersion", version,
                    f"{path} ({pool.vm_size}) needs osSku {rules['osSku']}, which AKS supports up to Kubernetes "
                    f"{maximum} ({source['maxKubernetes']})",
                    f'keep controlPlane.kubernetesVersion at "{maximum}" or older until AKS supports {model} sizes on '
                    "a newer OS SKU")
    others = sorted({p.vm_size for p in spec.node_pools if p.size is not None and p.size.get("infiniband")
                     and p.size["series"] not in rules["series"]})
    conflict = (f"; this cluster also has InfiniBand pools of {', '.join(others)}, which want it Registered, so put "
                "them in another subscription") if others else ""
    yield Issue(f"{path}.vmSize", pool.vm_size,
                f"the subscription's AKSInfinibandSupport feature must be {rules['infinibandFeature'].lower()} for "
                f"{model} pools, and aksgpu cannot see its state ({source['infinibandFeature']}){conflict}",
                "check `az feature show --namespace Microsoft.ContainerService --name AKSInfinibandSupport`; if it "
                "is Registered, run `az feature unregister --namespace Microsoft.ContainerService --name "
                "AKSInfinibandSupport` and `az provider register -n Microsoft.ContainerService` before `pulumi up`",
                "warning")


def _check_placement(pool: NodePool, path: str, spec: ClusterSpec) -> Iterator[Issue]:
    """Capacity reservation and proximity placement groups: their IDs, and what each allows."""
    for field, value, kind, show in (("capacityReservationGroupId", pool.capacity_reservation_group_id,
                                      "Microsoft.Compute/capacityReservationGroups", "az capacity reservation group show"),
                                     ("proximityPlacementGroupId", pool.proximity_placement_group_id,
                                      "Microsoft.Compute/proximityPlacementGroups", "az ppg show")):
        if value is not None and not re.fullmatch(RESOURCE_ID.format(kind=re.escape(kind)), value, re.IGNORECASE):
            yield Issue(f"{path}.{field}", value, f"must be the resource ID of a {kind.rsplit('/', 1)[-1][:-1]}",
                        f"copy it from `{show} -g GROUP -n NAME --query id`")
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

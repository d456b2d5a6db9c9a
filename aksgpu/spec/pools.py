"""Node pools: the dedicated critical-system pool and the CPU/GPU user pools.

Field shapes are checked by pydantic; the rules that span fields are in `check_pools`
(spec/pool_checks.py, and spec/gpu_pool_checks.py for GPU sizes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from aksgpu import catalog
from aksgpu.catalog.vm import VmSize

from aksgpu.spec.base import SpecModel, checked, surge_nodes
from aksgpu.spec.promotion import PoolPins

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
ReservationZone = Literal["1", "2", "3", "regional"]
ReservedVms = Annotated[int, Field(ge=0, le=10_000)]
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
    """Azure VM size of the nodes, e.g. "Standard_NC24ads_A100_v4"; kind: gpu needs a size with GPUs. It must be in aksgpu's VM size table (aksgpu/catalog/vm_sizes.yaml) unless vmSizeNotInCatalog is true: a name the table lacks is an error, with the nearest listed name. Changing it replaces the pool."""
    vm_size_not_in_catalog: bool = False
    """true: vmSize is a real Azure size that aksgpu's VM size table does not list yet (new or rare), and the spec is to go ahead without the table's facts. The checks that need them (GPU count and vendor, MIG, temp disk, prices, quota) then warn that they did not run instead of failing; check the name with `az vm list-skus -l REGION --size NAME`. false: a size missing from the table is an error (usually a typo such as a missing _v4, or a retired size)."""
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
    """Ephemeral: the OS disk lives on the VM's local temp disk, which must be at least osDiskSizeGb (128 GiB if unset), so a size without a local disk (such as Standard_D8s_v5) cannot have one; Managed: an Azure managed disk. None: AKS chooses. Changing it replaces the pool."""
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
    ssh: Literal["Disabled"] = "Disabled"
    """SSH to the nodes. Disabled (the only value): no SSH key reaches a node, since aksgpu sends no linuxProfile key; `kubectl debug node/NAME` reaches a node through the API server (policy pool-ssh). aksgpu does not send the pool's securityProfile.sshAccess: the live AKS service refuses it (catalog aks_refused_fields.yaml); to turn the SSH service itself off, run `az aks nodepool update --ssh-access disabled` (aks-preview extension, DisableSSHPreview feature) after up."""

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
    def size(self) -> VmSize | None:
        """The VM size's facts from aksgpu's table (None: a size the table does not list)."""
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
        return size.temp_disk_gib - ((self.effective_os_disk_size_gb or 0) if on_temp else 0)

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
    capacity_reservations: dict[ReservationZone, ReservedVms] = Field(default_factory=dict)
    """VMs of vmSize the capacity reservation group (capacityReservationGroupId) reserves, per zone of the pool ("1", "2", "3"; "regional" for a reservation without zones), e.g. {"1": 18}: what `az capacity reservation list -g GROUP_RG --capacity-reservation-group GROUP` shows as each reservation's sku.capacity and zones. With it, `aksgpu validate` and the plan check that the group covers maxCount plus upgrade surge (upgrade.maxSurge, a percentage rounded up) in each zone (docs/guides/capacity.md). Empty: not stated, not checked."""
    proximity_placement_group_id: str | None = None
    """Resource ID of a proximity placement group, for the lowest latency between the pool's nodes (one datacenter; at most one zone). Changing it replaces the pool."""
    balloon_nodes: int = Field(default=0, ge=0, le=1000)
    """Headroom, in nodes (0-1000): that many low-priority placeholder pods ("balloons"), each holding a whole node of this pool (all its GPUs), so the autoscaler keeps the nodes up and a real job evicts a balloon and starts at once. 0: none."""
    pins: PoolPins | None = None
    """What this GPU pool runs, pinned: its node image (a node pool snapshot) and, on gpu.driver None pools, the driver version (docs/guides/promotion.md). None: the pool follows AKS's node images and gpuSoftware's driver."""

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
        size = self.size
        return (size.vendor if size else None) or "nvidia"

    @property
    def gpus_per_node(self) -> int | None:
        """nvidia.com/gpu each node advertises: its GPUs, times the instances per GPU with MIG. 0 for a
        cpu pool; None for a gpu pool whose VM size is not in aksgpu's table (its GPUs are unknown)."""
        size = self.size
        if self.kind != "gpu" or size is None:
            return 0 if self.kind != "gpu" else None
        settings = self.gpu_settings
        per_gpu = catalog.mig_instances(settings.mig_profile) if settings and settings.mig_profile else 1
        return size.gpus * per_gpu

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



def ephemeral_placement(size: VmSize) -> str | None:
    """Where Azure puts an ephemeral OS disk on this size (None: the table does not say)."""
    return size.ephemeral_placement


def ephemeral_capacity_gib(size: VmSize) -> int:
    """The local disk an ephemeral OS disk must fit on: the cache disk, the temp disk or the NVMe
    disks, by the size's placement; the temp disk where the placement is not published."""
    placement = ephemeral_placement(size)
    if placement == "CacheDisk" and size.cache_gib:
        return size.cache_gib
    if placement == "NvmeDisk" and size.nvme:
        return size.nvme.total_gib
    return size.temp_disk_gib

"""The InfiniBand fabric of an RDMA-capable VM size, as a pod on AKS sees it.

Facts from aksgpu/catalog/fabric.yaml (HCAs, RDMA resource, NCCL settings, each with its
source) and vm_sizes.yaml (the port rate). `fabric_profile(vm_size)` is the one way in: the
Network Operator's NicClusterPolicy, the per-team NCCL ConfigMaps and the README's gang example
all read it, so a job's requests and environment match what aksgpu installs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from aksgpu import catalog

from aksgpu.spec.base import Issue

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.pools import NodePool

FABRIC_TABLE = "fabric"
TOPOLOGY_DIR = "nccl_topology"  # beside the tables: aksgpu/catalog/nccl_topology/
TOPOLOGY_KEY = "topo.xml"       # the key of the topology ConfigMap, and the file name in the pod
# The NCCL ConfigMap's keys are the variable names without this prefix, and a pod takes them with
# `envFrom: [{prefix: NCCL_, configMapRef: ...}]`: aksgpu-team-gpus admits envFrom in a GPU
# container only with a prefix that NVIDIA_VISIBLE_DEVICES does not start with, since a team may
# edit the ConfigMap (team_access.py, README "How a team gets GPUs").
NCCL_ENV_PREFIX = "NCCL_"


@dataclass(frozen=True)
class FabricProfile:
    """One InfiniBand VM size: what a whole-node pod requests and the NCCL environment it runs with."""

    vm_size: str
    family: str
    rdma_resource: str
    """Extended resource of the RDMA shared device plugin, e.g. rdma/shared_ib."""
    rdma_per_node: int
    """How many of rdma_resource a pod that takes the whole node requests (the plugin hands it every HCA)."""
    hcas: list[str]
    """InfiniBand HCA device names as they appear on the node (mlx5_0 upward), one per GPU."""
    port_gbps: int
    """Rate of each HCA's port in Gb/s (vm_sizes.yaml `infiniband`)."""
    nccl_env: dict[str, str]
    """NCCL variables the size needs (NCCL_TOPO_FILE included where a topology file is shipped)."""
    topology_file: str | None
    """Azure's NCCL topology file for the size (a file of aksgpu/catalog/nccl_topology/), or None."""
    nccl_env_sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def hca_count(self) -> int:
        return len(self.hcas)

    @property
    def short_name(self) -> str:
        """The size as a DNS label: Standard_ND96isr_H100_v5 -> nd96isr-h100-v5."""
        return size_short_name(self.vm_size)

    @property
    def nccl_config_map(self) -> str:
        """Name of the ConfigMap (in each team namespace that may use the size) with nccl_env."""
        return f"aksgpu-nccl-{self.short_name}"

    @property
    def topology_config_map(self) -> str | None:
        """Name of the ConfigMap with the topology file (key topo.xml), or None when none is shipped."""
        return f"aksgpu-nccl-topology-{self.short_name}" if self.topology_file else None

    @property
    def nccl_config_map_data(self) -> dict[str, str]:
        """The NCCL ConfigMap's data: nccl_env with NCCL_ENV_PREFIX taken off each name."""
        return {name.removeprefix(NCCL_ENV_PREFIX): value for name, value in self.nccl_env.items()}

    def topology_xml(self) -> str | None:
        """The topology file's text, unchanged from Azure's copy, or None."""
        return catalog.text(f"{TOPOLOGY_DIR}/{self.topology_file}") if self.topology_file else None


def size_short_name(vm_size: str) -> str:
    name = vm_size.removeprefix("Standard_").lower()
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-")


def fabric_table() -> dict[str, Any]:
    return catalog.load(FABRIC_TABLE)


@dataclass(frozen=True)
class PodRequirements:
    """What a pod that uses RDMA needs besides the resource (fabric.yaml `pod`, with sources)."""

    capabilities: tuple[str, ...]
    """Linux capabilities to add: IPC_LOCK, so RDMA can pin the memory it registers."""
    shm_mount_path: str
    """Where a memory-backed emptyDir goes: /dev/shm (the container default is 64 MiB)."""
    shm_medium: str
    topology_mount_path: str
    """Where the topology ConfigMap is mounted; NCCL_TOPO_FILE points into it."""


def pod_requirements() -> PodRequirements:
    pod = fabric_table()["pod"]
    return PodRequirements(capabilities=tuple(pod["capabilities"]), shm_mount_path=str(pod["shm"]["mountPath"]),
                           shm_medium=str(pod["shm"]["medium"]), topology_mount_path=str(pod["topologyMountPath"]))


def topology_mount_path() -> str:
    """Directory where the pod mounts the topology ConfigMap (NCCL_TOPO_FILE points into it)."""
    return str(fabric_table()["pod"]["topologyMountPath"])


def port_gbps(vm_size: str) -> int | None:
    """The InfiniBand port rate of a size from vm_sizes.yaml (e.g. "400 Gb/s NDR" -> 400), or None."""
    size = catalog.vm_size(vm_size)
    rate = size.infiniband if size else None
    if not rate:
        return None
    match = re.match(r"^(\d+)\s*Gb/s", str(rate))
    return int(match.group(1)) if match else None


@functools.cache
def _profiles() -> dict[str, FabricProfile]:
    table = fabric_table()
    rdma = table["rdma"]
    resource = f"{rdma['resourcePrefix']}/{rdma['resourceName']}"
    profiles: dict[str, FabricProfile] = {}
    for family, facts in table["families"].items():
        env = {name: str(entry["value"]) for name, entry in facts["ncclEnv"].items()}
        sources = {name: str(entry["source"]) for name, entry in facts["ncclEnv"].items()}
        topology = facts.get("topologyFile")
        if topology:
            env["NCCL_TOPO_FILE"] = str(PurePosixPath(topology_mount_path()) / TOPOLOGY_KEY)
            sources["NCCL_TOPO_FILE"] = f"Azure's {topology} (fabric.yaml families.{family}.topologyFile), mounted by the job"
        outside = sorted(name for name in env if not name.startswith(NCCL_ENV_PREFIX))
        if outside:
            raise ValueError(f"fabric.yaml families.{family}.ncclEnv: {outside} do not start with {NCCL_ENV_PREFIX}, "
                             "which the NCCL ConfigMap's envFrom prefix adds back")
        for vm_size in facts["sizes"]:
            rate = port_gbps(vm_size)
            if rate is None:
                raise ValueError(f"fabric.yaml lists {vm_size}, which vm_sizes.yaml gives no InfiniBand rate")
            profiles[vm_size] = FabricProfile(
                vm_size=vm_size, family=family, rdma_resource=resource, rdma_per_node=int(rdma["perNodePod"]),
                hcas=list(facts["hcas"]), port_gbps=rate, nccl_env=dict(sorted(env.items())),
                topology_file=topology, nccl_env_sources=sources)
    return profiles


def fabric_profile(vm_size: str) -> FabricProfile | None:
    """The fabric of an InfiniBand VM size, or None for a size without InfiniBand (or not in the table)."""
    return _profiles().get(vm_size)


def fabric_profiles() -> dict[str, FabricProfile]:
    """Every size of the table."""
    return dict(_profiles())


# --- which pools, and what the spec must say about them --------------------------------------------

def is_infiniband_pool(pool: NodePool) -> bool:
    """An NVIDIA GPU pool of an InfiniBand size: one aksgpu installs the RDMA stack on."""
    return pool.kind == "gpu" and pool.gpu_vendor == "nvidia" and fabric_profile(pool.vm_size) is not None


def infiniband_pools(spec: ClusterSpec) -> list[NodePool]:
    """The pools aksgpu installs the RDMA stack on (is_infiniband_pool)."""
    return [pool for pool in spec.node_pools if is_infiniband_pool(pool)]


def pool_driver(pool: NodePool) -> str:
    settings = pool.gpu_settings
    return settings.driver if settings else "Install"


PEERMEM_SOURCE = ("Azure/aks-rdma-infiniband @700dabb4fe04 website/docs/configurations/02-gpu-drivers.md 'Option 1: "
                  "AKS-managed GPU Driver': 'The AKS-managed GPU driver installation does not load the Nvidia peer "
                  "memory kernel module' (their fix: a privileged DaemonSet, configs/nvidia-peermem-reloader)")


def check_fabric(spec: ClusterSpec) -> Iterator[Issue]:
    """InfiniBand pools whose driver mode leaves GPUDirect RDMA unset up (a warning, with Azure's source)."""
    for index, pool in enumerate(spec.node_pools):
        if pool not in infiniband_pools(spec) or pool_driver(pool) != "Install":
            continue
        yield Issue(
            f"nodePools[{index}].gpu.driver", "Install",
            f"aksgpu installs the RDMA stack on this {pool.vm_size} pool (the Network Operator's DOCA-OFED driver "
            "and RDMA shared device plugin), so NCCL runs over InfiniBand; but GPUDirect RDMA (the HCAs reading "
            "GPU memory directly) needs the GPU driver's help, and with driver Install AKS's driver provides it "
            f"only if nvidia-peermem is loaded ({PEERMEM_SOURCE}), which aksgpu does not do, or if the driver "
            "supports DMA-BUF, which is not verified for AKS's driver. Without it NCCL stages through host memory",
            "set gpu.driver: None, so the GPU Operator installs the driver and GPUDirect RDMA goes through DMA-BUF "
            "(NVIDIA's recommended path, GPU Operator docs 'GPUDirect RDMA and GPUDirect Storage'), or load "
            "nvidia-peermem on these nodes yourself as Azure's guide does",
            "warning")

"""The in-cluster layer: the Kubernetes provider aksgpu signs in with, and the GPU software that
makes each GPU pool's GPUs schedulable (the NVIDIA device plugin or the GPU Operator, by the
pool's driver mode)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Literal

from aksgpu.components import data

from .base import Issue, SpecModel, checked
from .fabric import check_fabric

if TYPE_CHECKING:
    from . import ClusterSpec
    from .pools import NodePool

# Image tags and chart versions: letters, digits, '.', '-' and '_' (an OCI tag is at most 128).
VERSION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

Version = Annotated[
    str,
    checked(VERSION.fullmatch, "must be an image tag or chart version: letters, digits, '.', '-' or '_'",
            'write it like "v0.20.0"'),
]


def pinned(component: str) -> str:
    """The version aksgpu pins for `component` (aksgpu/components/data/in_cluster.yaml)."""
    return str(data.load("in_cluster")[component]["version"])


def pinned_image(component: str) -> str:
    """image:version of `component` as aksgpu pins it."""
    return f'{data.load("in_cluster")[component]["image"]}:{pinned(component)}'


class InCluster(SpecModel):
    """Whether aksgpu declares Kubernetes objects inside the cluster, and how it signs in to do so."""

    enabled: bool = True
    """Declare the in-cluster layer (GPU software, team namespaces and quotas, GPU health gating and metrics, headroom, queues) with a Kubernetes provider. false: Azure resources only; GPU pools then need GPU software you install yourself."""
    login: Literal["azurecli", "workloadidentity", "spn", "msi"] = "azurecli"
    """How the Kubernetes provider gets an Entra ID token (kubelogin get-token --login): azurecli (the az login session; also CI after azure/login), workloadidentity (a federated token file: AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE), spn (a service principal secret: AZURE_CLIENT_ID, AZURE_CLIENT_SECRET, AZURE_TENANT_ID) or msi (the managed identity of the machine running pulumi). kubelogin's AAD_LOGIN_METHOD variable overrides it at run time. Ignored without Entra ID sign-in."""


class DevicePlugin(SpecModel):
    """The NVIDIA device plugin aksgpu runs on GPU pools whose driver AKS installs (driver Install)."""

    version: Version = pinned("devicePlugin")
    """Image tag of nvcr.io/nvidia/k8s-device-plugin. aksgpu's tests check the manifest shape of the pinned default."""


class GpuOperator(SpecModel):
    """The NVIDIA GPU Operator aksgpu installs (Helm) for GPU pools with driver None."""

    chart_version: Version = pinned("gpuOperator")
    """Version of the gpu-operator chart from https://helm.ngc.nvidia.com/nvidia. aksgpu's tests check its values against the pinned default's values.yaml."""
    driver_version: Version | None = None
    """NVIDIA driver the operator installs (its driver.version value), e.g. "580.105.08". None: the chart's default for chartVersion."""


class NetworkOperator(SpecModel):
    """The NVIDIA Network Operator aksgpu installs (Helm) when the cluster has InfiniBand GPU pools: the DOCA-OFED driver and the RDMA shared device plugin on those pools, as Azure's AKS guide does."""

    chart_version: Version = pinned("networkOperator")
    """Version of the network-operator chart from https://helm.ngc.nvidia.com/nvidia. aksgpu's tests check its values and NicClusterPolicy against the pinned default's values.yaml and CRD."""


class GpuSoftware(SpecModel):
    """What makes GPUs schedulable: exactly one component advertises nvidia.com/gpu on each GPU pool."""

    device_plugin: DevicePlugin = DevicePlugin()
    """The NVIDIA device plugin DaemonSet for pools with gpu.driver Install (AKS installs the driver and container runtime)."""
    gpu_operator: GpuOperator = GpuOperator()
    """The NVIDIA GPU Operator (driver, container toolkit, device plugin, DCGM exporter, MIG manager) for pools with gpu.driver None."""
    network_operator: NetworkOperator = NetworkOperator()
    """The NVIDIA Network Operator (DOCA-OFED driver, RDMA shared device plugin) for InfiniBand GPU pools (ND sizes with an r); nothing is installed without such pools."""


def gpu_pools(spec: ClusterSpec) -> list[NodePool]:
    return [pool for pool in spec.node_pools if pool.kind == "gpu"]


def check_in_cluster(spec: ClusterSpec) -> Iterator[Issue]:
    gpus = gpu_pools(spec)
    if not spec.in_cluster.enabled:
        if gpus:
            yield Issue("inCluster.enabled", False,
                        "GPU pools need a device plugin (or the GPU Operator) before a pod can request a GPU, and "
                        "with the in-cluster layer off aksgpu installs none", "install the NVIDIA device plugin or "
                        "GPU Operator yourself, or set inCluster.enabled: true", "warning")
        return
    for index, pool in enumerate(spec.node_pools):
        if pool.gpu_vendor == "amd":
            yield Issue(f"nodePools[{index}].vmSize", pool.vm_size,
                        "aksgpu installs NVIDIA GPU software only; AMD GPUs need the AMD GPU Operator, which aksgpu "
                        "does not deploy", "use an NVIDIA size, or set inCluster.enabled: false and install the AMD "
                        "GPU Operator yourself")
    yield from check_fabric(spec)
    api = spec.control_plane.api_server
    if api.access == "private":
        yield Issue("controlPlane.apiServer.access", "private",
                    "the in-cluster layer is applied through the Kubernetes API, which a private cluster serves "
                    "only inside its VNet", "run `pulumi up` from a machine or CI runner that reaches the VNet "
                    "(peered network, VPN or self-hosted runner), or set inCluster.enabled: false", "warning")

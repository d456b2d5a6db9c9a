"""The in-cluster layer: the Kubernetes provider aksgpu signs in with, and the GPU software that
makes each GPU pool's GPUs schedulable (the NVIDIA device plugin or the GPU Operator, by the
pool's driver mode)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Literal

from aksgpu import catalog

from aksgpu.spec.base import Issue, SpecModel, checked
from aksgpu.spec.fabric import check_fabric

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.pools import NodePool

# Image tags and chart versions: letters, digits, '.', '-' and '_' (an OCI tag is at most 128).
VERSION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

Version = Annotated[
    str,
    checked(VERSION.fullmatch, "must be an image tag or chart version: letters, digits, '.', '-' or '_'",
            'write it like "v0.20.0"'),
]


def pinned(component: str) -> str:
    """The version aksgpu pins for `component` (aksgpu/catalog/in_cluster.yaml)."""
    return str(catalog.load("in_cluster")[component]["version"])


def pinned_image(component: str) -> str:
    """image:version@digest of `component` as aksgpu pins it (the digest: catalog/images.yaml)."""
    return catalog.image_reference(component, pinned(component))


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


class DraDriver(SpecModel):
    """The NVIDIA DRA driver for GPUs aksgpu installs (Helm) when the cluster has Grace Blackwell pools (ND GB200 v6, ND GB300 v6): ComputeDomains only, for multi-node NVLink; GPUs stay with the GPU Operator's device plugin."""

    chart_version: Version = pinned("draDriver")
    """Version of the dra-driver-nvidia-gpu chart from https://helm.ngc.nvidia.com/nvidia. aksgpu's tests check its values against the pinned default's values.yaml and templates."""


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
    dra_driver: DraDriver = DraDriver()
    """The NVIDIA DRA driver (ComputeDomains), installed only when the cluster has GB200 or GB300 pools."""
    network_operator: NetworkOperator = NetworkOperator()
    """The NVIDIA Network Operator (DOCA-OFED driver, RDMA shared device plugin) for InfiniBand GPU pools (ND sizes with an r); nothing is installed without such pools."""


def gpu_pools(spec: ClusterSpec) -> list[NodePool]:
    return [pool for pool in spec.node_pools if pool.kind == "gpu"]


def is_grace_blackwell(pool: NodePool) -> bool:
    """A GPU pool of the GB200/GB300 sizes (vm_sizes.yaml graceBlackwell.series): Arm64 Grace CPUs,
    multi-node NVLink through the NVIDIA DRA driver's ComputeDomains."""
    size = pool.size
    return (pool.kind == "gpu" and size is not None
            and size.series in catalog.load("vm_sizes")["graceBlackwell"]["series"])


def arm64_image(component: str) -> tuple[bool | None, str]:
    """Whether the image of `component` publishes linux/arm64 (None: not verified), and the source."""
    entry = catalog.load("in_cluster")["arm64"][component]
    return entry["arm64"], entry["source"]


def _driver_version(text: str) -> tuple[int, ...] | None:
    """An NVIDIA driver version as numbers ("580.105.08" -> (580, 105, 8)); None when it is not one."""
    parts = text.split(".")
    return tuple(int(part) for part in parts) if all(part.isdigit() for part in parts) else None


def _check_compute_domain_driver(spec: ClusterSpec) -> Iterator[Issue]:
    """The driver the GPU Operator installs is one the DRA driver's ComputeDomain plugin starts on."""
    chosen = spec.gpu_software.gpu_operator.driver_version
    if chosen is None or not any(is_grace_blackwell(pool) for pool in spec.node_pools):
        return
    minimum = str(catalog.load("in_cluster")["draDriver"]["minDriverVersion"])
    found, floor = _driver_version(chosen), _driver_version(minimum)
    if found is not None and floor is not None and found < floor:
        yield Issue("gpuSoftware.gpuOperator.driverVersion", chosen,
                    f"the NVIDIA DRA driver's ComputeDomain plugin, which GB200/GB300 pools need, does not start on "
                    f"NVIDIA drivers older than {minimum} (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 "
                    "docs/prerequisites.md and cmd/compute-domain-kubelet-plugin)",
                    f'set driverVersion to "{minimum}" or newer, or leave it unset for the GPU Operator\'s default')


def _check_arm64_images(spec: ClusterSpec) -> Iterator[Issue]:
    """Every image aksgpu runs on an Arm64 GPU pool must publish linux/arm64 (in_cluster.yaml arm64)."""
    arm = [f"nodePools[{index}]" for index, pool in enumerate(spec.node_pools)
           if pool.kind == "gpu" and pool.size is not None and pool.size.cpu_architecture == "Arm64"]
    gate = spec.gpu_health.gate
    if not arm or not gate.enabled:
        return
    pools = ", ".join(arm)
    for field, image, component in (("gpuHealth.gate.image", gate.image, "dcgm"),
                                    ("gpuHealth.gate.helperImage", gate.helper_image, "python")):
        if image != pinned_image(component):
            hint = ("; aksgpu's own check builds on pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime, whose arm64 "
                    f"variant was not verified ({arm64_image('gpuCheck')[1]})") if field == "gpuHealth.gate.image" else ""
            yield Issue(field, image, f"{pools} are Arm64 (NVIDIA Grace), and aksgpu cannot see whether this image "
                        f"publishes linux/arm64{hint}", f"check that `docker manifest inspect {image}` lists linux/arm64, "
                        "or build it with `docker buildx build --platform linux/amd64,linux/arm64`", "warning")
            continue
        arm64, source = arm64_image(component)
        if arm64 is False:
            yield Issue(field, image, f"{pools} are Arm64 (NVIDIA Grace), and this image has no linux/arm64 variant "
                        f"({source})", "set an image that publishes linux/arm64")
        elif arm64 is None:
            yield Issue(field, image, f"{pools} are Arm64 (NVIDIA Grace), and that this image publishes linux/arm64 "
                        f"is not verified ({source})", f"check that `docker manifest inspect {image}` lists linux/arm64, "
                        "or set an image that does", "warning")


def _check_network_policy_engine(spec: ClusterSpec, gpus: bool) -> Iterator[Issue]:
    """aksgpu's system namespace gets NetworkPolicies (components/kubernetes/network_policy.py), which
    nothing enforces without an engine: AKS's networkPolicy none means "Network policies will not be
    enforced" (the AKS API's NetworkPolicy enum; https://learn.microsoft.com/azure/aks/use-network-policies,
    checked 2026-11-27)."""
    if gpus and spec.network.policy == "none":
        yield Issue("network.policy", "none", "aksgpu declares NetworkPolicies for its namespace (only the metrics "
                    "scraper may reach the DCGM exporter's port), and without a network policy engine AKS does not "
                    "enforce them: every pod can reach that port", "set network.policy: cilium (with dataplane: "
                    "cilium), azure or calico", "warning")


def check_in_cluster(spec: ClusterSpec) -> Iterator[Issue]:
    gpus = gpu_pools(spec)
    if not spec.in_cluster.enabled:
        if gpus:
            dra = (" (and GB200/GB300 pools the NVIDIA DRA driver for ComputeDomains)"
                   if any(is_grace_blackwell(pool) for pool in gpus) else "")
            yield Issue("inCluster.enabled", False,
                        f"GPU pools need a device plugin (or the GPU Operator){dra} before a pod can request a GPU, "
                        "and with the in-cluster layer off aksgpu installs none", "install the NVIDIA device plugin "
                        "or GPU Operator yourself, or set inCluster.enabled: true", "warning")
        return
    for index, pool in enumerate(spec.node_pools):
        if pool.gpu_vendor == "amd":
            yield Issue(f"nodePools[{index}].vmSize", pool.vm_size,
                        "aksgpu installs NVIDIA GPU software only; AMD GPUs need the AMD GPU Operator, which aksgpu "
                        "does not deploy", "use an NVIDIA size, or set inCluster.enabled: false and install the AMD "
                        "GPU Operator yourself")
    yield from _check_arm64_images(spec)
    yield from _check_network_policy_engine(spec, bool(gpus))
    yield from _check_compute_domain_driver(spec)
    yield from check_fabric(spec)
    api = spec.control_plane.api_server
    if api.access == "private":
        yield Issue("controlPlane.apiServer.access", "private",
                    "the in-cluster layer is applied through the Kubernetes API, which a private cluster serves "
                    "only inside its VNet", "run `pulumi up` from a machine or CI runner that reaches the VNet "
                    "(peered network, VPN or self-hosted runner), or set inCluster.enabled: false", "warning")

"""The rules of a gpu pool's VM size: GPUs, retirement, MIG, vendor, and what AKS needs of the
Grace Blackwell sizes (GB200, GB300)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from aksgpu import catalog
from aksgpu.spec.base import Issue

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.pools import NodePool


def check_gpu(pool: NodePool, path: str) -> Iterator[Issue]:
    """A gpu pool has a GPU size, MIG where the GPU has it, the driver its vendor needs; a cpu pool no GPUs."""
    if pool.kind == "gpu" and pool.os_sku.startswith("AzureLinux"):
        yield Issue(f"{path}.osSku", pool.os_sku, "AKS applies no automatic security patches to Azure Linux GPU "
                    "nodes", "use Ubuntu for GPU pools, or plan node image upgrades yourself", "warning")
    size = pool.size
    gpus = size.gpus if size else None
    if size and size.retired:
        replacement = size.replacement or "Standard_NC24ads_A100_v4"
        yield Issue(f"{path}.vmSize", pool.vm_size, f"this size was retired on {size.retired}",
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
    if settings.mig_profile and not size.mig:
        yield Issue(f"{path}.gpu.migProfile", settings.mig_profile,
                    f"MIG needs an A100, H100 or H200 size; {pool.vm_size} has "
                    f"{'part of ' if size.gpu_fraction else ''}{size.gpu_model}",
                    "remove migProfile, or use a MIG-capable size")
    elif settings.mig_profile and settings.mig_profile not in size.mig_profiles:
        yield Issue(f"{path}.gpu.migProfile", settings.mig_profile,
                    f"{size.gpu_model} has no such MIG profile (it has {', '.join(size.mig_profiles)})",
                    "use one of those profiles")
    if size.vendor == "amd" and settings.driver != "None":
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


def check_grace_blackwell(pool: NodePool, path: str, spec: ClusterSpec) -> Iterator[Issue]:
    """What AKS needs of a GB200 or GB300 pool (vm_sizes.yaml graceBlackwell, with the sources)."""
    rules = catalog.load("vm_sizes")["graceBlackwell"]
    size = pool.size
    if pool.kind != "gpu" or size is None or size.series not in rules["series"]:
        return
    source, model = rules["source"], size.gpu_model
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
    others = sorted({p.vm_size for p in spec.node_pools if p.size is not None and p.size.infiniband
                     and p.size.series not in rules["series"]})
    conflict = (f"; this cluster also has InfiniBand pools of {', '.join(others)}, which want it Registered, so put "
                "them in another subscription") if others else ""
    yield Issue(f"{path}.vmSize", pool.vm_size,
                f"the subscription's AKSInfinibandSupport feature must be {rules['infinibandFeature'].lower()} for "
                f"{model} pools, and aksgpu cannot see its state ({source['infinibandFeature']}){conflict}",
                "check `az feature show --namespace Microsoft.ContainerService --name AKSInfinibandSupport`; if it "
                "is Registered, run `az feature unregister --namespace Microsoft.ContainerService --name "
                "AKSInfinibandSupport` and `az provider register -n Microsoft.ContainerService` before `pulumi up`",
                "warning")
